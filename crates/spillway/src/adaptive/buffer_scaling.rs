//! How Envoy's gradient controller scales its `buffer`: as configured (Envoy's), or by the
//! spread of the service's own RTTs, measured with the minRTT.

use super::sample::SampleWindow;

/// How [`EnvoyGradient`](super::EnvoyGradient) applies its `buffer`, the share above the
/// minRTT that a sample window's RTT may reach before the limit shrinks.
///
/// A latency limit holds a service's queue to about `buffer x minRTT` of waiting. On a service
/// whose calls all take about as long, a little waiting already doubles its tail; on one whose
/// calls vary widely (exponential, long-tailed), the tail is many times the median with no queue
/// at all, and the same waiting hardly moves it, while the queue such a service builds near its
/// capacity by chance lifts the window's median past a small buffer and refuses calls below
/// capacity. `Spread` lets the buffer follow the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum BufferScaling {
    /// The configured buffer, as Envoy applies it.
    #[default]
    Fixed,
    /// The configured buffer times the spread of the service's RTTs in the last pinned minRTT
    /// measurement, or in the open start's first (their third quartile over their median, at
    /// least 1); the buffer so scaled is capped at 1 (a window's RTT may reach twice the
    /// minRTT). Later measurements taken from the calls as they come (`remeasure =
    /// "when_bound"`) run among calls that may queue, and leave the spread as it was. A pinned
    /// measurement on a service of at least `min_concurrency` workers meets no queue: calls
    /// that all take as long measure a spread of 1 and keep the configured buffer, exponential
    /// times about 2. On fewer workers the measurement's own queue widens the spread.
    Spread,
}

impl BufferScaling {
    /// The buffer to apply: `buffer` as configured, or scaled by `spread` and capped at 1.
    ///
    /// ```
    /// use spillway::adaptive::BufferScaling;
    ///
    /// assert_eq!(BufferScaling::Fixed.apply(0.25, 2.0), 0.25);
    /// assert_eq!(BufferScaling::Spread.apply(0.25, 2.0), 0.5);
    /// assert_eq!(BufferScaling::Spread.apply(0.75, 2.0), 1.0);
    /// ```
    pub fn apply(self, buffer: f64, spread: f64) -> f64 {
        match self {
            BufferScaling::Fixed => buffer,
            BufferScaling::Spread => (buffer * spread.max(1.0)).min(1.0),
        }
    }
}

/// The spread of a measurement's RTTs: the third quartile over the median (nearest rank), at
/// least 1; 1 for an empty window or a zero median.
pub(super) fn spread_of(calls: &SampleWindow) -> f64 {
    match (calls.percentile(0.75), calls.percentile(0.5)) {
        (Some(upper), Some(median)) if !median.is_zero() => {
            (upper.as_secs_f64() / median.as_secs_f64()).max(1.0)
        }
        _ => 1.0,
    }
}
