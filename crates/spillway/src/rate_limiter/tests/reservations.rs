//! Reservations: ordered under contention, and given back by `cancel` only when nothing was
//! reserved after them.

use crate::{ManualClock, RateLimiter};
use std::time::Duration;

#[test]
fn reservations_are_ordered_under_contention() {
    let limiter = RateLimiter::bursty_with_clock(1_000.0, ManualClock::new()).unwrap();
    let waits = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..100 {
                    let wait = limiter.reserve(1);
                    waits.lock().unwrap().push(wait.as_micros());
                }
            });
        }
    });
    let mut waits = waits.into_inner().unwrap();
    waits.sort_unstable();
    // 400 reservations at one instant: one free, then one every millisecond, none shared.
    let expected: Vec<u128> = (0..400).map(|i| i * 1_000).collect();
    assert_eq!(waits, expected);
}

#[test]
fn a_cancelled_reservation_is_given_back_only_if_last() {
    let limiter = RateLimiter::bursty_with_clock(5.0, ManualClock::new()).unwrap();
    assert_eq!(limiter.reserve(1), Duration::ZERO);
    let first = limiter.reserve_cancellable(1);
    let second = limiter.reserve_cancellable(1);
    assert_eq!(second.wait(), Duration::from_millis(400));
    assert!(!first.cancel()); // someone reserved after it
    assert!(second.cancel());
    // The schedule went back by one permit (next free at 400 ms, not 600 ms), and try_acquire
    // sees it: the lock-free refusal must not refuse on the stale, later moment.
    assert_eq!(
        limiter.try_acquire(1, Duration::from_millis(400)),
        Some(Duration::from_millis(400))
    );
}

#[test]
fn a_cancelled_reservation_returns_stored_permits() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::bursty_with_clock(2.0, clock.clone()).unwrap();
    clock.advance_millis(5_000);
    let reservation = limiter.reserve_cancellable(2);
    assert_eq!(limiter.stored_permits(), 0.0);
    assert!(reservation.cancel());
    assert_eq!(limiter.stored_permits(), 2.0);
}
