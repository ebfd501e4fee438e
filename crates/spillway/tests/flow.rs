//! Flow rules through the entry path, as event traces on a manual clock.

mod support;

use spillway::flow::{Behavior, FlowRule, LimitApp, Strategy};
use spillway::{Admission, BlockKind, Spillway};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use support::{manual, T0_MS};

fn passes(spillway: &Spillway, resource: &str, origin: Option<&str>, tries: usize) -> usize {
    (0..tries)
        .filter(|_| {
            let builder = spillway.entry(resource);
            let builder = match origin {
                Some(origin) => builder.origin(origin),
                None => builder,
            };
            builder.enter().is_ok()
        })
        .count()
}

#[test]
fn qps_reject_blocks_with_the_reason_and_counts_the_block() {
    let (spillway, clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("r-qps", "r", 3.0)])
        .unwrap();
    assert_eq!(passes(&spillway, "r", None, 3), 3);
    clock.advance_millis(100);
    let err = spillway.entry("r").count(2).enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Flow);
    assert_eq!((err.resource(), err.rule_id()), ("r", Some("r-qps")));
    assert_eq!((err.observed(), err.threshold()), (3.0, 3.0));
    // The 500 ms bucket holding the passes ends 400 ms later.
    assert_eq!(err.retry_after(), Some(Duration::from_millis(400)));
    let stats = spillway.resource("r").unwrap().stats();
    assert_eq!((stats.total_pass, stats.total_block), (3, 2));
    // Once the window has slid past the passes, calls go through again.
    clock.advance_millis(900);
    assert_eq!(passes(&spillway, "r", None, 5), 3);
}

#[test]
fn limit_app_routes_origins() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![
            FlowRule::qps("default", "r", 4.0),
            FlowRule::qps("a", "r", 1.0).with_limit_app(LimitApp::Origin("a".into())),
            FlowRule::qps("other", "r", 2.0).with_limit_app(LimitApp::Other),
        ])
        .unwrap();
    // Origin `a` has its own rule (1 per second, on a's own statistics), and `default` too.
    assert_eq!(passes(&spillway, "r", Some("a"), 5), 1);
    // Origin `b` is an "other" origin: 2 per second on b's statistics.
    assert_eq!(passes(&spillway, "r", Some("b"), 5), 2);
    // `c` likewise, counted apart from `b`, until the resource-wide default (4) is reached.
    assert_eq!(passes(&spillway, "r", Some("c"), 5), 1);
    // No origin: only the default rule applies, and the resource has had 4.
    assert_eq!(passes(&spillway, "r", None, 5), 0);
}

#[test]
fn relate_limits_by_another_resources_statistics() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("w", "write", 2.0).with_strategy(
            Strategy::Relate {
                ref_resource: "read".into(),
            },
        )])
        .unwrap();
    assert_eq!(passes(&spillway, "write", None, 3), 3); // reads are quiet: writes go
    assert_eq!(passes(&spillway, "read", None, 2), 2);
    assert_eq!(passes(&spillway, "write", None, 3), 0); // reads are at 2/s: writes stop
}

#[test]
fn chain_limits_only_one_entrance() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("db-web", "db", 1.0).with_strategy(
            Strategy::Chain {
                entrance: "web".into(),
            },
        )])
        .unwrap();
    let through = |entrance: &str| {
        (0..3)
            .filter(|_| spillway.entry("db").entrance(entrance).enter().is_ok())
            .count()
    };
    assert_eq!(through("web"), 1);
    assert_eq!(through("cron"), 3);
    let db = spillway.resource("db").unwrap();
    assert_eq!(db.entrance_stats("web").unwrap().total_block, 2);
    assert_eq!(db.entrance_stats("cron").unwrap().total_pass, 3);
}

#[test]
fn concurrency_rule_is_exact_and_released_on_exit() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::in_flight("r", 2).with_id("c")])
        .unwrap();
    let a = spillway.entry("r").enter().unwrap();
    let b = spillway.entry("r").enter().unwrap();
    let err = spillway.entry("r").enter().unwrap_err();
    assert_eq!((err.observed(), err.threshold()), (2.0, 2.0));
    drop(a);
    let c = spillway.entry("r").enter_owned().unwrap();
    assert!(spillway.entry("r").enter().is_err());
    drop((b, c));
    assert!(spillway.entry("r").enter().is_ok());
}

