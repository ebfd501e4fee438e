//! Sentinel 1.8.9's `ThrottlingController`: a leaky bucket that paces calls at an even interval.

use super::schedule::{Schedule, Slot};
use super::Decision;
use std::num::NonZeroU32;
use std::time::Duration;

/// Sentinel's default `statDurationMs`.
const ONE_SECOND_MS: NonZeroU32 = match NonZeroU32::new(1_000) {
    Some(ms) => ms,
    None => panic!("1000 is not zero"), // evaluated at compile time
};

/// `stat_duration` in whole milliseconds, if it is a whole number of them from 1 to
/// `u32::MAX` (Sentinel's `int statDurationMs`, which must be positive).
pub(crate) fn stat_duration_ms(stat_duration: Duration) -> Option<NonZeroU32> {
    if stat_duration.subsec_nanos() % 1_000_000 != 0 {
        return None;
    }
    u32::try_from(stat_duration.as_millis())
        .ok()
        .and_then(NonZeroU32::new)
}

/// Java's `Math.round(double)` for a positive value: the nearest whole number, halves up (as
/// Rust's `round` rounds them away from zero), saturating at `Long.MAX_VALUE`.
fn java_round(x: f64) -> i64 {
    x.round() as i64
}

/// Paces calls `stat_duration / count` apart (`1 / count` seconds by default), queueing each for
/// at most `max_queueing_time`: Sentinel 1.8.9's `ThrottlingController` (the leaky bucket),
/// with its switch between millisecond and nanosecond pacing.
///
/// Like Sentinel's, it paces in nanoseconds when `stat_duration` (in whole milliseconds) is not
/// a multiple of `Math.round(count)`, or when `count / stat_duration_ms > 1`; otherwise in
/// milliseconds: the clock is read in whole milliseconds (floored) and a call that costs
/// `acquire` permits takes `Math.round(stat_duration_ms * acquire / count)` ms of the schedule,
/// instead of `Math.round(1e6 * stat_duration_ms * acquire / count)` ns.
///
/// If the schedule's last slot plus a call's cost is already past, the call passes at once and
/// the schedule restarts from now (no credit builds up while idle); otherwise it is queued
/// behind the last slot and told how long to wait, or refused if that wait would be longer than
/// `max_queueing_time` (a wait exactly equal to it is accepted). The first call always passes.
/// `count <= 0` refuses everything; `acquire == 0` always passes.
///
/// Deviations from Sentinel, each a fix: the schedule is updated with compare-and-swap, so that
/// concurrent callers can neither both take the same slot (Sentinel's "contention may exist here,
/// but it's okay") nor leave a gap by rolling a reservation back after another caller queued
/// behind it; a reservation that would exceed `max_queueing_time` is never taken. Sentinel
/// divides by zero choosing its pacing when `Math.round(count)` is 0 (`count < 0.5`); here such a
/// rate is paced in nanoseconds.
///
/// # Examples
///
/// ```
/// use spillway::flow::{Decision, Throttle};
/// use std::time::Duration;
///
/// // 3 per second, queue at most 1 s: calls 333.33 ms apart (1000 % 3 != 0: nanoseconds).
/// let throttle = Throttle::new(3.0, Duration::from_secs(1));
/// assert!(throttle.paces_in_nanos());
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
    stat_duration_ms: u32,
    /// Sentinel's `useNanoSeconds`.
    nanos: bool,
    schedule: Schedule,
}

/// Nanoseconds in a millisecond (Sentinel's `MS_TO_NS_OFFSET`).
const MS_TO_NS: u64 = 1_000_000;

impl Throttle {
    /// `count` calls per second, each waiting at most `max_queueing_time`: Sentinel's
    /// `ThrottlingController(maxQueueingTimeMs, count)`, whose `statDurationMs` is 1000.
    pub fn new(count: f64, max_queueing_time: Duration) -> Self {
        Self::per(count, ONE_SECOND_MS, max_queueing_time)
    }

