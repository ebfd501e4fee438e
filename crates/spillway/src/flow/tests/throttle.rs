use super::at_ms;
use crate::flow::{Decision, Throttle};
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

fn wait_ns(nanos: u64) -> Decision {
    Decision::Wait(Duration::from_nanos(nanos))
}

#[test]
fn three_per_second_queues_simultaneous_callers() {
    let throttle = Throttle::new(3.0, Duration::from_secs(2));
    let t = at_ms(0);
    let decisions: Vec<_> = (0..8).map(|_| throttle.check(t, 1)).collect();
    assert_eq!(
        decisions,
        [
            Decision::Pass,
            wait_ns(333_333_333),
            wait_ns(666_666_666),
            wait_ns(999_999_999),
            wait_ns(1_333_333_332),
            wait_ns(1_666_666_665),
            wait_ns(1_999_999_998),
            Decision::Block,
        ]
    );
}

#[test]
fn no_credit_builds_up_while_idle() {
    let throttle = Throttle::new(3.0, Duration::ZERO);
    assert_eq!(throttle.check(at_ms(0), 1), Decision::Pass);
    assert_eq!(throttle.check(at_ms(10_000), 1), Decision::Pass);
    // The schedule restarted at T0+10 s: the next slot is 333.33 ms later, not now.
    assert_eq!(throttle.check(at_ms(10_000), 1), Decision::Block);
    assert_eq!(throttle.check(at_ms(10_333), 1), Decision::Block);
    assert_eq!(throttle.check(at_ms(10_334), 1), Decision::Pass);
}

#[test]
fn four_hundred_per_second_with_millisecond_arrivals_and_no_queue() {
    // A 2.5 ms cost with calls every 1 ms and no queueing: a call passes when 2.5 ms have gone
    // since the last pass, so every third call (Sentinel's behavior: no credit while waiting).
    let throttle = Throttle::new(400.0, Duration::ZERO);
    let passed: Vec<u64> = (0..12)
        .filter(|&ms| throttle.check(at_ms(ms), 1) == Decision::Pass)
        .collect();
    assert_eq!(passed, [0, 3, 6, 9]);
}

#[test]
fn four_hundred_per_second_queues_to_exact_slots() {
    let throttle = Throttle::new(400.0, Duration::from_millis(10));
    let t = at_ms(0);
    assert_eq!(throttle.check(t, 1), Decision::Pass);
    assert_eq!(throttle.check(t, 1), wait_ns(2_500_000));
    assert_eq!(throttle.check(t, 2), wait_ns(7_500_000)); // a batch of two costs 5 ms
    assert_eq!(throttle.check(t, 1), wait_ns(10_000_000)); // exactly the max: accepted
    assert_eq!(throttle.check(t, 1), Decision::Block);
}

#[test]
fn two_thousand_per_second_is_above_millisecond_resolution() {
    let throttle = Throttle::new(2_000.0, Duration::from_millis(1));
    let t = at_ms(0);
    assert_eq!(throttle.check(t, 1), Decision::Pass);
    assert_eq!(throttle.check(t, 1), wait_ns(500_000));
    assert_eq!(throttle.check(t, 1), wait_ns(1_000_000));
    assert_eq!(throttle.check(t, 1), Decision::Block);
    // 2000 calls over one second, one every 0.5 ms, all pass.
    let throttle = Throttle::new(2_000.0, Duration::ZERO);
    let passed = (0..2_000)
        .filter(|i| throttle.check(at_ms(0) + i * 500_000, 1) == Decision::Pass)
        .count();
    assert_eq!(passed, 2_000);
}