#[test]
fn concurrency_rule_holds_under_eight_threads() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::in_flight("r", 3).with_id("c")])
        .unwrap();
    let resource = spillway.resource("r").unwrap();
    let inside = AtomicU64::new(0);
    let most = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..5_000 {
                    if let Ok(entry) = resource.entry().enter() {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(entry);
                    }
                }
            });
        }
    });
    assert!(most.load(Ordering::SeqCst) <= 3);
    assert!(most.load(Ordering::SeqCst) >= 1);
    assert_eq!(resource.stats().concurrency, 0);
}

#[test]
fn qps_reject_is_exact_under_eight_threads() {
    // The clock stands still, so every attempt falls in one window: a rule that reads its pass
    // QPS and adds later (Sentinel's) lets racing threads through together; this one admits by
    // compare-and-swap, so exactly `count` pass, however the threads interleave.
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("q", "r", 1_000.0)])
        .unwrap();
    let resource = spillway.resource("r").unwrap();
    let passed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..2_000 {
                    if resource.entry().enter().is_ok() {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(passed.load(Ordering::Relaxed), 1_000);
    let stats = resource.stats();
    assert_eq!((stats.total_pass, stats.total_block), (1_000, 15_000));
}

#[test]
fn a_later_qps_block_gives_back_the_earlier_rules_admission() {
    let (spillway, _clock) = manual();
    let wide = FlowRule::qps("wide", "r", 4.0);
    spillway
        .load_flow_rules(vec![wide.clone(), FlowRule::qps("narrow", "r", 2.0)])
        .unwrap();
    assert_eq!(passes(&spillway, "r", None, 5), 2);
    // The three refused by "narrow" were admitted by "wide" first and given back: with "narrow"
    // gone (and "wide" kept, with its counts), two more of its four pass in this window.
    spillway.load_flow_rules(vec![wide]).unwrap();
    assert_eq!(passes(&spillway, "r", None, 5), 2);
}

#[test]
fn a_kept_rule_keeps_its_counts_and_a_new_rule_counts_the_window() {
    let (spillway, _clock) = manual();
    let a = FlowRule::qps("a", "r", 3.0);
    spillway.load_flow_rules(vec![a.clone()]).unwrap();
    assert_eq!(passes(&spillway, "r", None, 5), 3);
    // "a" is kept (its three admissions with it) and "b" joins, seeded from the window.
    spillway
        .load_flow_rules(vec![a, FlowRule::qps("b", "r", 10.0)])
        .unwrap();
    let error = spillway.entry("r").enter().unwrap_err();
    assert_eq!(error.rule_id(), Some("a"));
    // "c" replaces both and takes the ring "a" had, started over from the window: three passes
    // (the refusals are not passes), so two more of its five.
    spillway
        .load_flow_rules(vec![FlowRule::qps("c", "r", 5.0)])
        .unwrap();
    assert_eq!(passes(&spillway, "r", None, 5), 2);
    let error = spillway.entry("r").enter().unwrap_err();
    assert_eq!((error.rule_id(), error.threshold()), (Some("c"), 5.0));
}

#[test]
fn more_direct_rules_than_the_gate_holds_are_all_checked() {
    let (spillway, _clock) = manual();
    let rules = |resource: &str, counts: &[f64]| -> Vec<FlowRule> {
        counts
            .iter()
            .map(|&count| FlowRule::qps(format!("{resource}-{count}"), resource, count))
            .collect()
    };
    let mut all = rules("four", &[9.0, 8.0, 6.0, 7.0]);
    all.extend(rules("five", &[9.0, 8.0, 7.0, 6.0, 5.0]));
    all.extend(rules("six", &[9.0, 8.0, 7.0, 6.0, 5.0, 4.0]));
    spillway.load_flow_rules(all).unwrap();
    assert_eq!(passes(&spillway, "four", None, 10), 6);
    assert_eq!(
        spillway.entry("four").enter().unwrap_err().rule_id(),
        Some("four-6")
    );
    assert_eq!(passes(&spillway, "five", None, 10), 5);
    assert_eq!(passes(&spillway, "six", None, 10), 4);
    assert_eq!(
        spillway.entry("six").enter().unwrap_err().rule_id(),
        Some("six-4")
    );
}

#[test]
fn a_rule_loaded_on_a_busy_resource_counts_the_passes_before_it() {
    let (spillway, clock) = manual();
    assert_eq!(passes(&spillway, "r", None, 3), 3);
    clock.advance_millis(600);
    assert_eq!(passes(&spillway, "r", None, 2), 2);
    // Five passes in the window (3 in the previous bucket, 2 in this one): a rule of 7 admits 2.
    spillway
        .load_flow_rules(vec![FlowRule::qps("q", "r", 7.0)])
        .unwrap();
    assert_eq!(passes(&spillway, "r", None, 5), 2);
    // The first bucket leaves the window at 1000 ms: three more.
    clock.advance_millis(400);
    assert_eq!(passes(&spillway, "r", None, 5), 3);
}

#[test]
fn throttled_entries_wait_on_the_clock_in_order() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![
            FlowRule::qps("t", "r", 5.0).with_behavior(Behavior::throttle(Duration::from_secs(1)))
        ])
        .unwrap();
    let mut starts = Vec::new();
    for _ in 0..3 {
        let entry = spillway.entry("r").enter().unwrap(); // the ManualClock advances by the wait
        starts.push(entry.started_at_nanos() / 1_000_000 - T0_MS);
    }
    assert_eq!(starts, [0, 200, 400]);
}

