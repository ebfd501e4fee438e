//! Many threads racing `try_acquire` on one limiter get exactly what one thread alone would: never
//! more than the rate allows, and no permit lost to a race.

use spillway::{ManualClock, RateLimiter};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

const THREADS: usize = 4;
const STEPS: usize = 400;

/// Takes permits one at a time, without waiting, until the limiter refuses, counting them.
fn drain(limiter: &RateLimiter, granted: &AtomicU64) {
    while limiter.try_acquire(1, Duration::ZERO).is_some() {
        granted.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs the same schedule of clock steps on a limiter drained by `THREADS` threads at once and on
/// a reference drained by one; at every step both must have granted the same number of permits.
/// `at_least` is a floor on the permits granted in all, so that the race is not vacuous.
fn racing_threads_grant_what_one_thread_would(
    at_least: u64,
    make: impl Fn(ManualClock) -> RateLimiter,
) {
    let clock = ManualClock::new();
    let reference_clock = ManualClock::new();
    let limiter = make(clock.clone());
    let reference = make(reference_clock.clone());
    let granted = AtomicU64::new(0);
    let reference_granted = AtomicU64::new(0);
    let mut totals = Vec::with_capacity(STEPS);
    let start = Barrier::new(THREADS + 1);
    let end = Barrier::new(THREADS + 1);
    // Steps of 0 to 30 ms in a scrambled order (7,919 is prime to 30,000).
    let step_micros: Vec<u64> = (0..STEPS as u64).map(|i| i * 7_919 % 30_000).collect();

    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..STEPS {
                    start.wait();
                    // The clock stands still until every thread has been refused, so each step
                    // grants a fixed number of permits, whoever wins the races.
                    drain(&limiter, &granted);
                    end.wait();
                }
            });
        }
        // Compared after the scope: a panic here would leave the threads at the barrier.
        for &micros in &step_micros {
            clock.advance(Duration::from_micros(micros));
            reference_clock.advance(Duration::from_micros(micros));
            start.wait();
            drain(&reference, &reference_granted);
            end.wait();
            totals.push((
                granted.load(Ordering::Relaxed),
                reference_granted.load(Ordering::Relaxed),
            ));
        }
    });
    for (step, &(racing, alone)) in totals.iter().enumerate() {
        assert_eq!(racing, alone, "permits granted by step {step}");
    }
    // The threads did race for permits: most steps grant some.
    let total = reference_granted.load(Ordering::Relaxed);
    assert!(total >= at_least, "{total} permits in {STEPS} steps");
}

#[test]
fn bursty_limiter_under_racing_threads() {
    // 200 permits a second and up to 50 ms of them stored (10 permits): steps of up to 30 ms
    // both run the store full and leave it part full.
    // About 1,200 permits.
    racing_threads_grant_what_one_thread_would(1_000, |clock| {
        RateLimiter::builder(200.0)
            .max_burst(Duration::from_millis(50))
            .clock(clock)
            .build()
            .unwrap()
    });
}

#[test]
fn warming_up_limiter_under_racing_threads() {
    // Cold, a permit costs up to three stable intervals: about 240 permits.
    racing_threads_grant_what_one_thread_would(200, |clock| {
        RateLimiter::warming_up_with_clock(200.0, Duration::from_millis(500), clock).unwrap()
    });
}
