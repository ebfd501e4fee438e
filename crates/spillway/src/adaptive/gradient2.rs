//! Netflix's Gradient2: the limit follows the ratio of a long-term average RTT to the current
//! one, allowing a fixed queue.

use super::algorithm::{ChangeReason, LimitAlgorithm, LimitUpdate, Quiet, RttEstimates};
use super::error::{AdaptiveError, Check};
use super::exp_avg::ExpAvg;
use super::sample::Sample;
use super::sampling::{Sampling, WindowPolicy, Windower};
use std::time::Duration;

/// Gradient2's settings; the defaults are Netflix's (`Gradient2Limit.Builder`), sampled through
/// Netflix's default `WindowedLimit`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct Gradient2Config {
    /// The limit before any sample (Netflix: 20).
    pub initial_limit: u32,
    /// The limit never goes below this (Netflix: 20).
    pub min_limit: u32,
    /// ... nor above this (Netflix: 200).
    pub max_limit: u32,
    /// How much of each new estimate is taken, 0 to 1 (Netflix: 0.2).
    pub smoothing: f64,
    /// Calls allowed to queue: added to the limit at each update (Netflix: 4).
    pub queue_size: u32,
    /// How much slower than the long-term RTT a window may be before the limit shrinks
    /// (Netflix: 1.5).
    pub rtt_tolerance: f64,
    /// Samples the long-term RTT averages over (Netflix: 600).
    pub long_window: u32,
    /// When the limit is updated (default: Netflix's `WindowedLimit` defaults).
    pub sampling: Sampling,
}

impl Default for Gradient2Config {
    fn default() -> Self {
        Self {
            initial_limit: 20,
            min_limit: 20,
            max_limit: 200,
            smoothing: 0.2,
            queue_size: 4,
            rtt_tolerance: 1.5,
            long_window: 600,
            sampling: Sampling::Window(WindowPolicy::default()),
        }
    }
}

impl Gradient2Config {
    /// Checks the settings: limits at least 1 and ordered (`min_limit <= initial_limit <=
    /// max_limit`), smoothing in `0..=1`, an RTT tolerance from 1 to 100, a long window of at
    /// least 1.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] naming the first field at fault.
    pub fn validate(&self) -> Result<(), AdaptiveError> {
        let check = Check {
            algorithm: "gradient2",
        };
        check.limits(self.min_limit, self.initial_limit, self.max_limit)?;
        check.within("smoothing", self.smoothing, 0.0, 1.0)?;
        check.within("rtt_tolerance", self.rtt_tolerance, 1.0, 100.0)?;
        check.positive("long_window", self.long_window)?;
        self.sampling.validate(&check)
    }
}

/// Netflix's Gradient2 limit.
///
/// At each update, with `short` the window's average RTT and `long` an exponential average of
/// those (over `long_window` samples, after a plain average of the first 10):
///
/// - if `long / short > 2`, `long` is scaled by 0.95 (latency fell back after a long
///   overload);
/// - if the largest in-flight count is under half the limit, nothing changes (the limit is not
///   what holds traffic back);
/// - otherwise `gradient = clamp(rtt_tolerance x long / short, 0.5, 1)`, `new = limit x gradient +
///   queue_size`, smoothed: `limit x (1 - smoothing) + new x smoothing`, clamped to
///   `min_limit..=max_limit`.
///
/// The limit kept is a real number; the limit applied is its integer part.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{Gradient2, Gradient2Config, LimitAlgorithm, Sample, Sampling};
/// use std::time::Duration;
///
/// let mut gradient2 = Gradient2::new(Gradient2Config {
///     initial_limit: 20,
///     min_limit: 1,
///     sampling: Sampling::EverySample,
///     ..Default::default()
/// })?;
/// let mut limit = 20;
/// let mut feed = |gradient2: &mut Gradient2, limit: &mut u32, ms| {
///     let sample = Sample {
///         started_nanos: 0,
///         rtt: Duration::from_millis(ms),
///         in_flight: *limit,
///         dropped: false,
///     };
///     if let Some(update) = gradient2.on_sample(&sample, 0, *limit) {
///         *limit = update.limit;
///     }
/// };
/// // Latency steady, the limit in use: it grows by the queue size (4), smoothed (x 0.2).
/// for _ in 0..10 {
///     feed(&mut gradient2, &mut limit, 10);
/// }
/// assert_eq!(limit, 28);
/// // Latency ten times higher: the long-term average lags, the gradient falls, so does the
/// // limit.
/// for _ in 0..10 {
///     feed(&mut gradient2, &mut limit, 100);
/// }
/// assert!(limit < 28);
/// # Ok::<(), spillway::adaptive::AdaptiveError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Gradient2 {
    config: Gradient2Config,
    estimated: f64,
    short_rtt: f64,
    long_rtt: ExpAvg,
    windower: Windower,
}

impl Gradient2 {
    /// Gradient2 with `config`.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] if `config` does not [validate](Gradient2Config::validate).
    pub fn new(config: Gradient2Config) -> Result<Self, AdaptiveError> {
        config.validate()?;
        Ok(Self {
            config,
            estimated: f64::from(config.initial_limit),
            short_rtt: 0.0,
            long_rtt: ExpAvg::new(config.long_window, 10),
            windower: Windower::new(config.sampling),
        })
    }

    /// The limit as the algorithm keeps it (a real number; the limit applied is its integer
    /// part).
    pub fn estimated_limit(&self) -> f64 {
        self.estimated
    }

    /// Netflix's `_update`, with RTTs in nanoseconds.
    fn update(&mut self, rtt: f64, in_flight: u32) -> LimitUpdate {
        let queue_size = f64::from(self.config.queue_size);
        self.short_rtt = rtt;
        let short = rtt;
        let long = self.long_rtt.add(rtt);
        if long / short > 2.0 {
            self.long_rtt.scale(0.95);
        }
        let before = self.estimated;
        if f64::from(in_flight) < self.estimated / 2.0 {
            return LimitUpdate::new(self.estimated as u32, ChangeReason::Grew);
        }
        let gradient = (self.config.rtt_tolerance * long / short).clamp(0.5, 1.0);
        let mut new = self.estimated * gradient + queue_size;
        new = self.estimated * (1.0 - self.config.smoothing) + new * self.config.smoothing;
        new = new.clamp(
            f64::from(self.config.min_limit),
            f64::from(self.config.max_limit),
        );
        self.estimated = new;
        let reason = if new < before {
            ChangeReason::LatencyRose
        } else {
            ChangeReason::Grew
        };
        LimitUpdate::new(new as u32, reason)
    }
}

impl LimitAlgorithm for Gradient2 {
    fn initial_limit(&self) -> u32 {
        self.config.initial_limit
    }

    fn on_sample(&mut self, sample: &Sample, now_nanos: u64, limit: u32) -> Option<LimitUpdate> {
        let observation = self.windower.add(sample, now_nanos)?;
        let update = self.update(observation.rtt.as_nanos() as f64, observation.in_flight);
        (update.limit != limit).then_some(update)
    }

    fn estimates(&self) -> RttEstimates {
        let duration = |nanos: f64| (nanos > 0.0).then(|| Duration::from_nanos(nanos as u64));
        RttEstimates {
            baseline: duration(self.long_rtt.get()),
            latest: duration(self.short_rtt),
        }
    }

    fn quiet(&self, _: u32) -> Quiet {
        // Every sample goes through the windower first, and nothing else moves before it
        // gives an update (each sample moves the averages when it looks at every one).
        self.windower.quiet()
    }
}
