//! What a flow controller reads.

use crate::stats::ResourceNode;

/// The statistics a flow controller reads, so that controllers can be driven by a mock in tests
/// and by a [`ResourceNode`] in the entry path.
///
/// # Examples
///
/// ```
/// use spillway::flow::FlowStats;
///
/// /// Fixed numbers, for a test.
/// struct Fixed { qps: f64, previous: f64, concurrency: i64 }
///
/// impl FlowStats for Fixed {
///     fn pass_qps(&self, _now_nanos: u64) -> f64 { self.qps }
///     fn previous_pass_qps(&self, _now_nanos: u64) -> f64 { self.previous }
///     fn concurrency(&self) -> i64 { self.concurrency }
/// }
/// ```
pub trait FlowStats {
    /// Admitted per second over the second window (Sentinel's `passQps`).
    fn pass_qps(&self, now_nanos: u64) -> f64;

    /// Admitted in the previous whole second (Sentinel's `previousPassQps`).
    fn previous_pass_qps(&self, now_nanos: u64) -> f64;

    /// Entries in flight (Sentinel's `curThreadNum`).
    fn concurrency(&self) -> i64;
}

impl FlowStats for ResourceNode {
    #[inline]
    fn pass_qps(&self, now_nanos: u64) -> f64 {
        ResourceNode::pass_qps(self, now_nanos)
    }

    #[inline]
    fn previous_pass_qps(&self, now_nanos: u64) -> f64 {
        ResourceNode::previous_pass_qps(self, now_nanos) as f64
    }

    #[inline]
    fn concurrency(&self) -> i64 {
        ResourceNode::concurrency(self)
    }
}

impl<S: FlowStats + ?Sized> FlowStats for &S {
    fn pass_qps(&self, now_nanos: u64) -> f64 {
        (**self).pass_qps(now_nanos)
    }

    fn previous_pass_qps(&self, now_nanos: u64) -> f64 {
        (**self).previous_pass_qps(now_nanos)
    }

    fn concurrency(&self) -> i64 {
        (**self).concurrency()
    }
}
