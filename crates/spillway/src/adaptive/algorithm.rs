//! The trait every adaptive limit algorithm implements, and what it reports.

use super::sample::Sample;
use std::fmt;
use std::time::Duration;

/// How an adaptive concurrency limit moves with measured latency.
///
/// An [`AdaptiveLimiter`](super::AdaptiveLimiter) feeds its algorithm every completed call, in
/// order, one at a time (under the limiter's lock), and applies the limit it returns. Algorithms
/// read no clock of their own: time comes with each call, so that a `ManualClock` drives them in
/// tests.
///
/// spillway ships [`Gradient2`](super::Gradient2), [`Vegas`](super::Vegas),
/// [`Aimd`](super::Aimd), [`EnvoyGradient`](super::EnvoyGradient) and [`Bbr`](super::Bbr);
/// implement this trait for another.
pub trait LimitAlgorithm: fmt::Debug + Send + 'static {
    /// The limit before any sample.
    fn initial_limit(&self) -> u32;

    /// Feeds one completed call at `now_nanos`, the limit being `limit`; returns the new limit
    /// and why, when the algorithm moves it now.
    fn on_sample(&mut self, sample: &Sample, now_nanos: u64, limit: u32) -> Option<LimitUpdate>;

    /// What the algorithm currently believes about latency, for metrics.
    fn estimates(&self) -> RttEstimates;
}

/// A new limit and the reason for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitUpdate {
    /// The new limit (at least 1).
    pub limit: u32,
    /// Why it moved (or was set).
    pub reason: ChangeReason,
}

impl LimitUpdate {
    /// A limit of `limit` for `reason` (0 is raised to 1: a limit of 0 would admit nothing ever
    /// again, and so measure nothing).
    pub fn new(limit: u32, reason: ChangeReason) -> Self {
        Self {
            limit: limit.max(1),
            reason,
        }
    }
}

/// Why an adaptive limit last changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChangeReason {
    /// The initial limit: nothing measured yet.
    Initial,
    /// Latency held near its baseline: the limit grew.
    Grew,
    /// Latency rose above its baseline (a queue is building): the limit shrank.
    LatencyRose,
    /// A call was dropped (timed out or refused downstream): the limit shrank.
    Dropped,
    /// The limit was lowered to measure the no-load RTT again (Envoy's minRTT window).
    MeasuringMinRtt,
    /// The no-load RTT was measured again and the limit restored.
    MinRttMeasured,
    /// A probe: the limit was raised above the measured bandwidth-delay product, to find out
    /// whether the service delivers more ([`Bbr`](super::Bbr)'s probing round).
    Probing,
    /// The limit was lowered below the bandwidth-delay product, to drain the queue a probe or
    /// the start built ([`Bbr`](super::Bbr)).
    Draining,
    /// The limit was set to the measured bandwidth-delay product ([`Bbr`](super::Bbr)).
    BandwidthDelay,
}

impl ChangeReason {
    /// A short name for metrics and logs: `initial`, `grew`, `latency_rose`, `dropped`,
    /// `measuring_min_rtt`, `min_rtt_measured`, `probing`, `draining`, `bandwidth_delay`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeReason::Initial => "initial",
            ChangeReason::Grew => "grew",
            ChangeReason::LatencyRose => "latency_rose",
            ChangeReason::Dropped => "dropped",
            ChangeReason::MeasuringMinRtt => "measuring_min_rtt",
            ChangeReason::MinRttMeasured => "min_rtt_measured",
            ChangeReason::Probing => "probing",
            ChangeReason::Draining => "draining",
            ChangeReason::BandwidthDelay => "bandwidth_delay",
        }
    }
}

impl fmt::Display for ChangeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an algorithm believes about latency: its no-load (or long-term) RTT and its latest
/// sample RTT. `None` until measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RttEstimates {
    /// The baseline: Vegas's and Envoy's no-load RTT, Gradient2's long-term average.
    pub baseline: Option<Duration>,
    /// The latest window's (or sample's) RTT the limit was computed from.
    pub latest: Option<Duration>,
}