#[test]
fn a_throttle_rule_paces_count_per_its_stat_duration() {
    // 3 per 100 ms (Sentinel's statDurationMs = 100): nanosecond pacing, 33.333333 ms apart.
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("t", "r", 3.0).with_behavior(
            Behavior::Throttle {
                max_queueing_time: Duration::from_secs(1),
                stat_duration: Duration::from_millis(100),
            },
        )])
        .unwrap();
    let mut starts = Vec::new();
    for _ in 0..4 {
        let entry = spillway.entry("r").enter().unwrap();
        starts.push(entry.started_at_nanos() - T0_MS * 1_000_000);
    }
    assert_eq!(starts, [0, 33_333_333, 66_666_666, 99_999_999]);
}

#[test]
fn a_dropped_waiter_gives_its_slot_back() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![
            FlowRule::qps("t", "r", 10.0).with_behavior(Behavior::throttle(Duration::from_secs(1)))
        ])
        .unwrap();
    let first = spillway.entry("r").try_enter().unwrap();
    assert!(matches!(first, Admission::Ready(_)));
    let Admission::Queued(second) = spillway.entry("r").try_enter().unwrap() else {
        panic!("expected a queued entry");
    };
    assert_eq!(second.wait(), Duration::from_millis(100));
    drop(second);
    let Admission::Queued(third) = spillway.entry("r").try_enter().unwrap() else {
        panic!("expected a queued entry");
    };
    assert_eq!(
        third.wait(),
        Duration::from_millis(100),
        "the slot was given back"
    );
    let entry = third.enter();
    assert_eq!(entry.resource_name(), "r");
}

#[test]
fn a_later_block_gives_back_earlier_reservations() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![
            FlowRule::in_flight("r", 10).with_id("c"),
            FlowRule::qps("t", "r", 10.0).with_behavior(Behavior::throttle(Duration::from_secs(1))),
            FlowRule::qps("q", "r", 1.0),
        ])
        .unwrap();
    let held = spillway.entry("r").enter().unwrap(); // passes all three
    let err = spillway.entry("r").try_enter().unwrap_err();
    assert_eq!(err.rule_id(), Some("q"));
    // The blocked entry's concurrency place and throttle slot were given back: the next queued
    // slot is still 100 ms after the first pass, and only one place is held.
    spillway
        .load_flow_rules(vec![
            FlowRule::in_flight("r", 10).with_id("c"),
            FlowRule::qps("t", "r", 10.0).with_behavior(Behavior::throttle(Duration::from_secs(1))),
        ])
        .unwrap();
    let Admission::Queued(next) = spillway.entry("r").try_enter().unwrap() else {
        panic!("expected a queued entry");
    };
    assert_eq!(next.wait(), Duration::from_millis(100));
    drop((next, held));
}

