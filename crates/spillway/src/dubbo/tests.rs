//! Traces of Dubbo's limits on a manual time line.

use super::*;
use crate::{BlockKind, ManualClock};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

fn tps() -> (TpsLimiter, ManualClock) {
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    (TpsLimiter::new_with_clock(clock.clone()), clock)
}

fn passes(limiter: &TpsLimiter, key: &str, config: TpsConfig, tries: usize) -> usize {
    (0..tries)
        .filter(|_| limiter.try_acquire(key, config).is_ok())
        .count()
}

#[test]
fn window_restarts_strictly_after_its_interval() {
    let (limiter, clock) = tps();
    let config = TpsConfig::new(3, Duration::from_millis(1_000));
    assert_eq!(passes(&limiter, "s", config, 5), 3);
    clock.advance_millis(1_000); // now == start + interval: not yet (Dubbo's `>`)
    assert_eq!(passes(&limiter, "s", config, 1), 0);
    clock.advance(Duration::from_nanos(1));
    assert_eq!(passes(&limiter, "s", config, 5), 3);
}

#[test]
fn window_is_not_aligned_and_restarts_at_the_first_late_call() {
    let (limiter, clock) = tps();
    let config = TpsConfig::new(2, Duration::from_secs(1));
    clock.advance_millis(700); // the window starts at the key's first call, not on a second
    assert_eq!(passes(&limiter, "s", config, 3), 2);
    let state = limiter.state("s").unwrap();
    assert_eq!(state.tokens_left, 0);
    clock.advance_millis(2_500); // long after: restarts now, at this call
    assert_eq!(passes(&limiter, "s", config, 1), 1);
    let restarted = limiter.state("s").unwrap();
    assert_eq!(
        restarted.window_start_nanos - state.window_start_nanos,
        2_500_000_000
    );
    assert_eq!(restarted.tokens_left, 1);
}

#[test]
fn a_changed_config_rebuilds_the_window() {
    let (limiter, clock) = tps();
    assert_eq!(
        passes(&limiter, "s", TpsConfig::new(2, Duration::from_secs(60)), 3),
        2
    );
    clock.advance_millis(10);
    // A new rate: fresh tokens, the window restarting now.
    assert_eq!(
        passes(&limiter, "s", TpsConfig::new(3, Duration::from_secs(60)), 5),
        3
    );
    // A new interval alone rebuilds too.
    assert_eq!(
        passes(&limiter, "s", TpsConfig::new(3, Duration::from_secs(30)), 5),
        3
    );
}

#[test]
fn zero_rate_disables_and_drops_the_state() {
    let (limiter, _clock) = tps();
    let limited = TpsConfig::new(1, Duration::from_secs(60));
    assert_eq!(passes(&limiter, "s", limited, 2), 1);
    let off = TpsConfig::new(0, Duration::from_secs(60));
    assert_eq!(passes(&limiter, "s", off, 100), 100);
    assert!(limiter.state("s").is_none());
    // Re-enabled: a fresh window.
    assert_eq!(passes(&limiter, "s", limited, 2), 1);
}

#[test]
fn a_refusal_says_when_to_retry() {
    let (limiter, clock) = tps();
    let config = TpsConfig::new(1, Duration::from_secs(10));
    limiter.try_acquire("s", config).unwrap();
    clock.advance_millis(4_000);
    let err = limiter.try_acquire("s", config).unwrap_err();
    assert_eq!((err.kind(), err.resource()), (BlockKind::Tps, "s"));
    assert_eq!(err.retry_after(), Some(Duration::from_nanos(6_000_000_001)));
}

