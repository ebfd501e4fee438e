use crate::sync::{thread_slot, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::sync::OnceLock;

/// The stripe count used when none is given: twice the available parallelism, rounded up to a
/// power of two, at most 16. Twice, so that a few more threads than cores still get a stripe
/// (or a window accumulator) of their own; at most 16, because each costs memory per window.
///
/// # Examples
///
/// ```
/// let stripes = spillway::stats::default_stripes();
/// assert!(stripes.is_power_of_two() && stripes <= 16);
/// ```
pub fn default_stripes() -> usize {
    static STRIPES: OnceLock<usize> = OnceLock::new();
    *STRIPES.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cpus * 2).next_power_of_two().min(16)
    })
}

/// A counter striped over cache-padded cells, one chosen per thread: Java's `LongAdder`, which
/// Sentinel counts with.
///
/// Adds from different threads land on different cache lines, so they do not contend; a read
/// sums every stripe. That trade is right for counters written on every call and read rarely
/// (totals, metrics). It is wrong for a value *checked* on every call: reading stripes that other
/// cores keep writing costs a cache miss per stripe. In our `counter/2t` bench (`bench/run`, see
/// `docs/benchmarks.md`), add-then-sum costs about 4x a shared atomic's add, while a plain add
/// costs about a quarter of it. Window reads in spillway therefore go through per-thread
/// accumulators with a consistency check rather than through this type.
///
/// The counter is a wrapping `u64`: [`sub`](Self::sub) makes it usable as a gauge, and a sum read
/// while the true value is non-negative is exact.
///
/// # Examples
///
/// ```
/// use spillway::stats::StripedCounter;
///
/// let counter = StripedCounter::new();
/// counter.add(3);
/// counter.increment();
/// assert_eq!(counter.sum(), 4);
/// assert_eq!(counter.take(), 4); // read and reset
/// assert_eq!(counter.sum(), 0);
/// ```
///
/// # Memory ordering
///
/// Every operation is `Relaxed`. A count orders nothing else: it is never used to publish other
/// data, and each stripe, being one atomic, has a single modification order on which `add`,
/// `sum` and `take` agree. `sum` is therefore not a snapshot of one instant: adds that run
/// concurrently with it may or may not be included, but each is counted exactly once in some
/// later read. `take` swaps each stripe to zero, so an add lands either before the swap (and is
/// returned by this `take`) or after it (and stays for the next read): none is lost.
pub struct StripedCounter {
    cells: Box<[CachePadded<AtomicU64>]>,
    mask: usize,
}

impl StripedCounter {
    /// A counter with the default number of stripes (twice the CPUs, a power of two, at most 16).
    pub fn new() -> Self {
        Self::with_stripes(default_stripes())
    }

    /// A counter with `stripes` stripes, rounded up to a power of two (at least one).
    pub fn with_stripes(stripes: usize) -> Self {
        let stripes = stripes.max(1).next_power_of_two();
        let cells = (0..stripes)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        Self {
            cells,
            mask: stripes - 1,
        }
    }

    /// Number of stripes.
    pub fn stripes(&self) -> usize {
        self.cells.len()
    }

    /// Bytes of its stripes (one cache line or two each).
    pub fn heap_bytes(&self) -> usize {
        self.cells.len() * std::mem::size_of::<CachePadded<AtomicU64>>()
    }

    #[inline]
    fn cell(&self) -> &AtomicU64 {
        &self.cells[thread_slot() & self.mask]
    }

    /// Adds `n` (wrapping).
    #[inline]
    pub fn add(&self, n: u64) {
        self.cell().fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    #[inline]
    pub fn increment(&self) {
        self.add(1);
    }

    /// Subtracts `n` (wrapping), for use as a gauge.
    #[inline]
    pub fn sub(&self, n: u64) {
        self.cell().fetch_sub(n, Ordering::Relaxed);
    }

    /// The sum of all stripes (wrapping).
    pub fn sum(&self) -> u64 {
        self.cells.iter().fold(0u64, |sum, cell| {
            sum.wrapping_add(cell.load(Ordering::Relaxed))
        })
    }

    /// The sum of all stripes read as a signed gauge.
    pub fn sum_signed(&self) -> i64 {
        self.sum() as i64
    }

    /// Returns the sum and resets the counter to zero, losing no concurrent add.
    pub fn take(&self) -> u64 {
        self.cells.iter().fold(0u64, |sum, cell| {
            sum.wrapping_add(cell.swap(0, Ordering::Relaxed))
        })
    }
}

impl Default for StripedCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for StripedCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripedCounter")
            .field("sum", &self.sum())
            .field("stripes", &self.stripes())
            .finish()
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;

    #[test]
    fn stripes_round_up_to_power_of_two() {
        assert_eq!(StripedCounter::with_stripes(0).stripes(), 1);
        assert_eq!(StripedCounter::with_stripes(3).stripes(), 4);
        assert!(StripedCounter::new().stripes().is_power_of_two());
    }

    #[test]
    fn gauge_goes_up_and_down() {
        let gauge = StripedCounter::with_stripes(4);
        gauge.add(5);
        gauge.sub(7);
        assert_eq!(gauge.sum_signed(), -2);
        gauge.add(2);
        assert_eq!(gauge.sum(), 0);
    }

    #[test]
    fn take_resets() {
        let counter = StripedCounter::with_stripes(2);
        counter.add(10);
        assert_eq!(counter.take(), 10);
        counter.increment();
        assert_eq!(counter.take(), 1);
        assert_eq!(counter.take(), 0);
    }
}
