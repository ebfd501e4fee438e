//! Guava's scenarios around rate changes and extreme cold factors: a cold factor of 1, a rate
//! doubled in the middle of a warm-up with cold factor 10, an infinite rate left after time has
//! passed, and bursts that never exceed a second's worth of permits, whatever the rate was.

use super::{Trace, Xorshift};
use crate::{Clock, ManualClock, RateLimiter};
use std::time::Duration;

#[test]
fn warm_up_with_cold_factor_one() {
    // Cold permits cost the stable interval: the warm-up curve is flat, so stored permits pay
    // for idle time exactly as fresh ones would.
    let mut t = Trace::new();
    let limiter = t.warming_up(5.0, 4000, 1.0);
    for _ in 0..8 {
        t.acquire(&limiter, 1);
    }
    t.sleep_ms(340);
    for _ in 0..8 {
        t.acquire(&limiter, 1);
    }
    t.assert_events(&[
        "R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20",
        "U0.34",
        "R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20",
    ]);
}

#[test]
fn warm_up_and_update_with_cold_factor_ten() {
    let mut t = Trace::new();
    let limiter = t.warming_up(5.0, 4000, 10.0);
    for _ in 0..8 {
        t.acquire(&limiter, 1);
    }
    t.sleep_ms(4200); // cold again: the warm-up period, plus the last acquire's debt
    for _ in 0..3 {
        t.acquire(&limiter, 1); // part way up the warm-up curve
    }
    limiter.set_rate(10.0).unwrap();
    t.acquire(&limiter, 1); // pays the last acquire's debt, taken at the old rate
    for _ in 0..4 {
        t.acquire(&limiter, 1);
    }
    t.sleep_ms(4100); // cold again
    for _ in 0..11 {
        t.acquire(&limiter, 1); // the whole warm-up, from cold, at the new rate
    }
    // The warm-up takes the same time at the new rate; only the permits differ.
    t.assert_events(&[
        "R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20",
        "U4.20",
        "R0.00, R1.75, R1.26",
        "R0.76",
        "R0.20, R0.10, R0.10, R0.10",
        "U4.10",
        "R0.00, R0.94, R0.81, R0.69, R0.57, R0.44, R0.32",
        "R0.20, R0.10, R0.10, R0.10",
    ]);
}

#[test]
fn infinity_bursty_after_time_has_passed() {
    // Guava's issue 1791: a limiter made at an infinite rate, slowed down after idling, starts
    // with a full burst of the new rate (not with an infinite or undefined one).
    let mut t = Trace::new();
    let limiter = t.bursty(f64::INFINITY);
    t.clock.advance(Duration::from_millis(1));
    limiter.set_rate(2.0).unwrap();
    for _ in 0..5 {
        t.acquire(&limiter, 1);
    }
    // Two stored permits (one second's worth), the free request, then 0.5 s each.
    t.assert_events(&["R0.00", "R0.00", "R0.00", "R0.50", "R0.50"]);
}

#[test]
fn infinity_warm_up_after_time_has_passed() {
    // A warming-up limiter leaving an infinite rate starts warm: no stored permits.
    let mut t = Trace::new();
    let limiter = t.warming_up(f64::INFINITY, 10_000, 3.0);
    t.clock.advance(Duration::from_millis(1));
    limiter.set_rate(1.0).unwrap();
    for _ in 0..5 {
        t.acquire(&limiter, 1);
    }
    t.assert_events(&["R0.00", "R1.00", "R1.00", "R1.00", "R1.00"]);
}

/// Acquires `permits` in random groups, then one more to pay what the last group owes; returns
/// the whole milliseconds the clock moved (Guava's `measureTotalTimeMillis`).
fn total_millis(
    limiter: &RateLimiter,
    clock: &ManualClock,
    permits: u32,
    random: &mut Xorshift,
) -> u64 {
    let start = clock.now_nanos();
    let mut left = permits;
    while left > 0 {
        let next = random.below(left).max(1);
        left -= next;
        limiter.acquire(next);
    }
    limiter.acquire(1);
    (clock.now_nanos() - start) / 1_000_000
}

#[test]
fn never_a_burst_of_more_than_one_second() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::bursty_with_clock(1.0, clock.clone()).unwrap();
    let mut random = Xorshift(0x2545_f491_4f6c_dd1d);
    for rate in [1_000u32, 1, 10, 1_000_000, 10, 1] {
        // Idle long enough to store far more than a second's worth at any of these rates.
        clock.advance(Duration::from_secs(u64::from(rate)));
        limiter.set_rate(f64::from(rate)).unwrap();
        // One second's worth goes out in a burst (less than a second)...
        let burst = total_millis(&limiter, &clock, rate, &mut random);
        assert!(burst <= 1_000, "rate {rate}: the burst took {burst} ms");
        // ...but the same again takes at least a second.
        let after = total_millis(&limiter, &clock, rate, &mut random);
        assert!(after >= 1_000, "rate {rate}: after the burst, {after} ms");
    }
}