#[test]
fn fractional_rate_below_one_half() {
    // 0.4/s: one call every 2.5 s (Sentinel 1.8.9 would divide by Math.round(0.4) = 0 here).
    let throttle = Throttle::new(0.4, Duration::from_secs(3));
    assert_eq!(throttle.cost_nanos(1), 2_500_000_000);
    assert_eq!(throttle.check(at_ms(0), 1), Decision::Pass);
    assert_eq!(throttle.check(at_ms(0), 1), wait_ns(2_500_000_000));
    assert_eq!(throttle.check(at_ms(0), 1), Decision::Block);
    assert_eq!(throttle.check(at_ms(5_000), 1), Decision::Pass);
}

#[test]
fn zero_count_blocks_and_zero_acquire_passes() {
    let throttle = Throttle::new(0.0, Duration::from_secs(1));
    assert_eq!(throttle.check(at_ms(0), 1), Decision::Block);
    assert_eq!(throttle.check(at_ms(0), 0), Decision::Pass);
    let tiny = Throttle::new(1e-300, Duration::from_secs(1));
    assert_eq!(tiny.check(at_ms(0), 1), Decision::Pass); // the first call always passes
    assert_eq!(tiny.check(at_ms(0), 1), Decision::Block); // no overflow into a pass
}

#[test]
fn a_cancelled_last_slot_is_given_back() {
    let throttle = Throttle::new(10.0, Duration::from_secs(1));
    let t = at_ms(0);
    assert_eq!(throttle.check(t, 1), Decision::Pass);
    assert_eq!(throttle.check(t, 1), wait_ns(100_000_000));
    assert_eq!(throttle.check(t, 1), wait_ns(200_000_000));
    assert!(!throttle.cancel(t + 100_000_000, 1)); // not the last: someone queues behind it
    assert!(throttle.cancel(t + 200_000_000, 1));
    assert_eq!(throttle.check(t, 1), wait_ns(200_000_000)); // the slot is taken again
}

#[test]
fn concurrent_callers_never_share_a_slot_or_exceed_the_queue() {
    // Eight threads at one instant against 10/s with a 1 s queue: exactly 11 admitted (one now,
    // ten queued 100 ms apart), each at a distinct slot.
    let throttle = Throttle::new(10.0, Duration::from_secs(1));
    let t = at_ms(0);
    let admitted = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..100 {
                    match throttle.check(t, 1) {
                        Decision::Pass => admitted.lock().unwrap().push(0),
                        Decision::Wait(wait) => admitted.lock().unwrap().push(wait.as_nanos()),
                        Decision::Occupied(_) => panic!("a throttle never borrows"),
                        Decision::Block => {}
                    }
                }
            });
        }
    });
    let admitted = admitted.into_inner().unwrap();
    assert_eq!(admitted.len(), 11);
    let slots: HashSet<u128> = admitted.iter().copied().collect();
    assert_eq!(slots, (0..=10).map(|i| i * 100_000_000).collect());
}

fn per(count: f64, stat_ms: u32, max_queueing: Duration) -> Throttle {
    Throttle::per(
        count,
        std::num::NonZeroU32::new(stat_ms).unwrap(),
        max_queueing,
    )
}

#[test]
fn sentinels_switch_between_millisecond_and_nanosecond_pacing() {
    // useNanoSeconds = statDurationMs % Math.round(count) != 0 || count / statDurationMs > 1
    let cases = [
        (10.0, 1_000, false), // 1000 % 10 == 0
        (1_000.0, 1_000, false),
        (1_001.0, 1_000, true), // more than one a millisecond
        (3.0, 1_000, true),     // 1000 % 3 != 0
        (4.4, 1_000, false),    // Math.round(4.4) = 4 divides 1000
        (4.5, 1_000, false),    // Math.round(4.5) = 5 divides 1000
        (5.0, 500, false),
        (3.0, 100, true),
        (200.0, 100, true), // 2 a millisecond
        (0.4, 1_000, true), // Math.round(0.4) = 0: Sentinel divides by zero; nanoseconds here
    ];
    for (count, stat, nanos) in cases {
        let throttle = per(count, stat, Duration::ZERO);
        assert_eq!(throttle.paces_in_nanos(), nanos, "{count} per {stat} ms");
    }
    assert!(
        !per(0.0, 1_000, Duration::ZERO).paces_in_nanos(),
        "count 0: Sentinel's false"
    );
}

