use super::Clock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A clock that moves only when told to.
///
/// Clones share one time: advance any of them and all see it. It starts at any absolute time, so
/// traces can be written in the Unix-epoch milliseconds that Sentinel's and Guava's tests use
/// (values far above 2^50 ns are fine; the counter is a full `u64` of nanoseconds, good until
/// the year 2554 counted from the Unix epoch).
///
/// It ships in the crate, not only in its tests, so that users can drive spillway in their own
/// tests and simulations without sleeping.
///
/// # Examples
///
/// ```
/// use spillway::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::starting_at_millis(1_700_000_000_000);
/// let shared = clock.clone();
/// shared.advance(Duration::from_millis(500));
/// assert_eq!(clock.now_millis(), 1_700_000_000_500);
/// ```
///
/// # Memory ordering
///
/// The time is one atomic read and written with `SeqCst`, so a test thread that advances the clock
/// and then signals another thread is seen in that order.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock at `nanos` nanoseconds.
    pub fn starting_at_nanos(nanos: u64) -> Self {
        Self {
            nanos: Arc::new(AtomicU64::new(nanos)),
        }
    }

    /// A clock at `millis` milliseconds (for example a Unix-epoch time like `1_700_000_000_000`).
    ///
    /// # Panics
    ///
    /// If `millis` is more than `u64::MAX` nanoseconds (about 584 years).
    pub fn starting_at_millis(millis: u64) -> Self {
        let nanos = millis
            .checked_mul(1_000_000)
            .expect("ManualClock start overflows u64 nanoseconds");
        Self::starting_at_nanos(nanos)
    }

    /// Moves time forward by `by`.
    ///
    /// # Panics
    ///
    /// If the time would overflow `u64` nanoseconds.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).expect("ManualClock advance overflows u64");
        let previous = self.nanos.fetch_add(by, Ordering::SeqCst);
        assert!(
            previous.checked_add(by).is_some(),
            "ManualClock advance overflows u64 nanoseconds"
        );
    }

    /// Moves time forward by `millis` milliseconds.
    pub fn advance_millis(&self, millis: u64) {
        self.advance(Duration::from_millis(millis));
    }

    /// Sets the time to `nanos`, which must not be earlier than now (the clock is monotonic).
    ///
    /// # Panics
    ///
    /// If `nanos` is earlier than the current time.
    pub fn set_nanos(&self, nanos: u64) {
        let previous = self.nanos.fetch_max(nanos, Ordering::SeqCst);
        assert!(
            previous <= nanos,
            "ManualClock is monotonic: cannot go from {previous} ns back to {nanos} ns"
        );
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::SeqCst)
    }

    /// Advances the clock by `duration` instead of sleeping, so that code which waits runs
    /// instantly in tests and sees the time it waited for.
    fn sleep(&self, duration: Duration) {
        self.advance(duration);
    }

    /// Advances the clock by `timeout` instead of parking: a blocked waiter on a manual clock
    /// gives up at once, at exactly its deadline, unless it was served before it parked.
    fn park_timeout(&self, timeout: Duration) {
        self.advance(timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_time() {
        let a = ManualClock::starting_at_millis(1_700_000_000_000);
        let b = a.clone();
        b.advance(Duration::from_nanos(7));
        assert_eq!(a.now_nanos(), 1_700_000_000_000_000_007);
        assert!(a.now_nanos() > 1 << 50);
    }

    #[test]
    fn millis_and_micros_truncate() {
        let clock = ManualClock::starting_at_nanos(1_999_999);
        assert_eq!(clock.now_millis(), 1);
        assert_eq!(clock.now_micros(), 1_999);
    }

    #[test]
    #[should_panic(expected = "monotonic")]
    fn set_backwards_panics() {
        let clock = ManualClock::starting_at_nanos(10);
        clock.set_nanos(9);
    }
}
