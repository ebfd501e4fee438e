//! Netflix's Vegas: TCP Vegas's queue estimate, `limit x (1 - noLoadRtt / rtt)`, kept between
//! two thresholds.

use super::algorithm::{ChangeReason, LimitAlgorithm, LimitUpdate, Quiet, RttEstimates};
use super::error::{AdaptiveError, Check};
use super::random::Jitter;
use super::sample::Sample;
use super::sampling::{Sampling, Windower};
use std::time::Duration;

/// Vegas's settings; the defaults are Netflix's (`VegasLimit.Builder`), updated on every
/// sample as Netflix's limiters use it by default.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct VegasConfig {
    /// The limit before any sample (Netflix: 20).
    pub initial_limit: u32,
    /// The limit never goes above this (Netflix: 1000); never below 1.
    pub max_limit: u32,
    /// How much of each new estimate is taken, 0 to 1 (Netflix: 1).
    pub smoothing: f64,
    /// The no-load RTT is measured again every `probe_multiplier x limit` updates, jittered by
    /// 0.5 to 1 (Netflix: 30).
    pub probe_multiplier: u32,
    /// When the limit is updated (default: every sample).
    pub sampling: Sampling,
}

impl Default for VegasConfig {
    fn default() -> Self {
        Self {
            initial_limit: 20,
            max_limit: 1000,
            smoothing: 1.0,
            probe_multiplier: 30,
            sampling: Sampling::EverySample,
        }
    }
}

impl VegasConfig {
    /// Checks the settings: `1 <= initial_limit <= max_limit`, smoothing in `0..=1`, a probe
    /// multiplier of at least 1.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] naming the first field at fault.
    pub fn validate(&self) -> Result<(), AdaptiveError> {
        let check = Check { algorithm: "vegas" };
        check.positive("initial_limit", self.initial_limit)?;
        check.ordered(
            "initial_limit",
            self.initial_limit,
            "max_limit",
            self.max_limit,
        )?;
        check.within("smoothing", self.smoothing, 0.0, 1.0)?;
        check.positive("probe_multiplier", self.probe_multiplier)?;
        self.sampling.validate(&check)
    }
}

/// Netflix's `Log10RootFunction`: `max(1, (int) log10(n))` below 1000, `(int) sqrt(n)` from
/// there.
fn log10_root(n: i64) -> i64 {
    if n < 1000 {
        if n <= 0 {
            return 1;
        }
        ((n as f64).log10() as i64).max(1)
    } else {
        (n as f64).sqrt() as i64
    }
}

/// Netflix's Vegas limit.
///
/// With `noLoad` the smallest RTT seen since the last probe and `queue = ceil(limit x (1 -
/// noLoad / rtt))`, at each update (`l = log10_root(limit)`: `max(1, floor(log10(limit)))`
/// below 1000, `floor(sqrt(limit))` from there):
///
/// - a drop: `limit - l`;
/// - in-flight under half the limit: no change;
/// - `queue <= l`: `limit + 6l` (no queue: grow fast);
/// - `queue < 3l`: `limit + l`;
/// - `queue > 6l`: `limit - l`;
/// - otherwise no change;
///
/// clamped to `1..=max_limit` and smoothed. A sample faster than `noLoad` becomes the new
/// `noLoad` without an update, and every `probe_multiplier x limit` updates (jittered by 0.5 to
/// 1) the next sample's RTT replaces `noLoad`, so that a baseline that moved up is found again.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{LimitAlgorithm, Sample, Vegas, VegasConfig};
/// use std::time::Duration;
///
/// let mut vegas = Vegas::with_seed(VegasConfig::default(), 7)?;
/// let sample = |ms, in_flight| Sample {
///     started_nanos: 0,
///     rtt: Duration::from_millis(ms),
///     in_flight,
///     dropped: false,
/// };
/// assert_eq!(vegas.on_sample(&sample(10, 20), 0, 20), None); // the first sets the no-load RTT
/// // No queue at the no-load RTT: grow by 6 x log10(20) = 6.
/// assert_eq!(vegas.on_sample(&sample(10, 20), 0, 20).map(|u| u.limit), Some(26));
/// // RTT doubled: a queue of ceil(26 x 0.5) = 13 > 6: shrink by 1.
/// assert_eq!(vegas.on_sample(&sample(20, 26), 0, 26).map(|u| u.limit), Some(25));
/// # Ok::<(), spillway::adaptive::AdaptiveError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Vegas {
    config: VegasConfig,
    estimated: f64,
    rtt_no_load: u64,
    last_rtt: u64,
    probe_count: u64,
    probe_jitter: f64,
    jitter: Jitter,
    windower: Windower,
}

