//! What the lab simulates: the service, its clients and how long each run lasts.

use spillway::adaptive::{AdaptiveQueue, BbrConfig, EnvoyGradientConfig, QueueOrder};
use std::fmt;
use std::time::Duration;

/// How long one request's work takes, before any slowdown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServiceTime {
    /// Always the same time (a deterministic service).
    Fixed {
        /// The time.
        time: Duration,
    },
    /// Exponentially distributed with this mean (an M/M/c service).
    Exponential {
        /// The mean.
        mean: Duration,
    },
    /// Log-normally distributed with this mean and shape `sigma` (the standard deviation of the
    /// underlying normal): a long right tail, as real services have.
    LogNormal {
        /// The mean (not the median: the median is `mean x exp(-sigma^2 / 2)`).
        mean: Duration,
        /// The shape, at least 0; 0 is a fixed time.
        sigma: f64,
    },
    /// Two fixed times: most requests take the fast one, a share `slow_share` take
    /// `slow_factor` times as long (a cache hit and a miss, say), the two weighted to `mean`.
    Bimodal {
        /// The mean over both.
        mean: Duration,
        /// The share of slow requests, from 0 to 1 (the issue's shape: 0.1).
        slow_share: f64,
        /// How many times the fast time a slow request takes, from 1 to 1000 (the issue's
        /// shape: 10).
        slow_factor: f64,
    },
}

impl ServiceTime {
    /// The mean service time.
    pub fn mean(&self) -> Duration {
        match *self {
            ServiceTime::Fixed { time: mean }
            | ServiceTime::Exponential { mean }
            | ServiceTime::LogNormal { mean, .. }
            | ServiceTime::Bimodal { mean, .. } => mean,
        }
    }

    /// The same shape with mean `mean`.
    pub fn with_mean(self, mean: Duration) -> Self {
        match self {
            ServiceTime::Fixed { .. } => ServiceTime::Fixed { time: mean },
            ServiceTime::Exponential { .. } => ServiceTime::Exponential { mean },
            ServiceTime::LogNormal { sigma, .. } => ServiceTime::LogNormal { mean, sigma },
            ServiceTime::Bimodal {
                slow_share,
                slow_factor,
                ..
            } => ServiceTime::Bimodal {
                mean,
                slow_share,
                slow_factor,
            },
        }
    }

    /// A bimodal service's two times, fast and slow: `fast x (1 - share) + fast x factor x
    /// share = mean`.
    pub fn bimodal_times(
        mean: Duration,
        slow_share: f64,
        slow_factor: f64,
    ) -> (Duration, Duration) {
        let fast = mean.as_secs_f64() / (1.0 - slow_share + slow_factor * slow_share);
        (
            Duration::from_secs_f64(fast),
            Duration::from_secs_f64(fast * slow_factor),
        )
    }

    /// A short description for tables: `exponential, mean 10ms`.
    pub fn label(&self) -> String {
        match *self {
            ServiceTime::Fixed { time } => {
                format!("fixed, {:.2}ms", time.as_secs_f64() * 1e3)
            }
            ServiceTime::Exponential { mean } => format!("exponential, mean {mean:?}"),
            ServiceTime::LogNormal { mean, sigma } => {
                format!("log-normal, mean {mean:?}, sigma {sigma}")
            }
            ServiceTime::Bimodal {
                mean,
                slow_share,
                slow_factor,
            } => format!(
                "bimodal, mean {mean:?}, {:.0}% {slow_factor}x slower",
                slow_share * 100.0
            ),
        }
    }
}

/// What a client does when an attempt is refused or times out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RetryPolicy {
    /// Give up at once.
    Off,
    /// Try again up to `retries` more times, waiting `backoff x 2^k` before retry `k` (from 0),
    /// jittered uniformly between half and all of it.
    Backoff {
        /// Retries after the first attempt.
        retries: u32,
        /// The wait before the first retry (before jitter).
        backoff: Duration,
    },
}

impl RetryPolicy {
    /// The number of retries after the first attempt.
    pub fn retries(&self) -> u32 {
        match *self {
            RetryPolicy::Off => 0,
            RetryPolicy::Backoff { retries, .. } => retries,
        }
    }
}

