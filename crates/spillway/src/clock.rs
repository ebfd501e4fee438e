//! Time, injected.
//!
//! Everything in spillway reads time through a [`Clock`]: a monotonic count of nanoseconds from an
//! arbitrary origin. Production code uses [`SystemClock`] (a calibrated TSC read, about 2.5x cheaper
//! than [`std::time::Instant::now`] on the machines we measured); tests and simulations use a
//! [`ManualClock`] and move time by hand, so no test ever sleeps.
//!
//! Windows need millisecond precision and response times need microseconds, so the default is
//! the TSC: an entry reads the clock once when it starts and once when it ends, and those two
//! reads are the largest cost of an entry without rules. Where that matters more than
//! microsecond response times, [`CoarseClock`] is a clock a background thread sets once per
//! tick (1 ms by default, Sentinel's resolution), read with one load.

mod any;
mod blocking;
mod coarse;
mod manual;
mod stopwatch;
mod system;
mod tsc;

pub use blocking::{blocking_wait_hook, set_blocking_wait_hook};

pub use coarse::{CoarseClock, DEFAULT_COARSE_TICK};
pub use manual::ManualClock;
pub use system::{StdClock, SystemClock};

pub(crate) use any::AnyClock;
pub(crate) use stopwatch::Stopwatch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A monotonic source of time with nanosecond resolution.
///
/// The origin is arbitrary (only differences and window boundaries matter), but it must not move:
/// two reads on any threads must never go backwards by more than the skew the caller tolerates.
/// spillway's windows tolerate small cross-core skew (an event that arrives after its window was
/// recycled is dropped and counted as late, never filed under the wrong window) and response
/// times saturate at zero.
///
/// # Examples
///
/// ```
/// use spillway::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::starting_at_millis(1_700_000_000_000);
/// let before = clock.now_nanos();
/// clock.advance(Duration::from_micros(250));
/// assert_eq!(clock.now_nanos() - before, 250_000);
/// ```
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Nanoseconds since this clock's origin.
    fn now_nanos(&self) -> u64;

    /// Microseconds since this clock's origin (truncated).
    fn now_micros(&self) -> u64 {
        self.now_nanos() / 1_000
    }

    /// Milliseconds since this clock's origin (truncated).
    fn now_millis(&self) -> u64 {
        self.now_nanos() / 1_000_000
    }

    /// Waits `duration` on this clock: the blocking entry path calls it for queueing behaviors.
    /// The default tells the blocking-wait hook, if one is set ([`set_blocking_wait_hook`]),
    /// and sleeps the calling thread; [`ManualClock`] advances itself instead.
    fn sleep(&self, duration: Duration) {
        blocking::before_blocking_wait(duration);
        std::thread::sleep(duration);
    }

    /// Parks the calling thread until it is unparked or `timeout` has passed on this clock (it
    /// may also return early, spuriously): the blocking waits for a slot call it between checks.
    /// The default parks the thread ([`std::thread::park_timeout`]); [`ManualClock`] advances
    /// itself by `timeout` instead, so a waiter on a manual clock times out at once, at exactly
    /// its deadline.
    fn park_timeout(&self, timeout: Duration) {
        blocking::before_blocking_wait(timeout);
        std::thread::park_timeout(timeout);
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }

    fn sleep(&self, duration: Duration) {
        (**self).sleep(duration);
    }

    fn park_timeout(&self, timeout: Duration) {
        (**self).park_timeout(timeout);
    }
}
