//! Sentinel's `WarmUpRateLimiterController`: warm-up, paced like a leaky bucket.

use super::schedule::{Schedule, Slot};
use super::warm_up::WarmUpTokens;
use super::{Decision, FlowStats};
use std::time::Duration;

const NANOS_PER_MILLI: u64 = 1_000_000;

/// Warm-up and pacing together: Sentinel's `WarmUpRateLimiterController`. The warm-up bucket
/// (see [`WarmUp`](super::WarmUp)) sets the current rate, and calls are spaced
/// `round(1000 * acquire / rate)` milliseconds apart (Sentinel's millisecond cost), queueing at
/// most `max_queueing_time`.
///
/// As in [`Throttle`](super::Throttle), the schedule is kept in nanoseconds and updated with
/// compare-and-swap (no double-booked slot, no rollback gap); with millisecond-aligned times the
/// decisions are Sentinel's. `count <= 0` refuses everything (Sentinel's cost would be
/// `Long.MAX_VALUE` and overflow).
///
/// # Examples
///
/// ```
/// use spillway::flow::{Decision, FlowStats, WarmUpThrottle};
/// use std::time::Duration;
///
/// struct Idle;
/// impl FlowStats for Idle {
///     fn pass_qps(&self, _: u64) -> f64 { 0.0 }
///     fn previous_pass_qps(&self, _: u64) -> f64 { 0.0 }
///     fn concurrency(&self) -> i64 { 0 }
/// }
///
/// // 10/s when warm; cold, the rate is nextUp(10 / 3): calls 300 ms apart.
/// let limiter = WarmUpThrottle::new(10.0, Duration::from_secs(10), 3, Duration::from_secs(1));
/// let t0 = 1_700_000_000_000_000_000;
/// assert_eq!(limiter.check(&Idle, t0, 1), Decision::Pass);
/// assert_eq!(limiter.check(&Idle, t0, 1), Decision::Wait(Duration::from_millis(300)));
/// ```
#[derive(Debug)]
pub struct WarmUpThrottle {
    tokens: WarmUpTokens,
    schedule: Schedule,
}

impl WarmUpThrottle {
    /// `count` per second once warm, `count / cold_factor` cold, `period` to warm up, each call
    /// waiting at most `max_queueing_time`.
    pub fn new(
        count: f64,
        period: Duration,
        cold_factor: u32,
        max_queueing_time: Duration,
    ) -> Self {
        Self {
            tokens: WarmUpTokens::new(count, period, cold_factor),
            schedule: Schedule::new(max_queueing_time),
        }
    }

    /// Pass, wait or block `acquire` permits at `now_nanos`. A `Wait` has reserved its slot.
    pub fn check(&self, stats: &impl FlowStats, now_nanos: u64, acquire: u32) -> Decision {
        self.reserve(stats, now_nanos, acquire).0
    }

    /// [`check`](Self::check), also returning the slot taken, to give back with
    /// [`give_back`](Self::give_back) if the caller will not go (see
    /// [`Throttle::reserve`](super::Throttle::reserve)).
    pub fn reserve(
        &self,
        stats: &impl FlowStats,
        now_nanos: u64,
        acquire: u32,
    ) -> (Decision, Option<Slot>) {
        let count = self.tokens.count();
        if count.is_nan() || count <= 0.0 {
            return (Decision::Block, None);
        }
        let previous_qps = stats.previous_pass_qps(now_nanos) as i64;
        self.tokens.sync(now_nanos, previous_qps);
        let rate = self
            .tokens
            .allowed_qps(self.tokens.stored())
            .unwrap_or(count);
        // Java: Math.round(1.0 * acquireCount / rate * 1000), in milliseconds.
        let cost_ms = (f64::from(acquire) / rate * 1_000.0).round() as u64;
        self.schedule
            .reserve(now_nanos, cost_ms.saturating_mul(NANOS_PER_MILLI))
    }

    /// Gives back `slot`, taken by [`reserve`](Self::reserve), if it is still the last one;
    /// returns whether it was.
    pub fn give_back(&self, slot: Slot) -> bool {
        self.schedule.cancel(slot)
    }

    /// Tokens in the warm-up bucket.
    pub fn stored_tokens(&self) -> i64 {
        self.tokens.stored()
    }

    /// The QPS paced at the bucket's current fill (as of the last check).
    pub fn allowed_qps(&self) -> f64 {
        self.tokens
            .allowed_qps(self.tokens.stored())
            .unwrap_or(self.tokens.count())
    }

    /// How long the calls already queued still wait at `now_nanos` (zero when nothing waits).
    pub fn queue_wait(&self, now_nanos: u64) -> Duration {
        self.schedule.backlog(now_nanos)
    }
}