/// The simulated service, its clients and the run lengths.
///
/// The defaults: 8 workers, exponential service times with a 10 ms mean (capacity 800 requests a
/// second), clients that give up after 200 ms and retry twice, 50 ms then 100 ms later (jittered),
/// sweeps of 30 s measured after 5 s, seed 1.
///
/// # Examples
///
/// ```
/// use spillway_lab::LabParams;
///
/// let params = LabParams::default();
/// assert_eq!(params.capacity(), 800.0);
/// params.validate()?;
/// # Ok::<(), spillway_lab::LabError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LabParams {
    /// Requests the service works on at once (its cores); more wait in a FIFO queue.
    pub workers: u32,
    /// The service-time distribution.
    pub service_time: ServiceTime,
    /// How long a client waits for an answer before it gives up (the service does not know, and
    /// finishes the work anyway).
    pub client_timeout: Duration,
    /// What a client does after a refusal or a timeout.
    pub retry: RetryPolicy,
    /// The seed of every random draw: the same seed gives the same numbers, byte for byte.
    pub seed: u64,
    /// A sweep point's warm-up, not measured.
    pub warm_up: Duration,
    /// A sweep point's measured time, after the warm-up.
    pub measure: Duration,
    /// The queue the adaptive strategies' limits get (none by default: a full limit refuses
    /// at once).
    pub adaptive_queue: Option<AdaptiveQueue>,
    /// `envoy_gradient`'s settings, which the scenarios with claims' recommended rule takes
    /// too (spillway's defaults by default: Envoy's pinned start, its buffer, windows of at
    /// least 12 minRTTs; see [`EnvoyGradientConfig`]).
    pub envoy: EnvoyGradientConfig,
    /// `bbr_probe`'s settings (its defaults by default; see [`BbrConfig`]).
    pub bbr: BbrConfig,
    /// `static_concurrency`'s limit (`None` by default: twice the workers, the workers' calls
    /// plus as many queued; see [`LabParams::static_limit`]).
    pub static_concurrency_limit: Option<u32>,
    /// How much the service's time for the same work varies, from 0 (never: the default) to
    /// 0.5: each attempt's work takes its drawn time times a factor drawn uniformly from
    /// `1 - spread` to `1 + spread` (the mean kept), as a real service never takes exactly
    /// the same time twice. A retry draws its own factor. The draws come from the seed, on a
    /// stream of their own, so that the arrivals and the work drawn are the same with and
    /// without it; they are drawn as calls start, so two strategies' calls get different
    /// factors (the spread adds to what tells two runs apart).
    pub service_spread: f64,
}

impl Default for LabParams {
    fn default() -> Self {
        Self {
            workers: 8,
            service_time: ServiceTime::Exponential {
                mean: Duration::from_millis(10),
            },
            client_timeout: Duration::from_millis(200),
            retry: RetryPolicy::Backoff {
                retries: 2,
                backoff: Duration::from_millis(50),
            },
            seed: 1,
            warm_up: Duration::from_secs(5),
            measure: Duration::from_secs(30),
            adaptive_queue: None,
            envoy: EnvoyGradientConfig::default(),
            bbr: BbrConfig::default(),
            static_concurrency_limit: None,
            service_spread: 0.0,
        }
    }
}

impl LabParams {
    /// The short mode: the same service and clients, sweeps of 8 s measured after 2 s.
    pub fn quick(self) -> Self {
        Self {
            warm_up: Duration::from_secs(2),
            measure: Duration::from_secs(8),
            ..self
        }
    }

    /// The service's capacity in requests a second: workers / mean service time.
    pub fn capacity(&self) -> f64 {
        f64::from(self.workers) / self.service_time.mean().as_secs_f64()
    }

    /// The `static_concurrency` strategy's limit: [`LabParams::static_concurrency_limit`], else
    /// twice the workers.
    ///
    /// ```
    /// use spillway_lab::LabParams;
    ///
    /// let params = LabParams { workers: 4, ..LabParams::default() };
    /// assert_eq!(params.static_limit(), 8);
    /// let params = LabParams { static_concurrency_limit: Some(20), ..params };
    /// assert_eq!(params.static_limit(), 20);
    /// ```
    pub fn static_limit(&self) -> u32 {
        self.static_concurrency_limit
            .unwrap_or_else(|| self.workers.saturating_mul(2))
    }

    /// The `envoy_gradient` settings that are not spillway's defaults, as the lab's outputs
    /// name them, in the configuration file's terms and by name (`None`: the defaults).
    ///
    /// ```
    /// use spillway::adaptive::{BufferScaling, EnvoyGradientConfig};
    /// use spillway_lab::LabParams;
    ///
    /// assert_eq!(LabParams::default().envoy_settings(), None);
    /// let tuned = LabParams {
    ///     envoy: EnvoyGradientConfig {
    ///         start_limit: 50,
    ///         buffer_scaling: BufferScaling::Spread,
    ///         ..Default::default()
    ///     },
    ///     ..LabParams::default()
    /// };
    /// assert_eq!(
    ///     tuned.envoy_settings().unwrap(),
    ///     "`envoy_gradient` has buffer_scaling = \"spread\" and start_limit = 50"
    /// );
    /// ```
    pub fn envoy_settings(&self) -> Option<String> {
        changed_settings(
            "envoy_gradient",
            &self.envoy,
            &EnvoyGradientConfig::default(),
        )
    }

