//! Guava's `RateLimiter`, exact to the microsecond: [`RateLimiter`].

mod builder;
mod error;
#[cfg(all(test, spillway_loom))]
mod loom_schedule;
mod reservation;
mod schedule;
mod smooth;

pub use builder::RateLimiterBuilder;
pub use error::RateLimiterError;
pub use reservation::Reservation;

use crate::clock::{AnyClock, Clock, Stopwatch, SystemClock};
use schedule::Schedule;
use smooth::Curve;
use std::fmt;
use std::time::Duration;

/// Guava's default cold factor for a warming-up limiter.
pub const DEFAULT_COLD_FACTOR: f64 = 3.0;

/// A rate limiter with Guava's semantics: `SmoothBursty` and `SmoothWarmingUp`.
///
/// Permits are handed out at a steady rate. A caller never waits for its own permits: it waits
/// for the previous caller's (the first reservation is free and the next caller pays for it),
/// so a large request is granted at once and slows the requests after it. While unused, a
/// bursty limiter stores up to `max_burst_seconds` of permits, which later requests take
/// without waiting; a warming-up limiter stores permits that cost *more* (up to `cold_factor`
/// times the stable interval), so that after idling it starts slowly and warms up over the
/// warm-up period.
///
/// The arithmetic is Guava's, to the truncation: time in whole microseconds read from the clock,
/// `(long)` casts where Guava casts, saturating sums. A rate of 3/s costs 333333 µs a permit and
/// two permits 666666 µs.
///
/// Beyond Guava: the maximum burst of a bursty limiter is configurable; [`time_until_available`]
/// and [`stored_permits`] peek without reserving; a zero warm-up period is sane (Guava stores NaN
/// permits after any idle time); and the clock is injected.
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, RateLimiter};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = RateLimiter::bursty_with_clock(5.0, clock.clone())?;
/// assert_eq!(limiter.acquire(1), Duration::ZERO); // the first is free...
/// assert_eq!(limiter.acquire(1), Duration::from_millis(200)); // ...the next pays for it
/// assert_eq!(limiter.try_acquire(1, Duration::ZERO), None); // not free now
/// # Ok::<(), spillway::RateLimiterError>(())
/// ```
///
/// # Concurrency
///
/// Many threads may share one limiter. A reservation reads the state (Guava's stored permits and
/// next free moment) under a sequence number, computes Guava's arithmetic on a copy, then claims
/// the state with one compare-and-swap of the sequence number and stores the result; if another
/// thread changed the state in the meantime, it starts over. Reservations are therefore totally
/// ordered: each caller's moment is no earlier than the one reserved before it (FIFO by
/// reservation). A refusal (`try_acquire` with the permits not available in time) reads one
/// number and writes nothing. Rate changes go through the same protocol.
///
/// The order is that of the successful claims, not of arrival. A caller that loses a race backs
/// off before it reads again (16 spin-loop hints, about 140 ns on the bench VM, doubling to at
/// most 64), so under heavy contention one thread may make several reservations in a row while
/// another waits: more reservations a second in all, at a bounded cost to the unlucky caller.
/// No permit is ever granted twice or lost to a race; the stress tests check that racing threads
/// are granted exactly what one thread alone would be.
///
/// # Performance
///
/// On the system clock, `try_acquire(1, Duration::ZERO)` costs a read of the TSC when it
/// refuses, and that read plus one compare-and-swap when it passes, as governor's `check` does.
/// In the run of 2026-12-01 on the 2-core VM the benches run on (`docs/benchmarks.md`, group
/// `rate_limiter`, criterion medians), it passed in 19.4 ns and refused in 8.3 ns on one thread,
/// and passed in 81.9 ns a call with two threads passing at once, against 19.7, 10.2 and
/// 104 ns for governor's `check`. Run in alternating rounds with governor (table `paired`), the
/// ratios were 0.894x, 0.808x and 0.779x. Two threads passing at once contend for the state's
/// cache line, which sits alone on a pair of lines.
/// The clock is read once, as whole microseconds since the limiter was made, with one multiply
/// of the elapsed ticks.
///
/// [`time_until_available`]: RateLimiter::time_until_available
/// [`stored_permits`]: RateLimiter::stored_permits
pub struct RateLimiter {
    clock: AnyClock,
    stopwatch: Stopwatch,
    schedule: Schedule,
}

