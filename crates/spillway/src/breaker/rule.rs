//! The breaker rule: when to open a resource's circuit, and how it recovers.

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Sentinel's default `minRequestAmount`.
pub const DEFAULT_MIN_REQUEST_AMOUNT: u64 = 5;
/// Sentinel's default `statIntervalMs`.
pub const DEFAULT_STAT_INTERVAL: Duration = Duration::from_secs(1);
/// Buckets of the statistics window by default (Sentinel has one; see [`BreakerRule`]).
pub const DEFAULT_STAT_BUCKETS: u32 = 10;

#[cfg(feature = "serde")]
fn default_min_request_amount() -> u64 {
    DEFAULT_MIN_REQUEST_AMOUNT
}

#[cfg(feature = "serde")]
fn default_stat_interval() -> Duration {
    DEFAULT_STAT_INTERVAL
}

#[cfg(feature = "serde")]
fn default_stat_buckets() -> u32 {
    DEFAULT_STAT_BUCKETS
}

#[cfg(feature = "serde")]
fn default_half_open_probes() -> u32 {
    1
}

/// What trips a breaker: Sentinel's three degrade strategies.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum BreakerStrategy {
    /// Calls slower than `max_rt` are slow; open when the slow share of the window's calls is
    /// over `slow_ratio_threshold` (or equals it, when that is 1.0).
    SlowCallRatio {
        /// The longest a call may take and still not be slow (compared in microseconds).
        #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
        max_rt: Duration,
        /// The slow share (0..1) over which the breaker opens.
        slow_ratio_threshold: f64,
    },
    /// Open when the share of calls marked as errors is over `threshold` (0..1).
    ErrorRatio {
        /// The error share over which the breaker opens.
        threshold: f64,
    },
    /// Open when more than `threshold` calls in the window are errors.
    ErrorCount {
        /// The error count over which the breaker opens.
        threshold: u64,
    },
}

/// A circuit breaker rule: Sentinel's `DegradeRule`, with a sliding statistics window and a
/// half-open state that cannot wedge.
///
/// - **Closed**, every call passes and its completion is counted in a sliding window of
///   `stat_interval` in `stat_buckets` buckets (Sentinel's window is one bucket, so it forgets
///   everything at once at each interval's end; ours slides). Once the window holds at least
///   `min_request_amount` completions and the strategy's threshold is crossed, the breaker
///   **opens**.
/// - **Open**, every call is refused until `retry_timeout` has passed since it opened.
/// - Then the next call moves it to **half-open** and passes as a probe; up to
///   `half_open_probes` probes pass. The breaker closes when all of them succeed (a probe fails
///   when it is slow or an error, as the strategy counts), and reopens as soon as one fails.
///   A probe that is refused by a later rule, or abandoned while queued, gives its place back;
///   a probe that does not complete within `probe_timeout` (default: `retry_timeout`) counts
///   as failed, so a lost call cannot hold the breaker half-open forever (Sentinel's can). A
///   probe whose call has answered ([`OwnedEntry::answered`](crate::OwnedEntry::answered): a
///   response head, say) is decided then (an error strategy by its error, a slow-call one by
///   its time to the answer), so that a long answer, or a client that reads it slowly, neither
///   holds the breaker half-open nor counts as lost.
///
/// # Examples
///
/// ```
/// use spillway::breaker::{BreakerRule, BreakerStrategy};
/// use std::time::Duration;
///
/// let rule = BreakerRule::new(
///     "orders-slow",
///     "GET /orders",
///     BreakerStrategy::SlowCallRatio { max_rt: Duration::from_millis(200), slow_ratio_threshold: 0.5 },
///     Duration::from_secs(10),
/// )
/// .with_min_request_amount(20)
/// .with_half_open_probes(3);
/// assert_eq!(rule.stat_buckets, 10);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
#[non_exhaustive]
pub struct BreakerRule {
    /// Unique id, named in errors, blocks and state changes.
    pub id: String,
    /// The resource it guards.
    pub resource: String,
    /// What trips it.
    pub strategy: BreakerStrategy,
    /// How long it stays open before probing (Sentinel's `timeWindow`); more than zero.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub retry_timeout: Duration,
    /// Fewest completions in the window before it may open (default 5).
    #[cfg_attr(feature = "serde", serde(default = "default_min_request_amount"))]
    pub min_request_amount: u64,
    /// The statistics window's length (default 1 s).
    #[cfg_attr(
        feature = "serde",
        serde(default = "default_stat_interval", with = "humantime_serde")
    )]
    pub stat_interval: Duration,
    /// Buckets of the statistics window (default 10, at least 2).
    #[cfg_attr(feature = "serde", serde(default = "default_stat_buckets"))]
    pub stat_buckets: u32,
    /// Probes let through half-open, all of which must succeed to close (default 1).
    #[cfg_attr(feature = "serde", serde(default = "default_half_open_probes"))]
    pub half_open_probes: u32,
    /// How long a probe may take before it counts as failed (default: `retry_timeout`).
    #[cfg_attr(feature = "serde", serde(default, with = "humantime_serde::option"))]
    pub probe_timeout: Option<Duration>,
}

impl BreakerRule {
    /// A rule with Sentinel's defaults (at least 5 requests, a 1 s window) and one probe.
    pub fn new(
        id: impl Into<String>,
        resource: impl Into<String>,
        strategy: BreakerStrategy,
        retry_timeout: Duration,
    ) -> Self {
        Self {
            id: id.into(),
            resource: resource.into(),
            strategy,
            retry_timeout,
            min_request_amount: DEFAULT_MIN_REQUEST_AMOUNT,
            stat_interval: DEFAULT_STAT_INTERVAL,
            stat_buckets: DEFAULT_STAT_BUCKETS,
            half_open_probes: 1,
            probe_timeout: None,
        }
    }

    /// Sets the fewest completions before it may open.
    pub fn with_min_request_amount(mut self, amount: u64) -> Self {
        self.min_request_amount = amount;
        self
    }

    /// Sets the statistics window: `interval` in `buckets` buckets.
    pub fn with_stat_window(mut self, interval: Duration, buckets: u32) -> Self {
        self.stat_interval = interval;
        self.stat_buckets = buckets;
        self
    }

    /// Sets how many probes pass half-open.
    pub fn with_half_open_probes(mut self, probes: u32) -> Self {
        self.half_open_probes = probes;
        self
    }

    /// Sets how long a probe may take before it counts as failed.
    pub fn with_probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = Some(timeout);
        self
    }

    /// The probe timeout in force: `probe_timeout`, or `retry_timeout` when unset.
    pub fn effective_probe_timeout(&self) -> Duration {
        self.probe_timeout.unwrap_or(self.retry_timeout)
    }
}
