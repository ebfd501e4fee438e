//! The trait every adaptive limit algorithm implements, and what it reports.

use super::sample::Sample;
use std::fmt;
use std::time::Duration;

/// How an adaptive concurrency limit moves with measured latency.
///
/// An [`AdaptiveLimiter`](super::AdaptiveLimiter) feeds its algorithm every completed call, one
/// at a time (under the limiter's lock), and applies the limit it returns. Each thread's calls
/// come in the order they completed; samples that cannot move the limit
/// ([`quiet`](Self::quiet)) may come later, in a batch, each with its own completion time. Algorithms
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

    /// Which samples cannot move the limit now, the limit being `limit`: such a sample only
    /// adds to what the algorithm accumulates (a window, an estimate for metrics), and feeding
    /// it later, in order and with its own completion time, changes nothing else. The limiter
    /// then holds it in a buffer of the thread that completed it, without its lock, and feeds
    /// it before the next sample that may move the limit (on one thread; see
    /// [`AdaptiveLimiter`](super::AdaptiveLimiter) for samples racing on several), and before
    /// its state is read.
    ///
    /// The default, [`Quiet::NEVER`], has every sample fed as it completes: an algorithm that
    /// may move the limit on any sample must keep it.
    ///
    /// ```
    /// use spillway::adaptive::{Aimd, AimdConfig, LimitAlgorithm, Quiet, Sampling, WindowPolicy};
    /// use std::time::Duration;
    ///
    /// // On every sample, AIMD moves the limit on a drop, a timeout, or a call that found the
    /// // limit at least half used.
    /// let aimd = Aimd::new(AimdConfig { timeout: Duration::from_secs(1), ..Default::default() })?;
    /// let quiet = aimd.quiet(10);
    /// assert_eq!((quiet.max_in_flight, quiet.max_rtt, quiet.drops), (4, Duration::from_secs(1), false));
    /// // Once a window, only the sample that closes it does (a window closes with the first
    /// // sample after it is due; the first is due at 0).
    /// let windowed = AimdConfig { sampling: Sampling::Window(WindowPolicy::default()), ..Default::default() };
    /// assert_eq!(Aimd::new(windowed)?.quiet(10), Quiet::until(1));
    /// # Ok::<(), spillway::adaptive::AdaptiveError>(())
    /// ```
    fn quiet(&self, limit: u32) -> Quiet {
        let _ = limit;
        Quiet::NEVER
    }
}

/// The samples that cannot move an adaptive limit now ([`LimitAlgorithm::quiet`]): those that
/// complete before `until_nanos`, took at most `max_rtt`, ended with at most `max_in_flight`
/// calls in flight (their [`Sample::in_flight`]), and were not dropped unless `drops`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet {
    /// Samples that complete at or after this time (nanoseconds on the limiter's clock) may
    /// move the limit.
    pub until_nanos: u64,
    /// Slower samples may move the limit.
    pub max_rtt: Duration,
    /// Samples of calls admitted with more in flight may move the limit.
    pub max_in_flight: u32,
    /// Whether a dropped sample is quiet too.
    pub drops: bool,
}

impl Quiet {
    /// No sample is quiet: each is fed as it completes.
    pub const NEVER: Quiet = Quiet {
        until_nanos: 0,
        max_rtt: Duration::ZERO,
        max_in_flight: 0,
        drops: false,
    };

    /// Every sample that completes before `nanos` is quiet, whatever it measured.
    pub fn until(nanos: u64) -> Self {
        Self {
            until_nanos: nanos,
            max_rtt: Duration::MAX,
            max_in_flight: u32::MAX,
            drops: true,
        }
    }

    /// Whether `sample`, completed at `now_nanos`, is quiet.
    pub fn holds(&self, sample: &Sample, now_nanos: u64) -> bool {
        now_nanos < self.until_nanos
            && sample.rtt <= self.max_rtt
            && sample.in_flight <= self.max_in_flight
            && (self.drops || !sample.dropped)
    }
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
