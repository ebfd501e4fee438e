//! An exact concurrency limit: check and count in one atomic step.

use super::{Decision, FlowStats};
use crate::sync::{AtomicU64, Ordering};

/// At most `count` entries in flight, exactly: Sentinel's `DefaultController` for the thread
/// grade (`curThreadNum + acquire > count` blocks), but the check and the increment are one
/// compare-and-swap, so no interleaving of callers can put `count + 1` in flight (Sentinel reads
/// the count, decides, and increments later, and overshoots under contention).
///
/// # Examples
///
/// ```
/// use spillway::flow::ConcurrencyLimit;
///
/// let limit = ConcurrencyLimit::new(2.0);
/// assert!(limit.try_acquire(1));
/// assert!(limit.try_acquire(1));
/// assert!(!limit.try_acquire(1));
/// limit.release();
/// assert!(limit.try_acquire(1));
/// assert_eq!(limit.in_flight(), 2);
/// ```
///
/// # Memory ordering
///
/// One atomic, updated by compare-and-swap and `fetch_sub` with `AcqRel`: a release happens
/// before the acquire that reuses its place.
#[derive(Debug)]
pub struct ConcurrencyLimit {
    count: f64,
    in_flight: AtomicU64,
}

impl ConcurrencyLimit {
    /// At most `count` in flight.
    pub fn new(count: f64) -> Self {
        Self {
            count,
            in_flight: AtomicU64::new(0),
        }
    }

    /// Takes a place for one entry that asks for `acquire` permits, if
    /// `in_flight + acquire <= count`.
    pub fn try_acquire(&self, acquire: u32) -> bool {
        try_acquire_on(&self.in_flight, self.count, acquire).is_ok()
    }

    /// Gives a place back.
    pub fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// Entries in flight through this limit.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// The count.
    pub fn count(&self) -> f64 {
        self.count
    }

    /// Sentinel's check itself, against any node: `DefaultController.canPass` for the thread
    /// grade, which blocks when `curThreadNum + acquire > count`, with `stats`'
    /// [`concurrency`](FlowStats::concurrency) as `curThreadNum`. It reads and counts nothing
    /// of this limit's own: it is the controller alone, for testing it and reusing it on a node
    /// of your own. The arithmetic is Java's: the in-flight count is cast to a 32-bit `int`
    /// (its low bits), the sum wraps as an `int` does, and it is compared with `count` as a
    /// double.
    ///
    /// Unlike [`try_acquire`](Self::try_acquire), it does not take the place: callers checking
    /// at once may all pass on one reading, as Sentinel's do.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::{ConcurrencyLimit, Decision};
    /// use spillway::stats::{NodeConfig, ResourceNode};
    ///
    /// let node = ResourceNode::new(NodeConfig::default());
    /// node.increase_concurrency();
    /// let limit = ConcurrencyLimit::new(2.0);
    /// assert_eq!(limit.check(&node, 1), Decision::Pass); // 1 + 1 <= 2
    /// assert_eq!(limit.check(&node, 2), Decision::Block); // 1 + 2 > 2
    /// node.increase_concurrency();
    /// assert_eq!(limit.check(&node, 1), Decision::Block);
    /// assert_eq!(limit.in_flight(), 0); // its own count is not involved
    /// ```
    pub fn check(&self, stats: &impl FlowStats, acquire: u32) -> Decision {
        // Java: `int curCount = (int) node.curThreadNum(); curCount + acquireCount > count`.
        // `as i32` keeps the low 32 bits, as Java's (int) cast does; the sum wraps as an int.
        let current = stats.concurrency() as i32;
        let sum = current.wrapping_add(acquire as i32);
        if f64::from(sum) > self.count {
            Decision::Block
        } else {
            Decision::Pass
        }
    }
}

/// Takes one place on `counter` if `in_flight + acquire <= count`; on refusal returns the count in
/// flight that was seen.
pub(crate) fn try_acquire_on(counter: &AtomicU64, count: f64, acquire: u32) -> Result<(), u64> {
    try_increment(counter, |current| {
        current as f64 + f64::from(acquire) <= count
    })
}

/// Check and count in one step: adds one to `counter` if `fits(current)`, with compare-and-swap
/// (`AcqRel`); on refusal returns the value seen. Every exact concurrency limit in the crate
/// (flow rules, Dubbo's `executes`) takes its places through here.
#[inline]
pub(crate) fn try_increment(counter: &AtomicU64, fits: impl Fn(u64) -> bool) -> Result<(), u64> {
    let mut current = counter.load(Ordering::Acquire);
    loop {
        if !fits(current) {
            return Err(current);
        }
        match counter.compare_exchange_weak(
            current,
            current + 1,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Ok(()),
            Err(actual) => current = actual,
        }
    }
}
