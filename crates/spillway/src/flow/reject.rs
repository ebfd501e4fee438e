//! Sentinel's `DefaultController` for QPS: reject what is over the count.

use super::{Decision, FlowStats};

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
