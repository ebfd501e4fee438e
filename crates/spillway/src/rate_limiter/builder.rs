//! A rate limiter built setting by setting.

use super::{RateLimiter, RateLimiterError, DEFAULT_COLD_FACTOR};
use crate::clock::{AnyClock, Clock, SystemClock};
use std::time::Duration;

/// Builds a [`RateLimiter`] (see [`RateLimiter::builder`]): bursty, storing up to one second of
/// permits, on the system clock, unless told otherwise.
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, RateLimiter};
/// use std::time::Duration;
///
/// // Guava's `create(10.0, 5, SECONDS)` with a cold factor of 4, on a manual clock.
/// let warming = RateLimiter::builder(10.0)
///     .warm_up(Duration::from_secs(5))
///     .cold_factor(4.0)
///     .clock(ManualClock::new())
///     .build()?;
/// // Cold, a permit costs close to 4 stable intervals of 100 ms: the next caller owes it.
/// assert_eq!(warming.reserve(1), Duration::ZERO);
/// let owed = warming.reserve(1);
/// assert!(owed > Duration::from_millis(350) && owed <= Duration::from_millis(400));
///
/// // A bursty limiter that stores up to 2 s of permits.
/// let bursty = RateLimiter::builder(100.0).max_burst(Duration::from_secs(2)).build()?;
/// # let _ = bursty;
/// # Ok::<(), spillway::RateLimiterError>(())
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build`"]
pub struct RateLimiterBuilder {
    permits_per_second: f64,
    max_burst_seconds: f64,
    warm_up: Option<Duration>,
    cold_factor: f64,
    clock: Option<AnyClock>,
}

impl RateLimiter {
    /// A builder for a limiter handing out `permits_per_second`: bursty (Guava's
    /// `create(rate)`) until [`warm_up`](RateLimiterBuilder::warm_up) makes it warm up.
    pub fn builder(permits_per_second: f64) -> RateLimiterBuilder {
        RateLimiterBuilder {
            permits_per_second,
            max_burst_seconds: 1.0,
            warm_up: None,
            cold_factor: DEFAULT_COLD_FACTOR,
            clock: None,
        }
    }
}

impl RateLimiterBuilder {
    /// A bursty limiter stores up to this much time's worth of permits while unused (Guava
    /// fixes one second). A warming-up limiter stores its own amount instead, and ignores it.
    pub fn max_burst(mut self, burst: Duration) -> Self {
        self.max_burst_seconds = burst.as_secs_f64();
        self
    }

    /// Warms up over `period` (Guava's `create(rate, warmupPeriod)`): after idling, a permit
    /// costs up to `cold_factor` stable intervals, falling to one over the period.
    pub fn warm_up(mut self, period: Duration) -> Self {
        self.warm_up = Some(period);
        self
    }

    /// The cold factor of a warming-up limiter, at least 1 (Guava: 3); a bursty limiter has
    /// none, and ignores it.
    pub fn cold_factor(mut self, cold_factor: f64) -> Self {
        self.cold_factor = cold_factor;
        self
    }

    /// The clock it reads and sleeps on (the system clock by default).
    pub fn clock<C: Clock>(mut self, clock: C) -> Self {
        self.clock = Some(AnyClock::from_clock(clock));
        self
    }

    /// The limiter.
    ///
    /// # Errors
    ///
    /// A rate that is not positive, a cold factor below 1 or not finite.
    pub fn build(self) -> Result<RateLimiter, RateLimiterError> {
        let clock = self
            .clock
            .unwrap_or_else(|| AnyClock::from_clock(SystemClock::new()));
        match self.warm_up {
            Some(period) => RateLimiter::warming_up_any(
                self.permits_per_second,
                period,
                self.cold_factor,
                clock,
            ),
            None => RateLimiter::bursty_any(self.permits_per_second, self.max_burst_seconds, clock),
        }
    }
}
