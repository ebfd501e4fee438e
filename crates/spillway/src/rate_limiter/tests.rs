//! The scenarios of Guava's `RateLimiterTest`, as event traces on a `ManualClock`: `R` is what
//! an acquire waited, `U` is time the test let pass, in seconds as Guava prints them (`%3.2f`,
//! half up).

use super::*;
use crate::ManualClock;

mod rate_changes;
mod reservations;

struct Trace {
    clock: ManualClock,
    events: Vec<String>,
}

fn seconds(micros: u128) -> String {
    // Java's %.2f rounds the shortest decimal form half up; micros are exact decimals.
    let hundredths = (micros + 5_000) / 10_000;
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

impl Trace {
    fn new() -> Self {
        Self {
            clock: ManualClock::new(),
            events: Vec::new(),
        }
    }

    fn bursty(&self, rate: f64) -> RateLimiter {
        RateLimiter::bursty_with_clock(rate, self.clock.clone()).unwrap()
    }

    fn warming_up(&self, rate: f64, warmup_ms: u64, cold_factor: f64) -> RateLimiter {
        let warmup = Duration::from_millis(warmup_ms);
        RateLimiter::builder(rate)
            .warm_up(warmup)
            .cold_factor(cold_factor)
            .clock(self.clock.clone())
            .build()
            .unwrap()
    }

    fn acquire(&mut self, limiter: &RateLimiter, permits: u32) {
        let waited = limiter.acquire(permits);
        self.events
            .push(format!("R{}", seconds(waited.as_micros())));
    }

    fn sleep_ms(&mut self, millis: u64) {
        self.clock.advance_millis(millis);
        self.events
            .push(format!("U{}", seconds(u128::from(millis) * 1_000)));
    }

    fn assert_events(&mut self, expected: &[&str]) {
        let expected: Vec<String> = expected
            .iter()
            .flat_map(|group| group.split(", "))
            .map(str::to_owned)
            .collect();
        assert_eq!(std::mem::take(&mut self.events), expected);
    }
}

#[test]
fn simple() {
    let mut t = Trace::new();
    let limiter = t.bursty(5.0);
    for _ in 0..3 {
        t.acquire(&limiter, 1);
    }
    t.assert_events(&["R0.00", "R0.20", "R0.20"]);
}

#[test]
fn simple_with_wait() {
    let mut t = Trace::new();
    let limiter = t.bursty(5.0);
    t.acquire(&limiter, 1);
    t.sleep_ms(200);
    t.acquire(&limiter, 1);
    t.acquire(&limiter, 1);
    t.assert_events(&["R0.00", "U0.20", "R0.00", "R0.20"]);
}

#[test]
fn earliest_available_in_the_past() {
    let mut t = Trace::new();
    let limiter = t.bursty(5.0);
    t.acquire(&limiter, 1);
    t.sleep_ms(400);
    t.acquire(&limiter, 1);
    t.acquire(&limiter, 1);
    t.acquire(&limiter, 1);
    t.assert_events(&["R0.00", "U0.40", "R0.00", "R0.00", "R0.20"]);
}

#[test]
fn one_second_burst() {
    let mut t = Trace::new();
    let limiter = t.bursty(5.0);
    t.sleep_ms(1000); // max capacity reached
    t.sleep_ms(1000); // this makes no difference
    t.acquire(&limiter, 1); // the first request
    t.acquire(&limiter, 1); // from capacity
    t.acquire(&limiter, 3); // from capacity
    t.acquire(&limiter, 1); // concluding a burst of 5 permits
    t.acquire(&limiter, 1); // capacity exhausted
    t.assert_events(&[
        "U1.00", "U1.00", "R0.00", "R0.00", "R0.00", "R0.00", "R0.20",
    ]);
}

#[test]
fn simple_weights() {
    let mut t = Trace::new();
    let limiter = t.bursty(1.0);
    for permits in [1, 1, 2, 4, 8, 1] {
        t.acquire(&limiter, permits);
    }
    t.assert_events(&["R0.00", "R1.00", "R1.00", "R2.00", "R4.00", "R8.00"]);
}

#[test]
fn three_per_second_truncates_to_the_microsecond() {
    let limiter = RateLimiter::bursty_with_clock(3.0, ManualClock::new()).unwrap();
    assert_eq!(limiter.reserve(1), Duration::ZERO);
    assert_eq!(limiter.reserve(2), Duration::from_micros(333_333));
    assert_eq!(limiter.reserve(1), Duration::from_micros(333_333 + 666_666));
    assert_eq!(limiter.rate(), 1_000_000.0 / (1_000_000.0 / 3.0));
}

#[test]
fn warm_up() {
    let mut t = Trace::new();
    let limiter = t.warming_up(2.0, 4000, 3.0);
    for _ in 0..8 {
        t.acquire(&limiter, 1); // #1
    }
    t.sleep_ms(500); // #2: to repay for the last acquire
    t.sleep_ms(4000); // #3: becomes cold again
    for _ in 0..8 {
        t.acquire(&limiter, 1); // #4
    }
    t.sleep_ms(500); // #5: to repay for the last acquire
    t.sleep_ms(2000); // #6: didn't get cold! It would take another 2 seconds to go cold
    for _ in 0..8 {
        t.acquire(&limiter, 1); // #7
    }
    t.assert_events(&[
        "R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50",
        "U0.50",
        "U4.00",
        "R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50",
        "U0.50",
        "U2.00",
        "R0.00, R0.50, R0.50, R0.50, R0.50, R0.50, R0.50, R0.50",
    ]);
}

#[test]
fn warm_up_with_cold_factor_ten() {
    let mut t = Trace::new();
    let limiter = t.warming_up(5.0, 4000, 10.0);
    for _ in 0..8 {
        t.acquire(&limiter, 1);
    }
    t.sleep_ms(200);
    t.sleep_ms(4000);
    for _ in 0..8 {
        t.acquire(&limiter, 1);
    }
    t.sleep_ms(200);
    t.sleep_ms(1000); // still warm: it would take another 3 seconds to go cold
    for _ in 0..8 {
        t.acquire(&limiter, 1);
    }
    t.assert_events(&[
        "R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20",
        "U0.20",
        "U4.00",
        "R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20",
        "U0.20",
        "U1.00",
        "R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20",
    ]);
}

#[test]
fn warm_up_and_update() {
    let mut t = Trace::new();
    let limiter = t.warming_up(2.0, 4000, 3.0);
    for _ in 0..8 {
        t.acquire(&limiter, 1); // #1
    }
    t.sleep_ms(4500); // #2: back to cold (warm-up period + repay the last acquire)
    for _ in 0..3 {
        t.acquire(&limiter, 1); // #3: somewhere in the warm-up period
    }
    limiter.set_rate(4.0).unwrap(); // double the rate
    t.acquire(&limiter, 1); // #4: repays the last acquire at the old rate
    for _ in 0..4 {
        t.acquire(&limiter, 1); // #5
    }
    t.sleep_ms(4250); // #6: back to cold
    for _ in 0..11 {
        t.acquire(&limiter, 1); // #7: the warm-up from totally cold
    }
    t.assert_events(&[
        "R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50",
        "U4.50",
        "R0.00, R1.38, R1.13",
        "R0.88",
        "R0.34, R0.28, R0.25, R0.25",
        "U4.25",
        "R0.00, R0.72, R0.66, R0.59, R0.53, R0.47, R0.41",
        "R0.34, R0.28, R0.25, R0.25",
    ]);
}

#[test]
fn bursty_and_update() {
    let mut t = Trace::new();
    let limiter = t.bursty(1.0);
    t.acquire(&limiter, 1); // no wait
    t.acquire(&limiter, 1); // R1.00, to repay the previous
    limiter.set_rate(2.0).unwrap();
    t.acquire(&limiter, 1); // R1.00, the previous was under the old rate
    t.acquire(&limiter, 2); // R0.50, now the rate takes effect
    t.acquire(&limiter, 4); // R1.00
    t.acquire(&limiter, 1); // R2.00
    t.assert_events(&["R0.00", "R1.00", "R1.00", "R0.50", "R1.00", "R2.00"]);
}

#[test]
fn try_acquire_no_wait_allowed() {
    let t = Trace::new();
    let limiter = t.bursty(5.0);
    assert!(limiter.try_acquire(1, Duration::ZERO).is_some());
    assert!(limiter.try_acquire(1, Duration::ZERO).is_none());
    assert!(limiter.try_acquire(1, Duration::ZERO).is_none());
    t.clock.advance_millis(100);
    assert!(limiter.try_acquire(1, Duration::ZERO).is_none());
}

#[test]
fn try_acquire_some_wait_allowed() {
    let t = Trace::new();
    let limiter = t.bursty(5.0);
    assert!(limiter.try_acquire(1, Duration::ZERO).is_some());
    assert!(limiter.try_acquire(1, Duration::from_millis(200)).is_some());
    assert!(limiter.try_acquire(1, Duration::from_millis(100)).is_none());
    t.clock.advance_millis(100);
    assert!(limiter.try_acquire(1, Duration::from_millis(100)).is_some());
}

#[test]
fn try_acquire_overflow() {
    let t = Trace::new();
    let limiter = t.bursty(5.0);
    assert!(limiter.try_acquire(1, Duration::ZERO).is_some());
    t.clock.advance_millis(100);
    assert!(limiter.try_acquire(1, Duration::MAX).is_some());
}

#[test]
fn try_acquire_after_a_burst() {
    // Guava's testTryAcquire_negative, with a zero timeout for Guava's negative ones.
    let t = Trace::new();
    let limiter = t.bursty(5.0);
    assert!(limiter.try_acquire(5, Duration::ZERO).is_some());
    t.clock.advance_millis(900);
    assert!(limiter.try_acquire(1, Duration::ZERO).is_none());
    t.clock.advance_millis(100);
    assert!(limiter.try_acquire(1, Duration::ZERO).is_some());
}

#[test]
fn immediate_try_acquire() {
    let t = Trace::new();
    let limiter = t.bursty(1.0);
    assert!(limiter.try_acquire(1, Duration::ZERO).is_some());
    assert!(limiter.try_acquire(1, Duration::ZERO).is_none());
}

#[test]
fn smallest_rate_can_acquire_exactly_once() {
    let t = Trace::new();
    let limiter = t.bursty(f64::from_bits(1)); // Java's Double.MIN_VALUE
    assert!(limiter.try_acquire(1, Duration::ZERO).is_some());
    assert!(limiter.try_acquire(1, Duration::ZERO).is_none());
    t.clock.advance(Duration::from_secs(1_000_000));
    assert!(limiter.try_acquire(1, Duration::ZERO).is_none());
}

#[test]
fn infinity_bursty() {
    let mut t = Trace::new();
    let limiter = t.bursty(f64::INFINITY);
    for permits in [i32::MAX as u32 / 4, i32::MAX as u32 / 2, i32::MAX as u32] {
        t.acquire(&limiter, permits);
    }
    t.assert_events(&["R0.00", "R0.00", "R0.00"]); // no wait, infinite rate

    limiter.set_rate(2.0).unwrap();
    for _ in 0..5 {
        t.acquire(&limiter, 1);
    }
    // The saved-up burst (one second: 2 permits), the free request, then 0.5 s per request.
    t.assert_events(&["R0.00", "R0.00", "R0.00", "R0.50", "R0.50"]);

    limiter.set_rate(f64::INFINITY).unwrap();
    for _ in 0..3 {
        t.acquire(&limiter, 1);
    }
    t.assert_events(&["R0.50", "R0.00", "R0.00"]); // repay the last request, then back to +oo
}

#[test]
fn infinity_warm_up() {
    let mut t = Trace::new();
    let limiter = t.warming_up(f64::INFINITY, 10_000, 3.0);
    for permits in [i32::MAX as u32 / 4, i32::MAX as u32 / 2, i32::MAX as u32] {
        t.acquire(&limiter, permits);
    }
    t.assert_events(&["R0.00", "R0.00", "R0.00"]);

    limiter.set_rate(1.0).unwrap();
    for _ in 0..3 {
        t.acquire(&limiter, 1);
    }
    t.assert_events(&["R0.00", "R1.00", "R1.00"]);

    limiter.set_rate(f64::INFINITY).unwrap();
    for _ in 0..3 {
        t.acquire(&limiter, 1);
    }
    t.assert_events(&["R1.00", "R0.00", "R0.00"]);
}

#[test]
fn bad_arguments_are_errors() {
    let clock = ManualClock::new();
    for rate in [0.0, -1.0, f64::NAN] {
        assert!(matches!(
            RateLimiter::bursty_with_clock(rate, clock.clone()),
            Err(RateLimiterError::Rate(_))
        ));
    }
    let limiter = RateLimiter::bursty_with_clock(1.0, clock.clone()).unwrap();
    assert!(limiter.set_rate(f64::NAN).is_err());
    assert_eq!(limiter.rate(), 1.0); // unchanged
    let cold = RateLimiter::builder(1.0)
        .warm_up(Duration::ZERO)
        .cold_factor(0.5)
        .clock(clock.clone())
        .build();
    assert_eq!(cold.unwrap_err(), RateLimiterError::ColdFactor(0.5));
    assert_eq!(
        RateLimiter::builder(0.0)
            .clock(clock.clone())
            .build()
            .unwrap_err(),
        RateLimiterError::Rate(0.0)
    );
    // The constructors the builder replaced still check their arguments.
    #[allow(deprecated)]
    let negative = RateLimiter::bursty_with_max_burst_with_clock(1.0, -1.0, clock.clone());
    assert_eq!(negative.unwrap_err(), RateLimiterError::MaxBurst(-1.0));
    #[allow(deprecated)]
    let cold = RateLimiter::warming_up_with_cold_factor_with_clock(1.0, Duration::ZERO, 0.5, clock);
    assert_eq!(cold.unwrap_err(), RateLimiterError::ColdFactor(0.5));
}

/// Guava refuses a request for no permits; spillway grants it at once and reserves nothing:
/// the next caller's wait is what it would have been.
#[test]
fn no_permits_are_granted_at_once_and_reserve_nothing() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::bursty_with_clock(1.0, clock.clone()).unwrap();
    assert_eq!(limiter.acquire(1), Duration::ZERO); // the next caller owes 1 s
    assert_eq!(limiter.acquire(0), Duration::ZERO);
    assert_eq!(limiter.reserve(0), Duration::ZERO);
    assert_eq!(limiter.try_acquire(0, Duration::ZERO), Some(Duration::ZERO));
    assert_eq!(limiter.time_until_available(0), Duration::ZERO);
    let nothing = limiter.reserve_cancellable(0);
    assert_eq!(nothing.wait(), Duration::ZERO);
    assert!(nothing.cancel());
    assert_eq!(clock.now_nanos(), 0, "nothing waited");
    assert_eq!(limiter.time_until_available(1), Duration::from_secs(1));
    assert_eq!(limiter.reserve(1), Duration::from_secs(1));
}

