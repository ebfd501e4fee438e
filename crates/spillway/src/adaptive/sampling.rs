//! How often a Netflix-style algorithm updates: on every sample, or once per window of samples
//! (Netflix's `WindowedLimit`).

use super::algorithm::Quiet;
use super::error::{AdaptiveError, Check};
use super::sample::{Sample, SampleWindow};
use std::time::Duration;

/// When an algorithm looks at its samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum Sampling {
    /// On every sample, with that sample's RTT and in-flight count (Netflix's algorithms used
    /// bare, as its `SimpleLimiter` does by default).
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::no_fields::deserialize")
    )]
    EverySample,
    /// Once per window, with the window's average RTT, largest in-flight count and any drop
    /// (Netflix's `WindowedLimit`).
    Window(WindowPolicy),
}

/// Netflix's `WindowedLimit`: a window ends with the first sample that completes after it is
/// due, and lasts twice its smallest RTT, within `min_time..=max_time`; a window of fewer than
/// `min_samples` samples is discarded, and so is any sample faster than `min_rtt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct WindowPolicy {
    /// Shortest window (Netflix: 1 s).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub min_time: Duration,
    /// Longest window (Netflix: 1 s).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub max_time: Duration,
    /// Fewest samples for a window to count (Netflix: 10).
    pub min_samples: u32,
    /// Samples faster than this are ignored (Netflix: 100 µs).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub min_rtt: Duration,
}

impl Default for WindowPolicy {
    fn default() -> Self {
        Self {
            min_time: Duration::from_secs(1),
            max_time: Duration::from_secs(1),
            min_samples: 10,
            min_rtt: Duration::from_micros(100),
        }
    }
}

impl Sampling {
    pub(crate) fn validate(&self, check: &Check) -> Result<(), AdaptiveError> {
        let Sampling::Window(policy) = self else {
            return Ok(());
        };
        check.nonzero_duration("window.min_time", policy.min_time)?;
        if policy.max_time < policy.min_time {
            return Err(AdaptiveError::new(
                check.algorithm,
                "window.max_time",
                format!(
                    "must be at least `window.min_time` ({:?}), got {:?}",
                    policy.min_time, policy.max_time
                ),
            ));
        }
        check.positive("window.min_samples", policy.min_samples)
    }
}

/// What an algorithm is given at each update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Observation {
    pub(crate) rtt: Duration,
    pub(crate) in_flight: u32,
    pub(crate) dropped: bool,
}

/// The samples of the current window, and when it ends.
#[derive(Debug, Clone)]
pub(crate) struct Windower {
    sampling: Sampling,
    next_update: u64,
    window: SampleWindow,
}

impl Windower {
    pub(crate) fn new(sampling: Sampling) -> Self {
        Self {
            sampling,
            next_update: 0,
            window: SampleWindow::default(),
        }
    }

    /// The samples that give the algorithm no update: every one while a window is open (a
    /// window ends with the first sample that completes after it is due), none when the
    /// algorithm looks at every sample.
    pub(crate) fn quiet(&self) -> Quiet {
        match self.sampling {
            Sampling::EverySample => Quiet::NEVER,
            Sampling::Window(_) => Quiet::until(self.next_update.saturating_add(1)),
        }
    }

    /// Adds `sample`, completed at `now`; returns what the algorithm should update on, if it
    /// should now.
    pub(crate) fn add(&mut self, sample: &Sample, now: u64) -> Option<Observation> {
        let policy = match self.sampling {
            Sampling::EverySample => {
                return Some(Observation {
                    rtt: sample.rtt,
                    in_flight: sample.in_flight,
                    dropped: sample.dropped,
                })
            }
            Sampling::Window(policy) => policy,
        };
        if sample.rtt < policy.min_rtt {
            return None;
        }
        self.window.add(sample);
        if now <= self.next_update {
            return None;
        }
        let window = std::mem::take(&mut self.window);
        let candidate = window.min().unwrap_or(Duration::MAX);
        let length = candidate
            .saturating_mul(2)
            .clamp(policy.min_time, policy.max_time);
        self.next_update = now.saturating_add(u64::try_from(length.as_nanos()).unwrap_or(u64::MAX));
        if window.count() < u64::from(policy.min_samples) {
            return None;
        }
        Some(Observation {
            rtt: window.average()?,
            in_flight: window.max_in_flight(),
            dropped: window.dropped(),
        })
    }
}
