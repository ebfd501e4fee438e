//! Sentinel 1.8.9's `ThrottlingController`: a leaky bucket that paces calls at an even interval.

use super::Decision;
use crate::sync::{AtomicU64, Ordering};
use std::time::Duration;

/// No call has passed yet.
const NEVER: u64 = u64::MAX;

/// Paces calls `1 / count` seconds apart, queueing each for at most `max_queueing_time`:
/// Sentinel 1.8.9's `ThrottlingController` (the leaky bucket), with nanosecond bookkeeping.
///
/// A call that costs `acquire` permits takes `round(1e9 * acquire / count)` ns of the schedule.
/// If the schedule's last slot plus that cost is already past, the call passes at once and the
/// schedule restarts from now (no credit builds up while idle); otherwise it is queued behind the
/// last slot and told how long to wait, or refused if that wait would be longer than
/// `max_queueing_time` (a wait exactly equal to it is accepted). The first call always passes.
/// `count <= 0` refuses everything; `acquire == 0` always passes.
///
/// Deviations from Sentinel, each a fix: the schedule is updated with compare-and-swap, so that
/// concurrent callers can neither both take the same slot (Sentinel's "contention may exist here,
/// but it's okay") nor leave a gap by rolling a reservation back after another caller queued
/// behind it; a reservation that would exceed `max_queueing_time` is never taken. Sentinel
/// switches to millisecond bookkeeping when `1000 % round(count) == 0` and `count <= 1000`
/// (and divides by zero for `count < 0.5`); here every rate is kept in nanoseconds, which gives
/// the same decisions whenever the millisecond cost is exact.
///
/// # Examples
///
/// ```
/// use spillway::flow::{Decision, Throttle};
/// use std::time::Duration;
///
/// // 3 per second, queue at most 1 s: calls 333.33 ms apart.
/// let throttle = Throttle::new(3.0, Duration::from_secs(1));
/// let t0 = 1_700_000_000_000_000_000;
/// assert_eq!(throttle.check(t0, 1), Decision::Pass);
/// assert_eq!(throttle.check(t0, 1), Decision::Wait(Duration::from_nanos(333_333_333)));
/// assert_eq!(throttle.check(t0, 1), Decision::Wait(Duration::from_nanos(666_666_666)));
/// assert_eq!(throttle.check(t0, 1), Decision::Wait(Duration::from_nanos(999_999_999)));
/// assert_eq!(throttle.check(t0, 1), Decision::Block); // would wait 1.33 s
/// ```
///
/// # Memory ordering
///
/// The schedule is one atomic updated by compare-and-swap (`AcqRel`); it guards no other data.
#[derive(Debug)]
pub struct Throttle {
    count: f64,
    max_queueing_nanos: u64,
    /// Nanoseconds of the last reserved slot, or [`NEVER`].
    latest: AtomicU64,
}

impl Throttle {
    /// `count` calls per second, each waiting at most `max_queueing_time`.
    pub fn new(count: f64, max_queueing_time: Duration) -> Self {
        Self {
            count,
            max_queueing_nanos: u64::try_from(max_queueing_time.as_nanos()).unwrap_or(u64::MAX),
            latest: AtomicU64::new(NEVER),
        }
    }

    /// The nanoseconds of schedule `acquire` permits take: Java's
    /// `Math.round(1.0 * MS_TO_NS * statDurationMs * acquire / count)`, saturating.
    pub fn cost_nanos(&self, acquire: u32) -> u64 {
        (1_000_000.0 * 1_000.0 * f64::from(acquire) / self.count).round() as u64
    }

    /// Pass, wait or block `acquire` permits at `now_nanos`. A `Wait` has reserved its slot.
    pub fn check(&self, now_nanos: u64, acquire: u32) -> Decision {
        if acquire == 0 {
            return Decision::Pass;
        }
        // Also guards NaN: a rule's count is validated finite, but this type is public.
        if self.count.is_nan() || self.count <= 0.0 {
            return Decision::Block;
        }
        let cost = self.cost_nanos(acquire);
        let mut latest = self.latest.load(Ordering::Acquire);
        loop {
            let expected = if latest == NEVER {
                0
            } else {
                latest.saturating_add(cost)
            };
            let (next, decision) = if expected <= now_nanos {
                (now_nanos, Decision::Pass)
            } else {
                let wait = expected - now_nanos;
                if wait > self.max_queueing_nanos {
                    return Decision::Block;
                }
                (expected, Decision::Wait(Duration::from_nanos(wait)))
            };
            match self.latest.compare_exchange_weak(
                latest,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return decision,
                Err(actual) => latest = actual,
            }
        }
    }

    /// Gives back the slot of a caller that was told to wait until `slot_nanos` for `acquire`
    /// permits and will not go (a dropped waiter). Only the last slot can be given back (an
    /// earlier one has others queued behind it); returns whether it was.
    pub fn cancel(&self, slot_nanos: u64, acquire: u32) -> bool {
        let previous = slot_nanos.saturating_sub(self.cost_nanos(acquire));
        self.latest
            .compare_exchange(slot_nanos, previous, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}
