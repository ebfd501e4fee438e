//! What a rate limit admits while Redis fails, and just back on it: the local share, counted
//! over a window of the limit's shape, and the passes the fallback admitted that Redis must be
//! told of.

use crate::limit_clock::LimitClock;
use crate::settings::Fallback;
use crate::unreported::{Report, Unreported};
use spillway::cluster::SharedRefusal;
use spillway::flow::{Decision, QpsReject};
use spillway::stats::{NodeConfig, ResourceNode, WindowConfig};
use spillway::Clock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A rate's fallback: its policy, the local window that counts the fair share, and what it
/// admitted that Redis has not counted.
#[derive(Debug)]
pub(crate) struct RateFallback {
    policy: Fallback,
    /// Every pass this process admitted, through Redis or not, in a window of the limit's
    /// shape whose buckets are the limit's (on its clock: Redis's time for a pass Redis
    /// admitted, this process's reading of it for the others): the share is counted over it,
    /// so that a fallback starts from what the process admitted in the limit's current
    /// window.
    local: ResourceNode,
    /// Passes asked of Redis whose answers have not come yet (a strict check's calls in
    /// flight): counted against the share, so that a fallback that starts while Redis may
    /// still be admitting them does not admit their places too.
    asked: AtomicU64,
    /// The limit's clock, as Redis's answers show it.
    clock: LimitClock,
    /// The latest time (the limit's clock, nanoseconds) a pass Redis admitted was counted at:
    /// a decision is read no earlier, so that it sees that pass's bucket (Redis's time for it
    /// may be up to a millisecond past this process's reading of the limit's clock).
    latest_admitted: AtomicU64,
    /// Passes the fallback admitted, until Redis is told of them.
    unreported: Mutex<Unreported>,
    /// How long a pass can matter to the limit (a window's interval), in milliseconds.
    keep_ms: u64,
}

impl RateFallback {
    /// A fallback by `policy` for a limit whose window is `keep_ms` long in buckets of
    /// `bucket_ms` (its passes matter that long).
    pub(crate) fn new(policy: Fallback, keep_ms: u64, bucket_ms: u64) -> Self {
        let buckets = (keep_ms / bucket_ms.max(1)).max(1) as usize;
        let shape = WindowConfig::new(buckets, std::time::Duration::from_millis(keep_ms))
            .unwrap_or_else(|_| WindowConfig::sentinel_second());
        Self {
            policy,
            local: ResourceNode::new(NodeConfig::default().with_second_window(shape)),
            asked: AtomicU64::new(0),
            clock: LimitClock::default(),
            latest_admitted: AtomicU64::new(0),
            unreported: Mutex::default(),
            keep_ms,
        }
    }

    /// Redis's answer to a call sent at `sent_nanos` and answered at `answered_nanos` (this
    /// process's clock) said `limit_ms` on the limit's clock (see [`LimitClock::observe`]).
    pub(crate) fn observe(&self, limit_ms: u64, sent_nanos: u64, answered_nanos: u64) {
        self.clock.observe(limit_ms, sent_nanos, answered_nanos);
    }

    /// `now_nanos` of this process's clock on the limit's.
    fn on_limit_clock(&self, now_nanos: u64) -> u64 {
        self.clock.at(now_nanos)
    }

    /// `count` passes admitted through Redis at `now_nanos`: counted in the local window, which
    /// a fallback starts from.
    pub(crate) fn record(&self, now_nanos: u64, count: u32) {
        let at = self.on_limit_clock(now_nanos);
        self.local.add_pass(at, u64::from(count));
    }

