//! Sentinel 1.8.9's `ThrottlingController`: a leaky bucket that paces calls at an even interval.

use super::schedule::{Schedule, Slot};
use super::Decision;
use std::time::Duration;

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
    schedule: Schedule,
}

impl Throttle {
    /// `count` calls per second, each waiting at most `max_queueing_time`.
    pub fn new(count: f64, max_queueing_time: Duration) -> Self {
        Self {
            count,
            schedule: Schedule::new(max_queueing_time),
        }
    }

    /// The nanoseconds of schedule `acquire` permits take: Java's
    /// `Math.round(1.0 * MS_TO_NS * statDurationMs * acquire / count)`, saturating.
    pub fn cost_nanos(&self, acquire: u32) -> u64 {
        (1_000_000.0 * 1_000.0 * f64::from(acquire) / self.count).round() as u64
    }

    /// Pass, wait or block `acquire` permits at `now_nanos`. A `Wait` has reserved its slot.
    pub fn check(&self, now_nanos: u64, acquire: u32) -> Decision {
        self.reserve(now_nanos, acquire).0
    }

    /// [`check`](Self::check), also returning the slot taken (on a pass or a wait), to give back
    /// with [`give_back`](Self::give_back) if the caller will not go after all: the entry path
    /// does so when a later rule refuses the entry.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::{Decision, Throttle};
    /// use std::time::Duration;
    ///
    /// let throttle = Throttle::new(10.0, Duration::from_secs(1));
    /// let (_, first) = throttle.reserve(0, 1);
    /// let (decision, second) = throttle.reserve(0, 1);
    /// assert_eq!(decision, Decision::Wait(Duration::from_millis(100)));
    /// assert!(!throttle.give_back(first.unwrap())); // not the last: one waits behind it
    /// assert!(throttle.give_back(second.unwrap()));
    /// assert_eq!(throttle.check(0, 1), Decision::Wait(Duration::from_millis(100)));
    /// ```
    pub fn reserve(&self, now_nanos: u64, acquire: u32) -> (Decision, Option<Slot>) {
        if acquire == 0 {
            return (Decision::Pass, None);
        }
        // Also guards NaN: a rule's count is validated finite, but this type is public.
        if self.count.is_nan() || self.count <= 0.0 {
            return (Decision::Block, None);
        }
        self.schedule.reserve(now_nanos, self.cost_nanos(acquire))
    }

    /// Gives back the slot of a caller that was told to wait until `slot_nanos` for `acquire`
    /// permits and will not go (a dropped waiter). Only the last slot can be given back (an
    /// earlier one has others queued behind it); returns whether it was.
    pub fn cancel(&self, slot_nanos: u64, acquire: u32) -> bool {
        let previous = slot_nanos.saturating_sub(self.cost_nanos(acquire));
        self.schedule.cancel(Slot {
            previous,
            at: slot_nanos,
        })
    }

    /// Gives back `slot`, taken by [`reserve`](Self::reserve), if it is still the last one;
    /// returns whether it was.
    pub fn give_back(&self, slot: Slot) -> bool {
        self.schedule.cancel(slot)
    }
}
