use super::{at_ms, node};
use crate::flow::{Decision, FlowStats, WarmUp, WarmUpThrottle};
use crate::stats::ResourceNode;
use std::time::Duration;

/// Calls every millisecond from second `from` to second `to` (exclusive) of the epoch-based test
/// clock, counting passes in the node; returns the passes of each second.
fn drive(warm_up: &WarmUp, node: &ResourceNode, from: u64, to: u64) -> Vec<u64> {
    drive_on(warm_up, node, from, to, at_ms)
}

/// [`drive`] on a clock whose time at `ms` milliseconds is `at(ms)` nanoseconds.
fn drive_on(
    warm_up: &WarmUp,
    node: &ResourceNode,
    from: u64,
    to: u64,
    at: impl Fn(u64) -> u64,
) -> Vec<u64> {
    (from..to)
        .map(|second| {
            (0..1_000)
                .filter(|ms| {
                    let now = at(second * 1_000 + ms);
                    let pass = warm_up.check(node, now, 1) == Decision::Pass;
                    if pass {
                        node.add_pass(now, 1);
                    }
                    pass
                })
                .count() as u64
        })
        .collect()
}

#[test]
fn cold_start_climbs_from_a_third_to_count() {
    // count 10, period 10 s, cold factor 3: warningToken = (int)100 / 2 = 50,
    // maxToken = 50 + (int)(200 / 4) = 100, slope = 2 / 10 / 50 = 0.004.
    let warm_up = WarmUp::new(10.0, Duration::from_secs(10), 3);
    let node = node();
    let first = drive(&warm_up, &node, 0, 6);
    // Allowed QPS by second: tokens 100 -> 3.33, 97 -> 3.47, 94 -> 3.62, 91 -> 3.79,
    // 88 -> 3.97, 85 -> 4.17; each second's 3 passes are taken out at the next sync (3 is not
    // below (int)10 / 3 = 3, so no refill above the warning line).
    assert_eq!(first, [3, 3, 3, 3, 3, 4]);
    assert_eq!(warm_up.stored_tokens(), 85);
    assert_eq!((warm_up.warning_tokens(), warm_up.max_tokens()), (50, 100));

    let rest = drive(&warm_up, &node, 6, 40);
    let curve: Vec<u64> = first.iter().chain(&rest).copied().collect();
    assert!(
        curve.windows(2).all(|w| w[0] <= w[1]),
        "rate climbs monotonically: {curve:?}"
    );
    assert!(
        curve[30..].iter().all(|&n| n == 10),
        "warm at count: {curve:?}"
    );
    assert!(warm_up.stored_tokens() < warm_up.warning_tokens());
}

#[test]
fn cools_down_again_after_idle() {
    let warm_up = WarmUp::new(10.0, Duration::from_secs(10), 3);
    let node = node();
    let warm = drive(&warm_up, &node, 0, 40);
    assert_eq!(warm[39], 10);
    // 60 s without a call: the next sync refills the bucket to its max.
    let cold = drive(&warm_up, &node, 100, 101);
    assert_eq!(cold, [3]);
    assert_eq!(warm_up.stored_tokens(), 100);
}

#[test]
fn bucket_syncs_once_per_whole_second() {
    let warm_up = WarmUp::new(10.0, Duration::from_secs(10), 3);
    let node = node();
    assert_eq!(warm_up.check(&node, at_ms(0), 1), Decision::Pass);
    node.add_pass(at_ms(0), 1);
    assert_eq!(warm_up.stored_tokens(), 100);
    // Still in the same second: no sync, however many checks.
    for ms in [1, 500, 999] {
        warm_up.check(&node, at_ms(ms), 0);
    }
    assert_eq!(warm_up.stored_tokens(), 100);
    // The next whole second takes the previous second's 1 pass out.
    warm_up.check(&node, at_ms(1_000), 0);
    assert_eq!(warm_up.stored_tokens(), 99);
}

#[test]
fn warm_up_throttle_paces_at_the_warming_rate() {
    let limiter = WarmUpThrottle::new(10.0, Duration::from_secs(10), 3, Duration::from_secs(1));
    let node = node();
    let t = at_ms(0);
    let decisions: Vec<_> = (0..5).map(|_| limiter.check(&node, t, 1)).collect();
    let wait = |ms| Decision::Wait(Duration::from_millis(ms));
    assert_eq!(
        decisions,
        [
            Decision::Pass,
            wait(300),
            wait(600),
            wait(900),
            Decision::Block
        ]
    );
}