    /// `count` calls per `stat_duration_ms` milliseconds, each waiting at most
    /// `max_queueing_time`: Sentinel's
    /// `ThrottlingController(maxQueueingTimeMs, count, statDurationMs)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::{Decision, Throttle};
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    ///
    /// // 5 per 500 ms, 100 ms apart; 500 % 5 == 0 and 5 / 500 <= 1: paced in milliseconds, so
    /// // the clock is read in whole milliseconds.
    /// let per_half_second = NonZeroU32::new(500).unwrap();
    /// let throttle = Throttle::per(5.0, per_half_second, Duration::from_millis(200));
    /// assert!(!throttle.paces_in_nanos());
    /// let t0 = 1_700_000_000_000_000_000;
    /// assert_eq!(throttle.check(t0 + 700_000, 1), Decision::Pass); // 0.7 ms reads as 0
    /// assert_eq!(throttle.check(t0 + 700_000, 1), Decision::Wait(Duration::from_millis(100)));
    /// ```
    pub fn per(count: f64, stat_duration_ms: NonZeroU32, max_queueing_time: Duration) -> Self {
        let stat = stat_duration_ms.get();
        // Java: statDurationMs % Math.round(maxCountPerStat) != 0
        //       || maxCountPerStat / statDurationMs > 1 (only when maxCountPerStat > 0).
        let nanos = count > 0.0 && {
            let rounded = java_round(count);
            rounded == 0 || i64::from(stat) % rounded != 0 || count / f64::from(stat) > 1.0
        };
        Self {
            count,
            stat_duration_ms: stat,
            nanos,
            schedule: Schedule::new(max_queueing_time),
        }
    }

    /// Whether it paces in nanoseconds (Sentinel's `useNanoSeconds`), rather than in whole
    /// milliseconds.
    pub fn paces_in_nanos(&self) -> bool {
        self.nanos
    }

    /// The nanoseconds of schedule `acquire` permits take, saturating: Java's
    /// `Math.round(1.0 * MS_TO_NS * statDurationMs * acquire / count)` when pacing in
    /// nanoseconds, else `Math.round(1.0 * statDurationMs * acquire / count)` milliseconds.
    pub fn cost_nanos(&self, acquire: u32) -> u64 {
        let stat = f64::from(self.stat_duration_ms);
        if self.nanos {
            (1_000_000.0 * stat * f64::from(acquire) / self.count).round() as u64
        } else {
            ((stat * f64::from(acquire) / self.count).round() as u64).saturating_mul(MS_TO_NS)
        }
    }

    /// The time the schedule is kept in: `now_nanos`, or its whole milliseconds when pacing in
    /// milliseconds (Sentinel's `TimeUtil.currentTimeMillis()`).
    fn clock(&self, now_nanos: u64) -> u64 {
        if self.nanos {
            now_nanos
        } else {
            now_nanos - now_nanos % MS_TO_NS
        }
    }

    /// Pass, wait or block `acquire` permits at `now_nanos`. A `Wait` has reserved its slot.
    pub fn check(&self, now_nanos: u64, acquire: u32) -> Decision {
        self.reserve(now_nanos, acquire).0
    }

    /// How long the calls already queued still wait at `now_nanos`: the last reserved slot's
    /// distance from now (zero when nothing waits).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::Throttle;
    /// use std::time::Duration;
    ///
    /// let throttle = Throttle::new(10.0, Duration::from_secs(1));
    /// for _ in 0..3 {
    ///     throttle.check(0, 1); // one passes, two wait: 100 and 200 ms
    /// }
    /// assert_eq!(throttle.queue_wait(0), Duration::from_millis(200));
    /// assert_eq!(throttle.queue_wait(150_000_000), Duration::from_millis(50));
    /// ```
    pub fn queue_wait(&self, now_nanos: u64) -> Duration {
        self.schedule.backlog(self.clock(now_nanos))
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
        self.schedule
            .reserve(self.clock(now_nanos), self.cost_nanos(acquire))
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