impl Vegas {
    /// Vegas with `config`, its probes jittered at random.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] if `config` does not [validate](VegasConfig::validate).
    pub fn new(config: VegasConfig) -> Result<Self, AdaptiveError> {
        Self::with_jitter(config, Jitter::random())
    }

    /// Vegas with `config`, its probe jitter drawn from `seed` (reproducible).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_seed(config: VegasConfig, seed: u64) -> Result<Self, AdaptiveError> {
        Self::with_jitter(config, Jitter::with_seed(seed))
    }

    fn with_jitter(config: VegasConfig, mut jitter: Jitter) -> Result<Self, AdaptiveError> {
        config.validate()?;
        let probe_jitter = jitter.next_f64(0.5, 1.0);
        Ok(Self {
            config,
            estimated: f64::from(config.initial_limit),
            rtt_no_load: 0,
            last_rtt: 0,
            probe_count: 0,
            probe_jitter,
            jitter,
            windower: Windower::new(config.sampling),
        })
    }

    /// The limit as the algorithm keeps it.
    pub fn estimated_limit(&self) -> f64 {
        self.estimated
    }

    fn should_probe(&self) -> bool {
        self.probe_jitter * f64::from(self.config.probe_multiplier) * self.estimated
            <= self.probe_count as f64
    }

    /// Netflix's `_update`, RTTs in nanoseconds; `None` when the limit is not recomputed.
    fn update(&mut self, rtt: u64, in_flight: u32, dropped: bool) -> Option<LimitUpdate> {
        let rtt = rtt.max(1);
        self.last_rtt = rtt;
        self.probe_count += 1;
        if self.should_probe() {
            self.probe_jitter = self.jitter.next_f64(0.5, 1.0);
            self.probe_count = 0;
            self.rtt_no_load = rtt;
            return None;
        }
        if self.rtt_no_load == 0 || rtt < self.rtt_no_load {
            self.rtt_no_load = rtt;
            return None;
        }
        let limit = self.estimated as i64;
        let queue = (self.estimated * (1.0 - self.rtt_no_load as f64 / rtt as f64)).ceil() as i64;
        let l = log10_root(limit) as f64;
        let (new, reason) = if dropped {
            (self.estimated - l, ChangeReason::Dropped)
        } else if f64::from(in_flight) * 2.0 < self.estimated {
            return None;
        } else {
            let (alpha, beta, threshold) = (3 * log10_root(limit), 6 * log10_root(limit), l as i64);
            if queue <= threshold {
                (self.estimated + beta as f64, ChangeReason::Grew)
            } else if queue < alpha {
                (self.estimated + l, ChangeReason::Grew)
            } else if queue > beta {
                (self.estimated - l, ChangeReason::LatencyRose)
            } else {
                return None;
            }
        };
        let new = new.clamp(1.0, f64::from(self.config.max_limit));
        let new = (1.0 - self.config.smoothing) * self.estimated + self.config.smoothing * new;
        self.estimated = new;
        Some(LimitUpdate::new(new as u32, reason))
    }
}

impl LimitAlgorithm for Vegas {
    fn initial_limit(&self) -> u32 {
        self.config.initial_limit
    }

    fn on_sample(&mut self, sample: &Sample, now_nanos: u64, limit: u32) -> Option<LimitUpdate> {
        let observation = self.windower.add(sample, now_nanos)?;
        let rtt = u64::try_from(observation.rtt.as_nanos()).unwrap_or(u64::MAX);
        let update = self.update(rtt, observation.in_flight, observation.dropped)?;
        (update.limit != limit).then_some(update)
    }

    fn estimates(&self) -> RttEstimates {
        let duration = |nanos: u64| (nanos > 0).then(|| Duration::from_nanos(nanos));
        RttEstimates {
            baseline: duration(self.rtt_no_load),
            latest: duration(self.last_rtt),
        }
    }

    fn quiet(&self, _: u32) -> Quiet {
        // Every sample goes through the windower first, and nothing else moves before it
        // gives an update (each sample moves the averages when it looks at every one).
        self.windower.quiet()
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::log10_root;

    #[test]
    fn log10_root_is_netflix_s_table() {
        let cases = [
            (0, 1),
            (1, 1),
            (9, 1),
            (10, 1),
            (99, 1),
            (100, 2),
            (999, 2),
            (1000, 31),
        ];
        for (n, expected) in cases {
            assert_eq!(log10_root(n), expected, "log10_root({n})");
        }
    }
}