#[test]
fn the_key_cap_evicts_expired_windows_then_refuses() {
    let clock = ManualClock::new();
    let limiter = TpsLimiter::with_max_keys_with_clock(2, clock.clone());
    let config = TpsConfig::new(5, Duration::from_secs(1));
    limiter.try_acquire("a", config).unwrap();
    limiter.try_acquire("b", config).unwrap();
    let err = limiter.try_acquire("c", config).unwrap_err();
    assert_eq!((err.observed(), err.threshold()), (2.0, 2.0));
    assert_eq!(limiter.key_overflows(), 1);
    clock.advance_millis(1_001); // a and b have run out: evicting them loses nothing
    limiter.try_acquire("c", config).unwrap();
    assert_eq!(limiter.len(), 1);
}

#[test]
fn tps_never_admits_more_than_the_rate_under_threads() {
    let (limiter, _clock) = tps();
    let config = TpsConfig::new(1_000, Duration::from_secs(60));
    let admitted = AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..500 {
                    if limiter.try_acquire("s", config).is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(admitted.load(Ordering::Relaxed), 1_000);
}

#[test]
fn executes_refuses_at_the_limit_and_releases_on_drop() {
    let executes = ExecuteLimiter::new();
    let a = executes.try_acquire("m", 2).unwrap();
    let _b = executes.try_acquire("m", 2).unwrap();
    let err = executes.try_acquire("m", 2).unwrap_err();
    assert_eq!(err.kind(), BlockKind::Executes);
    assert_eq!((err.observed(), err.threshold()), (2.0, 2.0));
    drop(a);
    assert_eq!(executes.in_flight("m"), 1);
    // A panicking call gives its place back too.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _permit = executes.try_acquire("m", 2).unwrap();
        panic!("the call failed");
    }));
    assert!(result.is_err());
    assert_eq!(executes.in_flight("m"), 1);
}

#[test]
fn executes_zero_means_unlimited() {
    let executes = ExecuteLimiter::new();
    let permits: Vec<_> = (0..100)
        .map(|_| executes.try_acquire("m", 0).unwrap())
        .collect();
    assert_eq!(executes.in_flight("m"), 100);
    drop(permits);
    assert_eq!(executes.in_flight("m"), 0);
}

#[test]
fn executes_never_exceeds_the_limit_under_eight_threads() {
    let executes = ExecuteLimiter::new();
    let inside = AtomicU32::new(0);
    let most = AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..20_000 {
                    if let Ok(permit) = executes.try_acquire("m", 3) {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                    }
                }
            });
        }
    });
    assert!(most.load(Ordering::SeqCst) <= 3);
    assert_eq!(executes.in_flight("m"), 0);
}

#[test]
fn executes_evicts_only_idle_keys() {
    let executes = ExecuteLimiter::with_max_keys(1);
    let held = executes.try_acquire("a", 1).unwrap();
    assert!(executes.try_acquire("b", 1).is_err()); // a is busy: cannot evict
    assert_eq!(executes.key_overflows(), 1);
    drop(held);
    let _b = executes.try_acquire("b", 1).unwrap(); // a was idle: evicted
    assert_eq!(executes.in_flight("a"), 0);
}

#[test]
fn a_tps_key_shares_the_window_of_calls_by_name_and_rebuilds_on_a_new_config() {
    let (limiter, clock) = tps();
    let config = TpsConfig::new(3, Duration::from_secs(1));
    let key = limiter.key("s", config).unwrap();
    assert!(key.try_acquire().is_ok());
    assert!(limiter.try_acquire("s", config).is_ok());
    assert!(key.try_acquire().is_ok());
    let err = limiter.try_acquire("s", config).unwrap_err();
    assert_eq!((err.kind(), err.resource()), (BlockKind::Tps, "s"));
    assert_eq!(
        key.try_acquire().unwrap_err().retry_after(),
        Some(Duration::from_nanos(1_000_000_001))
    );
    // A new configuration through a new key rebuilds the window: fresh tokens.
    let wider = limiter
        .key("s", TpsConfig::new(5, Duration::from_secs(1)))
        .unwrap();
    assert_eq!(wider.state().tokens_left, 5);
    clock.advance_millis(1);
    assert!(limiter
        .key("s", TpsConfig::new(0, Duration::from_secs(1)))
        .is_err());
}
