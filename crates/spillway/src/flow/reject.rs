//! Sentinel's `DefaultController` for QPS: reject what is over the count.

use super::{Decision, FlowStats};
use crate::stats::ResourceNode;
use std::time::Duration;

/// Rejects an entry when the second window's pass QPS, truncated to an integer, plus the
/// permits asked for exceeds `count`: Sentinel's `DefaultController` for the QPS grade,
/// `(int) passQps + acquire > count`.
///
/// The check reads the window and the entry counts its pass afterwards, as in Sentinel; threads
/// checking at the same instant can together pass a few more than `count` (at most one per
/// thread racing at the limit). Concurrency limits, which must be exact, are counted by
/// [`ConcurrencyLimit`](super::ConcurrencyLimit) instead.
///
/// # Examples
///
/// ```
/// use spillway::flow::{Decision, FlowStats, QpsReject};
///
/// struct Qps(f64);
/// impl FlowStats for Qps {
///     fn pass_qps(&self, _: u64) -> f64 { self.0 }
///     fn previous_pass_qps(&self, _: u64) -> f64 { 0.0 }
///     fn concurrency(&self) -> i64 { 0 }
/// }
///
/// let limit = QpsReject::new(10.0);
/// assert_eq!(limit.check(&Qps(9.9), 0, 1), Decision::Pass); // (int) 9.9 = 9; 9 + 1 <= 10
/// assert_eq!(limit.check(&Qps(10.0), 0, 1), Decision::Block);
/// assert_eq!(limit.check(&Qps(8.0), 0, 3), Decision::Block); // a batch of 3
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct QpsReject {
    count: f64,
}

impl QpsReject {
    /// A limit of `count` per second.
    pub fn new(count: f64) -> Self {
        Self { count }
    }

    /// The count.
    pub fn count(&self) -> f64 {
        self.count
    }

    /// Pass or block `acquire` permits at `now_nanos`.
    #[inline]
    pub fn check(&self, stats: &impl FlowStats, now_nanos: u64, acquire: u32) -> Decision {
        match self.check_current(stats, now_nanos, acquire) {
            Ok(()) => Decision::Pass,
            Err(_) => Decision::Block,
        }
    }

    /// [`check`](Self::check) for a prioritized entry (Sentinel's `DefaultController` with
    /// `prioritized = true`): over the count, it may borrow room from the buckets of `node`'s
    /// second window that leave within `occupy_timeout`. It then books the borrowed passes
    /// (the node's waiting count for that bucket, and, as Sentinel's `addOccupiedPass` does,
    /// passes and occupied passes in the minute window now) and returns
    /// [`Decision::Occupied`] with the wait; the entry goes after it without counting a pass.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::{Decision, QpsReject};
    /// use spillway::stats::{NodeConfig, ResourceNode};
    /// use std::time::Duration;
    ///
    /// // Sentinel's second window: two buckets of 500 ms.
    /// let node = ResourceNode::new(NodeConfig::default());
    /// let limit = QpsReject::new(2.0);
    /// let second = 1_000_000_000;
    /// node.add_pass(1_000 * second - 400_000_000, 2); // in the bucket that leaves next
    /// let now = 1_000 * second + 250_000_000;
    /// let timeout = Duration::from_millis(500);
    /// // Over the count now, but that bucket leaves in 250 ms: borrow from the one after it.
    /// assert_eq!(
    ///     limit.check_prioritized(&node, now, 1, timeout),
    ///     Decision::Occupied(Duration::from_millis(250)),
    /// );
    /// // Counted now in the minute window, as a pass and an occupied pass; the second window
    /// // counts it once its bucket is current, and its occupied-pass rate stays 0 (Sentinel's).
    /// assert_eq!(node.minute_window().snapshot(now).pass, 3);
    /// assert_eq!(node.minute_window().snapshot(now).occupied_pass, 1);
    /// assert_eq!(node.occupied_pass_qps(now), 0.0);
    /// ```
    pub fn check_prioritized(
        &self,
        node: &ResourceNode,
        now_nanos: u64,
        acquire: u32,
        occupy_timeout: Duration,
    ) -> Decision {
        match self.check_current(node, now_nanos, acquire) {
            Ok(()) => Decision::Pass,
            Err(_) => match self.occupy(node, now_nanos, acquire, occupy_timeout) {
                Some(wait) => Decision::Occupied(wait),
                None => Decision::Block,
            },
        }
    }

    /// The borrowing half of [`check_prioritized`](Self::check_prioritized), for an entry this
    /// rule refused: the wait, with the borrowed passes booked on `node`, or `None`.
    pub(crate) fn occupy(
        &self,
        node: &ResourceNode,
        now: u64,
        acquire: u32,
        timeout: Duration,
    ) -> Option<Duration> {
        let wait = node.try_occupy_next(now, acquire, self.count, timeout)?;
        let wait_nanos = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        node.add_waiting(now.saturating_add(wait_nanos), u64::from(acquire));
        node.add_occupied_pass(now, u64::from(acquire));
        Some(wait)
    }

    /// [`check`](Self::check), returning the truncated pass QPS it saw when it blocks.
    #[inline]
    pub(crate) fn check_current(
        &self,
        stats: &impl FlowStats,
        now_nanos: u64,
        acquire: u32,
    ) -> Result<(), i64> {
        // Java's (int) cast truncates toward zero and saturates; `as i64` does the same.
        let current = stats.pass_qps(now_nanos) as i64;
        if (current + i64::from(acquire)) as f64 > self.count {
            Err(current)
        } else {
            Ok(())
        }
    }
}