#[test]
fn reload_keeps_the_state_of_unchanged_rules() {
    let (spillway, clock) = manual();
    let warm_up = FlowRule::qps("w", "r", 10.0).with_behavior(Behavior::WarmUp {
        period: Duration::from_secs(10),
        cold_factor: 3,
    });
    spillway.load_flow_rules(vec![warm_up.clone()]).unwrap();
    // Warm the resource up for 30 s at 10 attempts per 100 ms.
    for _ in 0..300 {
        passes(&spillway, "r", None, 10);
        clock.advance_millis(100);
    }
    let warm = passes(&spillway, "r", None, 20);
    assert!(warm >= 9, "warm: {warm}");
    clock.advance_millis(1_000);
    // Reload with the same rule and another: the warm-up keeps its (warm) tokens.
    spillway
        .load_flow_rules(vec![warm_up.clone(), FlowRule::qps("other", "s", 1.0)])
        .unwrap();
    assert!(passes(&spillway, "r", None, 20) >= 9);
    clock.advance_millis(1_000);
    // A changed rule starts over, cold.
    spillway
        .load_flow_rules(vec![warm_up.with_occupy_timeout(Duration::from_millis(100))])
        .unwrap();
    assert_eq!(passes(&spillway, "r", None, 20), 3);
}

#[test]
fn warm_up_starts_cold_on_a_clock_that_starts_at_zero() {
    // Issue 19, point 4: on a clock that starts with the process, a warm-up rule of 100 over
    // 10 s passed 40, then 100 a second, instead of ramping from a third of 100.
    let clock = spillway::ManualClock::new();
    let spillway = Spillway::new_with_clock(clock.clone());
    spillway
        .load_flow_rules(vec![FlowRule::qps("w", "r", 100.0).with_behavior(
            Behavior::WarmUp {
                period: Duration::from_secs(10),
                cold_factor: 3,
            },
        )])
        .unwrap();
    let mut per_second = Vec::new();
    for _ in 0..3 {
        // 200 attempts a second, one every 5 ms.
        let mut passed = 0;
        for _ in 0..200 {
            passed += passes(&spillway, "r", None, 1);
            clock.advance_millis(5);
        }
        per_second.push(passed);
    }
    assert!(per_second.iter().all(|&n| n < 50), "{per_second:?}");
    assert_eq!(per_second[0], 33, "{per_second:?}");
}

#[test]
fn a_bad_rule_set_changes_nothing_and_rules_list_back_as_loaded() {
    let (spillway, _clock) = manual();
    let rules = vec![
        FlowRule::qps("b", "r", 1.0),
        FlowRule::in_flight("s", 5)
            .with_id("a")
            .with_limit_app(LimitApp::Other),
    ];
    spillway.load_flow_rules(rules.clone()).unwrap();
    let err = spillway
        .load_flow_rules(vec![
            FlowRule::qps("ok", "r", 9.0),
            FlowRule::qps("", "r", 1.0),
        ])
        .unwrap_err();
    assert_eq!((err.index(), err.field()), (1, "id"));
    assert_eq!(spillway.flow_rules(), rules);
    assert_eq!(passes(&spillway, "r", None, 3), 1);
}

#[test]
fn rules_apply_to_resources_registered_later_and_can_be_removed() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("n", "new", 1.0)])
        .unwrap();
    assert_eq!(passes(&spillway, "new", None, 3), 1);
    spillway.load_flow_rules(Vec::new()).unwrap();
    assert_eq!(passes(&spillway, "new", None, 3), 3);
}