/// Guava's `checkArgument(permitsPerSecond > 0.0 && !Double.isNaN(permitsPerSecond))`.
fn check_rate(permits_per_second: f64) -> Result<(), RateLimiterError> {
    if permits_per_second > 0.0 {
        Ok(())
    } else {
        Err(RateLimiterError::Rate(permits_per_second))
    }
}

impl RateLimiter {
    // === Constructors ===

    /// Guava's `RateLimiter.create(permitsPerSecond)`: a bursty limiter storing up to one
    /// second of permits, on the system clock.
    ///
    /// # Errors
    ///
    /// If the rate is not positive (or NaN).
    pub fn bursty(permits_per_second: f64) -> Result<Self, RateLimiterError> {
        Self::bursty_with_clock(permits_per_second, SystemClock::new())
    }

    /// [`bursty`](Self::bursty) on `clock`.
    ///
    /// # Errors
    ///
    /// If the rate is not positive (or NaN).
    pub fn bursty_with_clock<C: Clock>(
        permits_per_second: f64,
        clock: C,
    ) -> Result<Self, RateLimiterError> {
        Self::bursty_any(permits_per_second, 1.0, AnyClock::from_clock(clock))
    }

    /// A bursty limiter storing up to `max_burst_seconds` of permits (Guava fixes 1.0).
    ///
    /// # Errors
    ///
    /// If the rate is not positive, or the burst is negative or not finite.
    #[deprecated(
        since = "0.2.0",
        note = "use `RateLimiter::builder(rate).max_burst(burst).build()`"
    )]
    pub fn bursty_with_max_burst(
        permits_per_second: f64,
        max_burst_seconds: f64,
    ) -> Result<Self, RateLimiterError> {
        Self::bursty_any(
            permits_per_second,
            max_burst_seconds,
            AnyClock::from_clock(SystemClock::new()),
        )
    }

    /// [`bursty_with_max_burst`](Self::bursty_with_max_burst) on `clock`.
    ///
    /// # Errors
    ///
    /// If the rate is not positive, or the burst is negative or not finite.
    #[deprecated(
        since = "0.2.0",
        note = "use `RateLimiter::builder(rate).max_burst(burst).clock(clock).build()`"
    )]
    pub fn bursty_with_max_burst_with_clock<C: Clock>(
        permits_per_second: f64,
        max_burst_seconds: f64,
        clock: C,
    ) -> Result<Self, RateLimiterError> {
        Self::bursty_any(
            permits_per_second,
            max_burst_seconds,
            AnyClock::from_clock(clock),
        )
    }

    /// The one place a bursty limiter is made.
    pub(crate) fn bursty_any(
        permits_per_second: f64,
        max_burst_seconds: f64,
        clock: AnyClock,
    ) -> Result<Self, RateLimiterError> {
        if !(max_burst_seconds.is_finite() && max_burst_seconds >= 0.0) {
            return Err(RateLimiterError::MaxBurst(max_burst_seconds));
        }
        Self::build(
            Curve::Bursty { max_burst_seconds },
            permits_per_second,
            clock,
        )
    }

    /// Guava's `RateLimiter.create(permitsPerSecond, warmupPeriod)`: a warming-up limiter with
    /// cold factor 3, starting cold, on the system clock.
    ///
    /// # Errors
    ///
    /// If the rate is not positive.
    pub fn warming_up(
        permits_per_second: f64,
        warmup_period: Duration,
    ) -> Result<Self, RateLimiterError> {
        Self::warming_up_with_clock(permits_per_second, warmup_period, SystemClock::new())
    }

    /// [`warming_up`](Self::warming_up) on `clock`.
    ///
    /// # Errors
    ///
    /// If the rate is not positive.
    pub fn warming_up_with_clock<C: Clock>(
        permits_per_second: f64,
        warmup_period: Duration,
        clock: C,
    ) -> Result<Self, RateLimiterError> {
        Self::warming_up_any(
            permits_per_second,
            warmup_period,
            DEFAULT_COLD_FACTOR,
            AnyClock::from_clock(clock),
        )
    }

    /// A warming-up limiter with any cold factor (at least 1): cold, a permit costs
    /// `cold_factor` stable intervals.
    ///
    /// # Errors
    ///
    /// If the rate is not positive, or the cold factor is below 1 or not finite.
    #[deprecated(
        since = "0.2.0",
        note = "use `RateLimiter::builder(rate).warm_up(period).cold_factor(factor).build()`"
    )]
    pub fn warming_up_with_cold_factor(
        permits_per_second: f64,
        warmup_period: Duration,
        cold_factor: f64,
    ) -> Result<Self, RateLimiterError> {
        Self::warming_up_any(
            permits_per_second,
            warmup_period,
            cold_factor,
            AnyClock::from_clock(SystemClock::new()),
        )
    }

    /// [`warming_up_with_cold_factor`](Self::warming_up_with_cold_factor) on `clock`.
    ///
    /// # Errors
    ///
    /// If the rate is not positive, or the cold factor is below 1 or not finite.
    #[deprecated(
        since = "0.2.0",
        note = "use `RateLimiter::builder(rate).warm_up(period).cold_factor(factor).clock(clock).build()`"
    )]
    pub fn warming_up_with_cold_factor_with_clock<C: Clock>(
        permits_per_second: f64,
        warmup_period: Duration,
        cold_factor: f64,
        clock: C,
    ) -> Result<Self, RateLimiterError> {
        Self::warming_up_any(
            permits_per_second,
            warmup_period,
            cold_factor,
            AnyClock::from_clock(clock),
        )
    }

    /// The one place a warming-up limiter is made.
    pub(crate) fn warming_up_any(
        permits_per_second: f64,
        warmup_period: Duration,
        cold_factor: f64,
        clock: AnyClock,
    ) -> Result<Self, RateLimiterError> {
        if !(cold_factor.is_finite() && cold_factor >= 1.0) {
            return Err(RateLimiterError::ColdFactor(cold_factor));
        }
        let warmup_period_micros = i64::try_from(warmup_period.as_micros()).unwrap_or(i64::MAX);
        let curve = Curve::WarmingUp {
            warmup_period_micros,
            cold_factor,
            slope: 0.0,
            threshold_permits: 0.0,
        };
        Self::build(curve, permits_per_second, clock)
    }

    fn build(
        curve: Curve,
        permits_per_second: f64,
        clock: AnyClock,
    ) -> Result<Self, RateLimiterError> {
        check_rate(permits_per_second)?;
        let stopwatch = Stopwatch::start(&clock);
        Ok(Self {
            clock,
            stopwatch,
            schedule: Schedule::new(curve, permits_per_second),
        })
    }

    // === Reading time and the state ===

    /// Guava's `stopwatch.readMicros()`: whole microseconds since the limiter was made.
    #[inline]
    fn now_micros(&self) -> i64 {
        self.stopwatch.read_micros(&self.clock)
    }

    /// Sleeps through the clock, unless there is nothing to wait for.
    #[inline]
    fn sleep(&self, wait: Duration) {
        if !wait.is_zero() {
            self.clock.sleep(wait);
        }
    }

    // === Reserving and acquiring ===

    /// Reserves `permits` and returns how long the caller must wait before using them; nothing
    /// sleeps. Guava's `reserve`. No permits reserve nothing and wait nothing (Guava refuses
    /// them).
    #[inline]
    pub fn reserve(&self, permits: u32) -> Duration {
        if permits == 0 {
            return Duration::ZERO;
        }
        let now = self.now_micros();
        let moment = self
            .schedule
            .update(|smooth| (smooth.reserve_earliest_available(permits, now), true));
        micros(moment - now)
    }

    /// Reserves `permits` and waits for them on the clock ([`Clock::sleep`]: the thread sleeps, a
    /// [`ManualClock`](crate::ManualClock) advances). Returns the time waited. Guava's `acquire`.
    ///
    /// The thread blocks: on an async runtime, wait with `spillway_tower::acquire` or
    /// `spillway_tower::try_acquire_within` instead, which sleep the task, not the thread.
    /// Once `spillway-tower`'s layer or clock is made, a blocking wait inside a tokio runtime
    /// logs a warning, once ([`set_blocking_wait_hook`](crate::set_blocking_wait_hook)).
    pub fn acquire(&self, permits: u32) -> Duration {
        let wait = self.reserve(permits);
        self.sleep(wait);
        wait
    }

    /// Reserves `permits` only if they can be had within `timeout` (a zero timeout: only if free
    /// now), then waits for them as [`acquire`](Self::acquire) does: the time waited, or `None`
    /// if not, and nothing is reserved then. Guava's `tryAcquire(permits, timeout, unit)`: it
    /// succeeds iff the next free moment minus the timeout is not after now. No permits are
    /// granted at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::{ManualClock, RateLimiter};
    /// use std::time::Duration;
    ///
    /// let limiter = RateLimiter::bursty_with_clock(2.0, ManualClock::new())?;
    /// assert_eq!(limiter.try_acquire(1, Duration::ZERO), Some(Duration::ZERO));
    /// assert_eq!(limiter.try_acquire(1, Duration::ZERO), None); // due in 500 ms
    /// assert_eq!(
    ///     limiter.try_acquire(1, Duration::from_secs(1)),
    ///     Some(Duration::from_millis(500))
    /// );
    /// # Ok::<(), spillway::RateLimiterError>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self, permits: u32, timeout: Duration) -> Option<Duration> {
        let wait = self.try_reserve(permits, timeout)?;
        self.sleep(wait);
        Some(wait)
    }

    /// [`try_acquire`](Self::try_acquire) without waiting: reserves if the permits can be had
    /// within `timeout` and returns the wait owed.
    #[inline]
    pub fn try_reserve(&self, permits: u32, timeout: Duration) -> Option<Duration> {
        if permits == 0 {
            return Some(Duration::ZERO);
        }
        let timeout_micros = duration_micros(timeout);
        let now = self.now_micros();
        // Java: queryEarliestAvailable(nowMicros) - timeoutMicros <= nowMicros. A refusal
        // decided on one read of the next free moment writes nothing.
        if self
            .schedule
            .next_free_micros()
            .saturating_sub(timeout_micros)
            > now
        {
            return None;
        }
        let moment = self.schedule.update(|smooth| {
            if smooth
                .next_free_ticket_micros
                .saturating_sub(timeout_micros)
                > now
            {
                return (None, false);
            }
            (Some(smooth.reserve_earliest_available(permits, now)), true)
        });
        moment.map(|moment| micros(moment - now))
    }

    /// Reserves `permits` like [`reserve`](Self::reserve), returning a [`Reservation`] that can
    /// be given back while nothing was reserved after it: what an async waiter that may be
    /// dropped before its turn needs to stay cancellation-safe.
    ///
    /// No permits reserve nothing: the reservation waits nothing, and cancelling it gives
    /// nothing back.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::{ManualClock, RateLimiter};
    /// use std::time::Duration;
    ///
    /// let limiter = RateLimiter::bursty_with_clock(5.0, ManualClock::new())?;
    /// limiter.reserve(1); // free; the next caller owes 200 ms
    /// let reservation = limiter.reserve_cancellable(1);
    /// assert_eq!(reservation.wait(), Duration::from_millis(200));
    /// assert!(reservation.cancel()); // the waiter went away: its slot is free again
    /// assert_eq!(limiter.reserve(1), Duration::from_millis(200));
    /// # Ok::<(), spillway::RateLimiterError>(())
    /// ```
    pub fn reserve_cancellable(&self, permits: u32) -> Reservation<'_> {
        if permits == 0 {
            return Reservation::nothing(self);
        }
        let now = self.now_micros();
        let (moment, undo) = self.schedule.reserve_with_undo(permits, now);
        Reservation {
            limiter: self,
            wait: micros(moment - now),
            undo: Some(undo),
        }
    }

    /// [`try_reserve`](Self::try_reserve), returning a [`Reservation`] that can be given back as
    /// [`reserve_cancellable`](Self::reserve_cancellable)'s can: reserves only if the permits
    /// can be had within `timeout` (`None`, nothing reserved, if not). What an async
    /// "acquire within a timeout" that may be dropped while it waits needs.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::{ManualClock, RateLimiter};
    /// use std::time::Duration;
    ///
    /// let limiter = RateLimiter::bursty_with_clock(5.0, ManualClock::new())?;
    /// limiter.reserve(1); // free; the next caller owes 200 ms
    /// assert!(limiter.try_reserve_cancellable(1, Duration::from_millis(100)).is_none());
    /// let reservation = limiter.try_reserve_cancellable(1, Duration::from_millis(200)).unwrap();
    /// assert_eq!(reservation.wait(), Duration::from_millis(200));
    /// assert!(reservation.cancel()); // given back: the next caller owes 200 ms again
    /// assert_eq!(limiter.reserve(1), Duration::from_millis(200));
    /// # Ok::<(), spillway::RateLimiterError>(())
    /// ```
    pub fn try_reserve_cancellable(
        &self,
        permits: u32,
        timeout: Duration,
    ) -> Option<Reservation<'_>> {
        if permits == 0 {
            return Some(Reservation::nothing(self));
        }
        let now = self.now_micros();
        let timeout_micros = duration_micros(timeout);
        self.schedule
            .try_reserve_with_undo(permits, now, timeout_micros)
            .map(|(moment, undo)| Reservation {
                limiter: self,
                wait: micros(moment - now),
                undo: Some(undo),
            })
    }

    // === Rate ===

    /// Changes the rate. The schedule already reserved stands (the next caller still pays the
    /// previous one's debt at the old rate); stored permits are rescaled by new max / old max.
    /// Guava's `setRate`.
    ///
    /// # Errors
    ///
    /// If the rate is not positive (or NaN); nothing changes then.
    pub fn set_rate(&self, permits_per_second: f64) -> Result<(), RateLimiterError> {
        check_rate(permits_per_second)?;
        let now = self.now_micros();
        self.schedule.set_rate(permits_per_second, now);
        Ok(())
    }

    /// The stable rate, `1e6 / stable interval in µs` (Guava's `getRate`).
    pub fn rate(&self) -> f64 {
        self.schedule.snapshot().rate()
    }

    // === Peeking ===

    /// How long a reservation of `permits` made now would wait, without reserving: a
    /// `Retry-After` hint. With Guava's pay-later rule this does not depend on how many
    /// permits (the caller's own permits are paid by the next caller), except that none wait
    /// nothing.
    pub fn time_until_available(&self, permits: u32) -> Duration {
        if permits == 0 {
            return Duration::ZERO;
        }
        let now = self.now_micros();
        micros(self.schedule.next_free_micros() - now)
    }

    /// Permits stored now (as a reservation now would find them), without reserving.
    pub fn stored_permits(&self) -> f64 {
        let now = self.now_micros();
        self.schedule.snapshot().stored_at(now)
    }
}

/// Whole microseconds of `duration`, saturating at `i64::MAX` (Guava's `unit.toMicros`).
#[inline]
fn duration_micros(duration: Duration) -> i64 {
    let micros = duration
        .as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(duration.subsec_micros()));
    i64::try_from(micros).unwrap_or(i64::MAX)
}

/// A non-negative number of microseconds as a duration (Guava's `max(moment - now, 0)`).
#[inline]
fn micros(value: i64) -> Duration {
    if value <= 0 {
        Duration::ZERO
    } else {
        Duration::from_micros(value.unsigned_abs())
    }
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.schedule.snapshot();
        f.debug_struct("RateLimiter")
            .field("rate", &state.rate())
            .field("stored_permits", &state.stored_permits)
            .field("max_permits", &state.max_permits)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests;