    /// `count` passes asked of Redis, until the returned [`Asking`] is dropped or says they
    /// were admitted: the share counts them meanwhile.
    pub(crate) fn asking(&self, count: u32) -> Asking<'_> {
        self.asked.fetch_add(u64::from(count), Ordering::SeqCst);
        Asking {
            fallback: self,
            count,
        }
    }

    /// Admits `count` now (`clock`'s time) by the policy: all, none, or the fair share of `rate`
    /// among `live` processes over a local sliding window (Sentinel's, two 500 ms buckets)
    /// that holds this process's admissions, through Redis or not. What it admits is kept to be
    /// reported to Redis.
    pub(crate) fn takes(
        &self,
        rate: f64,
        live: u64,
        clock: &dyn Clock,
        count: u32,
    ) -> Result<(), SharedRefusal> {
        // One decision at a time: the check and the count together, so that concurrent
        // requests cannot each pass the last place.
        let mut unreported = crate::lock::lock(&self.unreported);
        let (asked, at) = self.asked_then_now(clock);
        let taken = match self.policy {
            Fallback::Open => Ok(()),
            Fallback::Closed => Err(SharedRefusal::new(0.0, 0.0)),
            Fallback::LocalShare => self.share_admits(rate, live, at, count, asked),
        };
        if taken.is_ok() {
            self.local.add_pass(at, u64::from(count));
            unreported.add(at / 1_000_000, u64::from(count), self.keep_ms);
        }
        taken
    }

    /// Just back on Redis (see `Health::returned`): admits `count` now only within
    /// the fair share of `rate` among `live` processes (under [`Fallback::LocalShare`]; the
    /// other policies leave no share to keep to), and counts it in the local window as
    /// [`RateFallback::record`] does. Redis decides it too; one it refuses stays counted
    /// here, which only makes the share stricter for a window.
    pub(crate) fn within_share(
        &self,
        rate: f64,
        live: u64,
        clock: &dyn Clock,
        count: u32,
    ) -> Result<(), SharedRefusal> {
        // One decision at a time, as in `takes`.
        let _one = crate::lock::lock(&self.unreported);
        let (asked, at) = self.asked_then_now(clock);
        if self.policy == Fallback::LocalShare {
            self.share_admits(rate, live, at, count, asked)?;
        }
        self.local.add_pass(at, u64::from(count));
        Ok(())
    }

    /// The passes asked of Redis now, then the time on the limit's clock (no earlier than the
    /// latest pass Redis admitted), in that order: a pass Redis admitted is in the window, at
    /// a time no later than this one, before it leaves `asked` ([`Asking::admitted`]), so that
    /// a decision counts it at least once.
    fn asked_then_now(&self, clock: &dyn Clock) -> (u32, u64) {
        let asked = u32::try_from(self.asked.load(Ordering::SeqCst)).unwrap_or(u32::MAX);
        let latest = self.latest_admitted.load(Ordering::SeqCst);
        (asked, self.on_limit_clock(clock.now_nanos()).max(latest))
    }

    /// Whether the fair share of `rate` among `live` processes has room for `count` at `at`
    /// (the limit's clock) in the local window, besides the `asked` passes in flight to Redis.
    fn share_admits(
        &self,
        rate: f64,
        live: u64,
        at: u64,
        count: u32,
        asked: u32,
    ) -> Result<(), SharedRefusal> {
        let share = rate / live.max(1) as f64;
        let counted = count.saturating_add(asked);
        if QpsReject::new(share).check(&self.local, at, counted) == Decision::Pass {
            Ok(())
        } else {
            let reading = self.local.pass_qps(at) + f64::from(asked);
            Err(SharedRefusal::new(reading, share))
        }
    }

    /// Takes the passes to report to Redis at `now_nanos` (this process's clock), in groups
    /// of `group_ms` of the limit's clock.
    pub(crate) fn take_unreported(&self, now_nanos: u64, group_ms: u64) -> Vec<Report> {
        let mut unreported = crate::lock::lock(&self.unreported);
        if unreported.is_empty() {
            return Vec::new();
        }
        let now_ms = self.on_limit_clock(now_nanos) / 1_000_000;
        unreported.take(now_ms, self.keep_ms, group_ms)
    }

    /// Puts back `reports` taken at `now_nanos` that Redis did not take.
    pub(crate) fn restore(&self, now_nanos: u64, reports: &[Report]) {
        if reports.is_empty() {
            return;
        }
        let now_ms = self.on_limit_clock(now_nanos) / 1_000_000;
        crate::lock::lock(&self.unreported).restore(now_ms, reports, self.keep_ms);
    }
}

/// Passes asked of Redis and not answered yet ([`RateFallback::asking`]): the share counts them
/// until this is dropped.
#[derive(Debug)]
pub(crate) struct Asking<'a> {
    fallback: &'a RateFallback,
    count: u32,
}

impl Asking<'_> {
    /// Redis admitted them at `limit_ms`, its time: counted in the local window there, in
    /// the bucket Redis counts them in, then no longer asked (in that order, so that a
    /// concurrent share never misses them).
    pub(crate) fn admitted(self, limit_ms: u64) {
        let at = limit_ms.saturating_mul(1_000_000);
        self.fallback.local.add_pass(at, u64::from(self.count));
        self.fallback
            .latest_admitted
            .fetch_max(at, Ordering::SeqCst);
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        let count = u64::from(self.count);
        self.fallback.asked.fetch_sub(count, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::RateFallback;
    use crate::settings::Fallback;
    use spillway::ManualClock;

    /// A fallback of a 1 s window in two buckets, whose share is 2 a second (one process).
    fn share_of_two() -> RateFallback {
        RateFallback::new(Fallback::LocalShare, 1_000, 500)
    }

    // Redis gave a pass a time past this process's reading of its clock (its time is rounded
    // down, the offset's too): a decision reads the window no earlier, so that it counts it.
    #[test]
    fn a_decision_counts_a_pass_redis_admitted_in_a_bucket_ahead_of_its_reading() {
        let fallback = share_of_two();
        let clock = ManualClock::starting_at_millis(999);
        fallback.asking(1).admitted(1_000);
        assert!(fallback.takes(2.0, 1, &clock, 1).is_ok());
        assert!(
            fallback.takes(2.0, 1, &clock, 1).is_err(),
            "the pass at 1,000 ms and one more fill the share of 2"
        );
    }

    // A call asked of Redis and not answered counts against the share until it is.
    #[test]
    fn a_pass_asked_of_redis_counts_until_answered() {
        let fallback = share_of_two();
        let clock = ManualClock::starting_at_millis(10_000);
        let asking = fallback.asking(1);
        assert!(fallback.takes(2.0, 1, &clock, 1).is_ok());
        assert!(fallback.takes(2.0, 1, &clock, 1).is_err());
        drop(asking);
        assert!(
            fallback.takes(2.0, 1, &clock, 1).is_ok(),
            "refused: its place back"
        );
    }
}