#[test]
fn warm_up_throttle_reaches_count_when_warm() {
    let limiter = WarmUpThrottle::new(10.0, Duration::from_secs(10), 3, Duration::ZERO);
    let node = node();
    let mut per_second = Vec::new();
    for second in 0..60u64 {
        let mut passed = 0;
        for ms in 0..1_000 {
            let now = at_ms(second * 1_000 + ms);
            if limiter.check(&node, now, 1) == Decision::Pass {
                node.add_pass(now, 1);
                passed += 1;
            }
        }
        per_second.push(passed);
    }
    assert!(per_second[0] <= 4, "cold: {per_second:?}");
    assert!(
        per_second[50..].iter().all(|&n| n == 10),
        "warm: {per_second:?}"
    );
    assert!(limiter.stored_tokens() < 50);
}

#[test]
fn zero_count_blocks_warm_up_throttle() {
    let limiter = WarmUpThrottle::new(0.0, Duration::from_secs(10), 3, Duration::from_secs(1));
    assert_eq!(limiter.check(&node(), at_ms(0), 1), Decision::Block);
}

/// A mock is enough to drive a controller on its own.
#[test]
fn controllers_work_against_a_mock() {
    struct Busy;
    impl FlowStats for Busy {
        fn pass_qps(&self, _: u64) -> f64 {
            9.0
        }
        fn previous_pass_qps(&self, _: u64) -> f64 {
            9.0
        }
        fn concurrency(&self) -> i64 {
            0
        }
    }
    let warm_up = WarmUp::new(10.0, Duration::from_secs(10), 3);
    assert_eq!(warm_up.check(&Busy, at_ms(0), 1), Decision::Block); // cold: 3.33 allowed
}

#[test]
fn starts_cold_on_a_clock_that_starts_at_zero() {
    // Issue 19, point 4: the first sync filled only (time since 0 x count) tokens, so a fresh
    // process passed 40, then 100 a second with 100 over 10 s instead of ramping from 33.
    let warm_up = WarmUp::new(100.0, Duration::from_secs(10), 3);
    let node = node();
    // A clock that starts at 0, as a process's monotonic clock does.
    let curve = drive_on(&warm_up, &node, 0, 3, |ms| ms * 1_000_000);
    assert_eq!(warm_up.max_tokens(), 1000);
    // Cold: a full bucket (1000 tokens, 500 above the warning line) allows
    // nextUp(1 / (500 x 0.00004 + 0.01)) = 33.3 a second, then the rate climbs as tokens are used.
    assert_eq!(curve, [33, 34, 36]);
    assert!(curve.iter().all(|&n| n < 50), "{curve:?}");
    assert!(curve.windows(2).all(|w| w[0] <= w[1]), "{curve:?}");
}

#[test]
fn a_new_rule_starts_cold_on_a_clock_that_starts_at_zero_late_in_its_first_second() {
    let warm_up = WarmUp::new(100.0, Duration::from_secs(10), 3);
    let node = node();
    // The first check comes 500 ms after the clock's origin, still in second 0.
    assert_eq!(warm_up.check(&node, 500_000_000, 1), Decision::Pass);
    assert_eq!(warm_up.stored_tokens(), 1000);
}

/// Deliberate deviation (docs/exactness.md): 1 a second warmed over 1 s with cold factor 3 has
/// `warningToken = (int) 1 / 2 = 0` and `maxToken = 0 + (int) (2 / 4) = 0`, no warm-up range.
/// Sentinel's `aboveToken * slope` is `0 x Infinity = NaN` there, and every call is blocked;
/// here the rule allows `nextUp(count)`: one call a second.
#[test]
fn a_warm_up_without_a_warm_up_range_allows_count() {
    let warm_up = WarmUp::new(1.0, Duration::from_secs(1), 3);
    assert_eq!((warm_up.warning_tokens(), warm_up.max_tokens()), (0, 0));
    let node = node();
    assert_eq!(drive(&warm_up, &node, 0, 3), [1, 1, 1]);
}
