//! AIMD: additive increase while calls succeed in time, multiplicative decrease on a drop or a
//! call slower than a timeout (Netflix's `AIMDLimit`).

use super::algorithm::{ChangeReason, LimitAlgorithm, LimitUpdate, Quiet, RttEstimates};
use super::error::{AdaptiveError, Check};
use super::sample::Sample;
use super::sampling::{Sampling, Windower};
use std::time::Duration;

/// AIMD's settings; the defaults are Netflix's (`AIMDLimit.Builder`), updated on every sample.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct AimdConfig {
    /// The limit before any sample (Netflix: 20).
    pub initial_limit: u32,
    /// The limit never goes below this (Netflix: 20).
    pub min_limit: u32,
    /// ... nor above this (Netflix: 200).
    pub max_limit: u32,
    /// The limit is multiplied by this on a drop, from 0.5 to below 1 (Netflix: 0.9).
    pub backoff_ratio: f64,
    /// A call slower than this counts as a drop (Netflix: 5 s).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub timeout: Duration,
    /// When the limit is updated (default: every sample).
    pub sampling: Sampling,
}

impl Default for AimdConfig {
    fn default() -> Self {
        Self {
            initial_limit: 20,
            min_limit: 20,
            max_limit: 200,
            backoff_ratio: 0.9,
            timeout: Duration::from_secs(5),
            sampling: Sampling::EverySample,
        }
    }
}

impl AimdConfig {
    /// Checks the settings: `1 <= min_limit <= initial_limit <= max_limit`, a backoff ratio
    /// from 0.5 to below 1 (Netflix's bounds), a timeout longer than 0.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] naming the first field at fault.
    pub fn validate(&self) -> Result<(), AdaptiveError> {
        let check = Check { algorithm: "aimd" };
        check.limits(self.min_limit, self.initial_limit, self.max_limit)?;
        check.within("backoff_ratio", self.backoff_ratio, 0.5, 1.0)?;
        if self.backoff_ratio >= 1.0 {
            return Err(AdaptiveError::new(
                "aimd",
                "backoff_ratio",
                format!("must be below 1, got {}", self.backoff_ratio),
            ));
        }
        check.nonzero_duration("timeout", self.timeout)?;
        self.sampling.validate(&check)
    }
}

/// AIMD, as Netflix's `AIMDLimit`: on a drop, or a call slower than `timeout`, the limit
/// becomes `(int) (limit x backoff_ratio)`; otherwise, when at least half the limit is in use,
/// it grows by 1; clamped to `min_limit..=max_limit`.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{Aimd, AimdConfig, LimitAlgorithm, Sample};
/// use std::time::Duration;
///
/// let mut aimd = Aimd::new(AimdConfig { min_limit: 1, ..Default::default() })?;
/// let sample = |dropped| Sample {
///     started_nanos: 0,
///     rtt: Duration::from_millis(5),
///     in_flight: 20,
///     dropped,
/// };
/// assert_eq!(aimd.on_sample(&sample(false), 0, 20).map(|u| u.limit), Some(21));
/// assert_eq!(aimd.on_sample(&sample(true), 0, 21).map(|u| u.limit), Some(18)); // (int) 18.9
/// # Ok::<(), spillway::adaptive::AdaptiveError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Aimd {
    config: AimdConfig,
    last_rtt: Option<Duration>,
    windower: Windower,
}

impl Aimd {
    /// AIMD with `config`.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] if `config` does not [validate](AimdConfig::validate).
    pub fn new(config: AimdConfig) -> Result<Self, AdaptiveError> {
        config.validate()?;
        Ok(Self {
            config,
            last_rtt: None,
            windower: Windower::new(config.sampling),
        })
    }
}

impl LimitAlgorithm for Aimd {
    fn initial_limit(&self) -> u32 {
        self.config.initial_limit
    }

    fn on_sample(&mut self, sample: &Sample, now_nanos: u64, limit: u32) -> Option<LimitUpdate> {
        let observation = self.windower.add(sample, now_nanos)?;
        self.last_rtt = Some(observation.rtt);
        let (new, reason) = if observation.dropped || observation.rtt > self.config.timeout {
            (
                (f64::from(limit) * self.config.backoff_ratio) as u32,
                ChangeReason::Dropped,
            )
        } else if u64::from(observation.in_flight) * 2 >= u64::from(limit) {
            (limit.saturating_add(1), ChangeReason::Grew)
        } else {
            return None;
        };
        let new = new.clamp(self.config.min_limit, self.config.max_limit);
        (new != limit).then(|| LimitUpdate::new(new, reason))
    }

    fn estimates(&self) -> RttEstimates {
        RttEstimates {
            baseline: None,
            latest: self.last_rtt,
        }
    }

    fn quiet(&self, limit: u32) -> Quiet {
        match self.config.sampling {
            // A sample moves the limit when it was dropped or timed out, or found the limit at
            // least half used (`in_flight x 2 >= limit`).
            Sampling::EverySample => Quiet {
                until_nanos: u64::MAX,
                max_rtt: self.config.timeout,
                max_in_flight: limit.saturating_sub(1) / 2,
                drops: false,
            },
            // Every sample goes through the windower first, and nothing else moves before it
            // gives an update.
            Sampling::Window(_) => self.windower.quiet(),
        }
    }
}