#[test]
fn zero_warm_up_period_never_stores_nan() {
    let mut t = Trace::new();
    let limiter = t.warming_up(2.0, 0, 3.0);
    t.acquire(&limiter, 1);
    t.sleep_ms(10_000);
    assert_eq!(limiter.stored_permits(), 0.0);
    t.acquire(&limiter, 1);
    t.acquire(&limiter, 1);
    t.assert_events(&["R0.00", "U10.00", "R0.00", "R0.50"]);
}

#[test]
fn configurable_burst_and_peeks() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder(10.0)
        .max_burst(Duration::from_secs(2))
        .clock(clock.clone())
        .build()
        .unwrap();
    clock.advance_millis(5_000);
    assert_eq!(limiter.stored_permits(), 20.0); // two seconds' worth
    assert_eq!(limiter.time_until_available(1), Duration::ZERO);
    assert_eq!(limiter.reserve(20), Duration::ZERO);
    assert_eq!(limiter.reserve(1), Duration::ZERO); // stored 0 now; pays later
    assert_eq!(limiter.time_until_available(5), Duration::from_millis(100));
    assert_eq!(limiter.time_until_available(5), Duration::from_millis(100)); // no change
}

/// Guava's testTimeToWarmUpIsHonouredEvenWithWeights: going from cold to stable takes the
/// warm-up period, however the permits are grouped.
#[test]
fn time_to_warm_up_is_honoured_even_with_weights() {
    let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
    let warmup_permits = 10u32;
    for _trial in 0..20 {
        for cold_factor in [2.0, 3.0, 10.0] {
            for qps in [4.0, 2.0, 1.0, 0.5, 0.1] {
                // warmupPeriod = (1 + coldFactor) * warmupPermits * stableInterval / 2
                let warmup_millis =
                    ((1.0 + cold_factor) * f64::from(warmup_permits) / (2.0 * qps) * 1000.0) as u64;
                let clock = ManualClock::new();
                let limiter = RateLimiter::builder(qps)
                    .warm_up(Duration::from_millis(warmup_millis))
                    .cold_factor(cold_factor)
                    .clock(clock.clone())
                    .build()
                    .unwrap();
                let start = clock.now_millis();
                let mut permits = warmup_permits;
                while permits > 0 {
                    let next = random.below(permits).max(1);
                    permits -= next;
                    limiter.acquire(next);
                }
                limiter.acquire(1); // to repay any pending debt
                assert_eq!(
                    clock.now_millis() - start,
                    warmup_millis,
                    "{cold_factor} {qps}"
                );
            }
        }
    }
}

/// A small deterministic generator (xorshift), so the test needs no extra crate.
struct Xorshift(u64);

impl Xorshift {
    fn below(&mut self, bound: u32) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % u64::from(bound)) as u32
    }
}