#[test]
fn millisecond_pacing_rounds_the_cost_and_floors_the_clock() {
    // 4.4 a second: Sentinel paces in milliseconds, 227 ms apart (Math.round(1000 / 4.4)),
    // not 227.27 ms.
    let throttle = Throttle::new(4.4, Duration::from_secs(1));
    assert_eq!(throttle.cost_nanos(1), 227_000_000);
    assert_eq!(throttle.cost_nanos(3), 682_000_000); // Math.round(3000 / 4.4) = 682
    let t = at_ms(0);
    assert_eq!(throttle.check(t + 900_000, 1), Decision::Pass); // read as T0 + 0 ms
    assert_eq!(throttle.check(t + 900_000, 1), wait_ns(227_000_000));
    assert_eq!(throttle.check(t + 999_999, 1), wait_ns(454_000_000));

    // 4 a second, 250 ms apart: a call at 350.2 ms after one at 100.7 ms passes, as Sentinel's
    // clock reads 100 and 350; in nanoseconds it would wait 0.5 ms.
    let throttle = Throttle::new(4.0, Duration::ZERO);
    assert!(!throttle.paces_in_nanos());
    assert_eq!(throttle.check(at_ms(100) + 700_000, 1), Decision::Pass);
    assert_eq!(throttle.check(at_ms(350) + 200_000, 1), Decision::Pass);
    assert_eq!(throttle.check(at_ms(599) + 999_999, 1), Decision::Block);
    assert_eq!(throttle.check(at_ms(600), 1), Decision::Pass);
}

#[test]
fn count_per_stat_duration() {
    // 3 per 100 ms: nanoseconds, 33.333333 ms apart (Math.round(1e6 * 100 / 3)).
    let throttle = per(3.0, 100, Duration::from_millis(100));
    assert_eq!(throttle.cost_nanos(1), 33_333_333);
    let t = at_ms(0);
    assert_eq!(throttle.check(t, 1), Decision::Pass);
    assert_eq!(throttle.check(t, 1), wait_ns(33_333_333));
    // Two permits cost Math.round(1e6 * 200 / 3) = 66666667 ns.
    assert_eq!(throttle.check(t, 2), wait_ns(100_000_000));
    assert_eq!(throttle.check(t, 1), Decision::Block);
    // 200 per 100 ms: nanoseconds, 0.5 ms apart; 2000 calls in a second, every 0.5 ms, all pass.
    let throttle = per(200.0, 100, Duration::ZERO);
    let passed = (0..2_000)
        .filter(|i| throttle.check(at_ms(0) + i * 500_000, 1) == Decision::Pass)
        .count();
    assert_eq!(passed, 2_000);
    // 3 per 2 s: 2000 % 3 != 0, nanoseconds, Math.round(1e6 * 2000 / 3) = 666666667 ns apart
    // (in milliseconds it would be 667 ms, 1 ms a call slow).
    let throttle = per(3.0, 2_000, Duration::from_millis(2_500));
    assert!(throttle.paces_in_nanos());
    let t = at_ms(0);
    let decisions: Vec<_> = (0..5).map(|_| throttle.check(t, 1)).collect();
    assert_eq!(
        decisions,
        [
            Decision::Pass,
            wait_ns(666_666_667),
            wait_ns(1_333_333_334),
            wait_ns(2_000_000_001),
            Decision::Block, // would wait 2.67 s
        ]
    );
    // 60 per minute: milliseconds, one a second.
    let throttle = per(60.0, 60_000, Duration::ZERO);
    assert!(!throttle.paces_in_nanos());
    assert_eq!(throttle.cost_nanos(1), 1_000_000_000);
}