#[test]
fn prioritized_entries_borrow_from_the_next_bucket() {
    let (spillway, clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("q", "r", 2.0)])
        .unwrap();
    clock.advance_millis(100);
    assert_eq!(passes(&spillway, "r", None, 2), 2); // in the bucket [T0, T0 + 500)
    clock.advance_millis(500); // T0 + 600
    assert!(spillway.entry("r").enter().is_err());
    // Sentinel's tryOccupyNext: the bucket holding the 2 passes leaves the window at T0 + 1000,
    // 400 ms from now, within the 500 ms occupy timeout.
    let Admission::Queued(pending) = spillway.entry("r").prioritized().try_enter().unwrap() else {
        panic!("expected to borrow");
    };
    assert_eq!(pending.wait(), Duration::from_millis(400));
    drop(pending); // a borrowed pass cannot be given back (nor can it in Sentinel)
    let entry = spillway.entry("r").prioritized().enter().unwrap(); // waits on the clock
    assert_eq!(entry.started_at_nanos() / 1_000_000 - T0_MS, 1_000);
    drop(entry);
    let stats = spillway.resource("r").unwrap().stats();
    // Both borrowed passes count in the bucket they borrowed. As in Sentinel, they were counted
    // in the minute window at T0 + 600 (passes and occupied passes), and the second window's
    // occupied-pass rate reads 0.
    assert_eq!(stats.pass_qps, 2.0);
    assert_eq!(stats.occupied_pass_qps, 0.0);
    assert_eq!(stats.total_pass, 4);
    // The borrowed bucket is full: a normal entry is refused, as is a prioritized one whose
    // wait would not fit the timeout.
    assert!(spillway.entry("r").enter().is_err());
}

#[test]
fn prioritized_entries_respect_the_occupy_timeout() {
    let (spillway, clock) = manual();
    spillway
        .load_flow_rules(vec![
            FlowRule::qps("q", "r", 2.0).with_occupy_timeout(Duration::from_millis(100))
        ])
        .unwrap();
    clock.advance_millis(100);
    assert_eq!(passes(&spillway, "r", None, 2), 2);
    clock.advance_millis(500); // a 400 ms wait is needed, more than 100 ms
    let err = spillway.entry("r").prioritized().enter().unwrap_err();
    assert_eq!(err.rule_id(), Some("q"));
}

#[test]
fn a_reload_takes_effect_on_the_next_entry_of_the_same_thread() {
    // Entries read direct QPS reject rules through the resource's gate, a copy of the rules'
    // numbers: each reload must rewrite it.
    let (spillway, _clock) = manual();
    let resource = spillway.resource("r").unwrap();
    spillway
        .load_flow_rules(vec![FlowRule::qps("zero", "r", 0.0)])
        .unwrap();
    assert!(resource.entry().enter().is_err());
    spillway
        .load_flow_rules(vec![FlowRule::qps("wide", "r", 1_000.0)])
        .unwrap();
    assert!(resource.entry().enter().is_ok());
    spillway
        .load_flow_rules(vec![FlowRule::qps("zero-again", "r", 0.0)])
        .unwrap();
    let error = resource.entry().enter().unwrap_err();
    assert_eq!(error.rule_id(), Some("zero-again"));
    spillway.load_flow_rules(vec![]).unwrap();
    assert!(resource.entry().enter().is_ok());
}

#[test]
fn a_reload_takes_effect_on_the_next_entry_of_another_thread() {
    use std::sync::mpsc;
    let (spillway, _clock) = manual();
    let spillway = std::sync::Arc::new(spillway);
    spillway
        .load_flow_rules(vec![FlowRule::qps("wide", "r", 1_000_000.0)])
        .unwrap();
    let (go, wait) = mpsc::channel::<()>();
    let (report, results) = mpsc::channel::<Result<(), Option<String>>>();
    let worker = {
        let spillway = spillway.clone();
        std::thread::spawn(move || {
            let resource = spillway.resource("r").unwrap();
            // Each message follows a reload (the channel orders it after the reload); the entry
            // after it must see the rules that reload installed.
            while wait.recv().is_ok() {
                let result = resource.entry().enter().map(drop);
                let result = result.map_err(|error| error.rule_id().map(str::to_owned));
                report.send(result).unwrap();
            }
        })
    };
    for round in 0..50 {
        let (rules, blocking) = if round % 2 == 0 {
            (vec![FlowRule::qps(format!("zero-{round}"), "r", 0.0)], true)
        } else {
            (vec![FlowRule::qps("wide", "r", 1_000_000.0)], false)
        };
        spillway.load_flow_rules(rules).unwrap();
        go.send(()).unwrap();
        let result = results.recv().unwrap();
        if blocking {
            assert_eq!(result, Err(Some(format!("zero-{round}"))), "round {round}");
        } else {
            assert_eq!(result, Ok(()), "round {round}");
        }
    }
    drop(go);
    worker.join().unwrap();
}