    /// The `bbr_probe` settings that are not its defaults, as [`envoy_settings`](Self::envoy_settings)
    /// names Envoy's (`None`: the defaults).
    ///
    /// ```
    /// use spillway::adaptive::BbrConfig;
    /// use spillway_lab::LabParams;
    ///
    /// assert_eq!(LabParams::default().bbr_settings(), None);
    /// let corrected = LabParams {
    ///     bbr: BbrConfig { rtt_correction: 1.0, ..Default::default() },
    ///     ..LabParams::default()
    /// };
    /// assert_eq!(corrected.bbr_settings().unwrap(), "`bbr` has rtt_correction = 1.0");
    /// ```
    pub fn bbr_settings(&self) -> Option<String> {
        changed_settings("bbr", &self.bbr, &BbrConfig::default())
    }

    /// Every setting of these runs that is not the lab's default, as its outputs name them:
    /// Envoy's, BBR's, the queue and the service's spread, each a clause.
    pub fn settings(&self) -> Vec<String> {
        [
            self.envoy_settings(),
            self.bbr_settings(),
            self.queue_settings(),
            self.spread_settings(),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The adaptive limits' queue as the lab's texts name it, when they have one (the tables
    /// of docs/overload.md have none).
    ///
    /// ```
    /// use spillway::adaptive::{AdaptiveQueue, QueueOrder};
    /// use spillway_lab::LabParams;
    /// use std::time::Duration;
    ///
    /// assert_eq!(LabParams::default().queue_settings(), None);
    /// let queued = LabParams {
    ///     adaptive_queue: Some(AdaptiveQueue {
    ///         capacity: 1000,
    ///         order: QueueOrder::Adaptive,
    ///         timeout: Duration::from_millis(190),
    ///     }),
    ///     ..LabParams::default()
    /// };
    /// assert_eq!(
    ///     queued.queue_settings().unwrap(),
    ///     "the adaptive limits have a queue: 1000 places, 190ms, order adaptive"
    /// );
    /// ```
    pub fn queue_settings(&self) -> Option<String> {
        self.adaptive_queue.map(|queue| {
            let order = match queue.order {
                QueueOrder::Fifo => "fifo",
                QueueOrder::Lifo => "lifo",
                QueueOrder::Adaptive => "adaptive",
            };
            format!(
                "the adaptive limits have a queue: {} places, {:?}, order {order}",
                queue.capacity, queue.timeout
            )
        })
    }

    /// The service's spread, if it has one, as the lab's outputs name it (in tenths of a
    /// percent).
    ///
    /// ```
    /// use spillway_lab::LabParams;
    ///
    /// assert_eq!(LabParams::default().spread_settings(), None);
    /// let varied = LabParams { service_spread: 0.07, ..LabParams::default() };
    /// assert_eq!(
    ///     varied.spread_settings().unwrap(),
    ///     "each simulated call takes its work's time within 7% either way"
    /// );
    /// let slight = LabParams { service_spread: 0.0004, ..LabParams::default() };
    /// assert!(slight.spread_settings().unwrap().contains("within 0.04%"));
    /// ```
    pub fn spread_settings(&self) -> Option<String> {
        (self.service_spread > 0.0).then(|| {
            let percent = self.service_spread * 100.0;
            // Rounded to what it was given as, so that 0.07 reads 7, not 7.000000000000001.
            let percent = format!("{:.4}", percent);
            let percent = percent.trim_end_matches('0').trim_end_matches('.');
            format!("each simulated call takes its work's time within {percent}% either way")
        })
    }

    /// Checks every parameter.
    ///
    /// # Errors
    ///
    /// A [`LabError`] naming the first bad parameter.
    pub fn validate(&self) -> Result<(), LabError> {
        if !self.service_spread.is_finite() || !(0.0..=0.5).contains(&self.service_spread) {
            return Err(LabError::new(
                "service_spread",
                format!("must be between 0 and 0.5, got {}", self.service_spread),
            ));
        }
        if self.workers == 0 || self.workers > 100_000 {
            return Err(LabError::new(
                "workers",
                format!("must be between 1 and 100000, got {}", self.workers),
            ));
        }
        let mean = self.service_time.mean();
        if mean < Duration::from_micros(1) || mean > Duration::from_secs(60) {
            return Err(LabError::new(
                "service_time.mean",
                format!("must be between 1us and 60s, got {mean:?}"),
            ));
        }
        if let ServiceTime::LogNormal { sigma, .. } = self.service_time {
            if !sigma.is_finite() || !(0.0..=4.0).contains(&sigma) {
                return Err(LabError::new(
                    "service_time.sigma",
                    format!("must be between 0 and 4, got {sigma}"),
                ));
            }
        }
        if let ServiceTime::Bimodal {
            slow_share,
            slow_factor,
            ..
        } = self.service_time
        {
            if !slow_share.is_finite() || !(0.0..=1.0).contains(&slow_share) {
                return Err(LabError::new(
                    "service_time.slow_share",
                    format!("must be between 0 and 1, got {slow_share}"),
                ));
            }
            if !slow_factor.is_finite() || !(1.0..=1000.0).contains(&slow_factor) {
                return Err(LabError::new(
                    "service_time.slow_factor",
                    format!("must be between 1 and 1000, got {slow_factor}"),
                ));
            }
        }
        if self.client_timeout < Duration::from_micros(1)
            || self.client_timeout > Duration::from_secs(600)
        {
            return Err(LabError::new(
                "client_timeout",
                format!(
                    "must be between 1us and 600s, got {:?}",
                    self.client_timeout
                ),
            ));
        }
        if let RetryPolicy::Backoff { retries, backoff } = self.retry {
            if retries > 10 {
                return Err(LabError::new(
                    "retry.retries",
                    format!("must be at most 10, got {retries}"),
                ));
            }
            if backoff > Duration::from_secs(60) {
                return Err(LabError::new(
                    "retry.backoff",
                    format!("must be at most 60s, got {backoff:?}"),
                ));
            }
        }
        if self.measure < Duration::from_secs(1) || self.measure > Duration::from_secs(3600) {
            return Err(LabError::new(
                "measure",
                format!("must be between 1s and 3600s, got {:?}", self.measure),
            ));
        }
        if self.warm_up > Duration::from_secs(3600) {
            return Err(LabError::new(
                "warm_up",
                format!("must be at most 3600s, got {:?}", self.warm_up),
            ));
        }
        if self.static_concurrency_limit == Some(0) {
            return Err(LabError::new(
                "static_concurrency_limit",
                "must be at least 1, got 0",
            ));
        }
        self.envoy.validate().map_err(|err| {
            // The field as the lab's command line names it.
            let field = match err.field() {
                "start_limit" => "envoy_start_limit",
                "buffer_scaling" => "envoy_buffer_scaling",
                "window_min_rtts" => "envoy_window_min_rtts",
                "in_flight_floor" => "envoy_in_flight_floor",
                _ => "envoy",
            };
            LabError::new(field, err.problem().to_string())
        })?;
        self.bbr.validate().map_err(|err| {
            let field = match err.field() {
                "rtt_correction" => "bbr_rtt_correction",
                _ => "bbr",
            };
            LabError::new(field, err.problem().to_string())
        })
    }
}

/// The fields of `config` that differ from `defaults`, in the configuration file's terms and
/// by name, as "`{algorithm}` has a = 1 and b = 2" (`None`: none differ).
fn changed_settings<T: serde::Serialize>(
    algorithm: &str,
    config: &T,
    defaults: &T,
) -> Option<String> {
    let fields = |config: &T| match serde_json::to_value(config) {
        Ok(serde_json::Value::Object(fields)) => fields,
        _ => serde_json::Map::new(),
    };
    let defaults = fields(defaults);
    let mut settings: Vec<String> = fields(config)
        .into_iter()
        .filter(|(name, value)| defaults.get(name) != Some(value))
        .map(|(name, value)| format!("{name} = {value}"))
        .collect();
    // By name, whatever order the map keeps.
    settings.sort();
    (!settings.is_empty()).then(|| format!("`{algorithm}` has {}", settings.join(" and ")))
}

/// A lab parameter that cannot be simulated: which one, and why.
///
/// # Examples
///
/// ```
/// use spillway_lab::LabParams;
///
/// let err = LabParams { workers: 0, ..LabParams::default() }.validate().unwrap_err();
/// assert_eq!(err.field(), "workers");
/// assert_eq!(err.to_string(), "lab parameter `workers`: must be between 1 and 100000, got 0");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabError {
    field: &'static str,
    message: String,
}

impl LabError {
    /// An error in parameter `field`.
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }

    /// The parameter at fault.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// What is wrong with it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lab parameter `{}`: {}", self.field, self.message)
    }
}

impl std::error::Error for LabError {}
