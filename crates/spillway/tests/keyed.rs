//! Per-key rules in the decision pipeline, on a manual clock: each key its own limit, refusals
//! that name the rule, entries without a key, all or nothing with the rules after them, reloads
//! that keep every key's state, concurrency released at exit, pacing through `try_enter`, and
//! racing threads.

use spillway::breaker::{BreakerRule, BreakerStrategy};
use spillway::keyed::{KeyedBehavior, KeyedRule};
use spillway::{Admission, BlockKind, ManualClock, Spillway};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

fn spillway() -> (ManualClock, Spillway) {
    let clock = ManualClock::new();
    clock.set_nanos(1_700_000_000_000 * 1_000_000);
    (clock.clone(), Spillway::new_with_clock(clock))
}

/// Of `n` entries of `key` on `resource`, the ones admitted (each ended at once).
fn admitted(spillway: &Spillway, resource: &str, key: &str, n: usize) -> usize {
    (0..n)
        .filter(|_| spillway.entry(resource).key(key).enter().is_ok())
        .count()
}

#[test]
fn each_key_has_its_limit_and_a_refusal_names_the_rule() {
    let (clock, spillway) = spillway();
    spillway
        .load_keyed_rules(vec![
            KeyedRule::qps("per-user", "search", 3.0).with_exception("vip", 5)
        ])
        .unwrap();
    assert_eq!(admitted(&spillway, "search", "alice", 10), 3);
    assert_eq!(admitted(&spillway, "search", "bob", 10), 3);
    assert_eq!(admitted(&spillway, "search", "vip", 10), 5);
    let err = spillway.entry("search").key("alice").enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Keyed);
    assert_eq!(err.rule_id(), Some("per-user"));
    assert_eq!(err.resource(), "search");
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    // Entries without a key, and other resources, are not limited by it.
    assert_eq!(
        (0..10)
            .filter(|_| spillway.entry("search").enter().is_ok())
            .count(),
        10
    );
    assert_eq!(admitted(&spillway, "other", "alice", 10), 10);
    // Refused entries count as blocks of the resource.
    let stats = spillway.resource("search").unwrap().stats();
    assert_eq!(stats.total_block, 7 + 7 + 5 + 1, "{stats:?}");
    clock.advance(Duration::from_millis(1_001));
    assert_eq!(admitted(&spillway, "search", "alice", 10), 3);
}

#[test]
fn a_later_refusal_gives_the_key_s_tokens_back_and_a_reload_keeps_them() {
    let (_clock, spillway) = spillway();
    let wide = KeyedRule::qps("wide", "api", 3.0);
    let narrow = KeyedRule::qps("narrow", "api", 1.0);
    spillway
        .load_keyed_rules(vec![wide.clone(), narrow])
        .unwrap();
    // The first passes both; the next two pass `wide`, are refused by `narrow`, and give
    // `wide` its tokens back.
    assert_eq!(admitted(&spillway, "api", "x", 3), 1);
    let err = spillway.entry("api").key("x").enter().unwrap_err();
    assert_eq!(err.rule_id(), Some("narrow"));
    // `narrow` goes; `wide`, unchanged, keeps its state: 2 tokens left, not 0 (without the
    // give-back) and not 3 (a fresh bucket).
    spillway.load_keyed_rules(vec![wide]).unwrap();
    assert_eq!(admitted(&spillway, "api", "x", 10), 2);
}

#[test]
fn a_breaker_refusing_after_the_key_passed_gives_the_pass_back() {
    let (clock, spillway) = spillway();
    spillway
        .load_keyed_rules(vec![KeyedRule::qps("per-key", "db", 2.0)])
        .unwrap();
    let breaker = BreakerRule::new(
        "db-errors",
        "db",
        BreakerStrategy::ErrorCount { threshold: 0 },
        Duration::from_secs(10),
    )
    .with_min_request_amount(1);
    spillway.load_breaker_rules(vec![breaker]).unwrap();
    // One failed call opens the breaker (the key spent one token).
    let mut entry = spillway.entry("db").key("k").enter().unwrap();
    entry.set_error(true);
    drop(entry);
    for _ in 0..5 {
        let err = spillway.entry("db").key("k").enter().unwrap_err();
        assert_eq!(err.kind(), BlockKind::Breaker);
    }
    // The breakers go; the key still has its second token, and no more.
    spillway.load_breaker_rules(vec![]).unwrap();
    clock.advance(Duration::from_millis(10));
    assert_eq!(admitted(&spillway, "db", "k", 5), 1);
}

#[test]
fn a_concurrency_rule_counts_each_key_in_flight_until_the_entry_ends() {
    let (_clock, spillway) = spillway();
    spillway
        .load_keyed_rules(vec![KeyedRule::in_flight("jobs", 2).with_id("per-tenant")])
        .unwrap();
    let first = spillway.entry("jobs").key("t1").enter().unwrap();
    let second = spillway.entry("jobs").key("t1").enter_owned().unwrap();
    let err = spillway.entry("jobs").key("t1").enter().unwrap_err();
    assert_eq!(
        (err.kind(), err.rule_id()),
        (BlockKind::Keyed, Some("per-tenant"))
    );
    // Another tenant has its own places.
    assert!(spillway.entry("jobs").key("t2").enter().is_ok());
    drop(second);
    let third = spillway.entry("jobs").key("t1").enter().unwrap();
    drop((first, third));
    assert_eq!(admitted(&spillway, "jobs", "t1", 2), 2);
}

#[test]
fn a_pacing_rule_queues_the_entry_through_try_enter() {
    let (_clock, spillway) = spillway();
    let rule = KeyedRule::qps("paced", "export", 10.0).with_behavior(KeyedBehavior::Throttle {
        max_queueing_time: Duration::from_millis(250),
    });
    spillway.load_keyed_rules(vec![rule]).unwrap();
    let mut waits = Vec::new();
    for _ in 0..4 {
        match spillway.entry("export").key("k").try_enter() {
            Ok(Admission::Ready(entry)) => {
                waits.push(Some(Duration::ZERO));
                drop(entry);
            }
            Ok(Admission::Queued(pending)) => waits.push(Some(pending.wait())),
            Ok(Admission::Waiting(_)) => unreachable!("no adaptive limit"),
            Err(_) => waits.push(None),
        }
    }
    let ms = |n| Some(Duration::from_millis(n));
    assert_eq!(waits, [ms(0), ms(100), ms(200), None]);
}

/// An entry a per-key pacing rule schedules, that then waits for a place under a full adaptive
/// limit, still waits for its turn once it has the place.
#[test]
fn a_paced_entry_that_waits_for_a_place_keeps_its_turn() {
    use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule, AimdConfig};
    let (_clock, spillway) = spillway();
    let paced = KeyedRule::qps("paced", "export", 10.0).with_behavior(KeyedBehavior::Throttle {
        max_queueing_time: Duration::from_millis(250),
    });
    spillway.load_keyed_rules(vec![paced]).unwrap();
    let one = AdaptiveAlgorithm::Aimd(AimdConfig {
        initial_limit: 1,
        min_limit: 1,
        max_limit: 1,
        ..AimdConfig::default()
    });
    let queue = AdaptiveQueue {
        timeout: Duration::from_secs(1),
        ..AdaptiveQueue::default()
    };
    let rule = AdaptiveRule::resource("one", "export", one).with_queue(queue);
    spillway.load_adaptive_rules(vec![rule]).unwrap();
    let Ok(Admission::Ready(first)) = spillway.entry("export").key("k").try_enter() else {
        panic!("the first entry is admitted at once");
    };
    let Ok(Admission::Waiting(waiting)) = spillway.entry("export").key("k").try_enter() else {
        panic!("the second waits for the adaptive limit's one place");
    };
    drop(first);
    assert!(waiting.is_granted());
    let resumed = waiting.resume();
    match &resumed {
        Ok(Admission::Queued(pending)) => {
            assert_eq!(pending.wait(), Duration::from_millis(100));
        }
        other => panic!("the key's pacing still holds it back 100 ms: {other:?}"),
    }
}

#[test]
fn racing_threads_never_admit_a_key_beyond_its_limit() {
    let (_clock, spillway) = spillway();
    spillway
        .load_keyed_rules(vec![
            KeyedRule::qps("qps", "api", 50.0).with_burst(5),
            KeyedRule::in_flight("jobs", 3).with_id("flight"),
        ])
        .unwrap();
    let passed = AtomicU64::new(0);
    let (in_flight, most) = (AtomicI64::new(0), AtomicI64::new(0));
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..500 {
                    if spillway.entry("api").key("hot").enter().is_ok() {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Ok(entry) = spillway.entry("jobs").key("hot").enter() {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        drop(entry);
                    }
                }
            });
        }
    });
    // The clock stood still: exactly one full bucket.
    assert_eq!(passed.load(Ordering::Relaxed), 55);
    assert!(most.load(Ordering::SeqCst) <= 3);
}

#[test]
fn rules_on_different_key_positions_each_read_their_own_key() {
    let (_clock, spillway) = spillway();
    spillway
        .load_keyed_rules(vec![
            KeyedRule::qps("per-ip", "login", 3.0),
            KeyedRule::qps("per-user", "login", 1.0).with_param(2),
        ])
        .unwrap();
    let login = |ip: &str, user: &str| {
        spillway
            .entry("login")
            .key(ip)
            .key_at(2, user)
            .enter()
            .map_err(|err| err.rule_id().map(str::to_owned))
    };
    assert!(login("10.0.0.1", "alice").is_ok());
    assert_eq!(
        login("10.0.0.1", "alice").unwrap_err().as_deref(),
        Some("per-user")
    );
    assert!(login("10.0.0.1", "bob").is_ok());
    // The per-user refusal gave the IP's token back: one left of three.
    assert!(login("10.0.0.1", "carol").is_ok());
    assert_eq!(
        login("10.0.0.1", "dave").unwrap_err().as_deref(),
        Some("per-ip")
    );
    // An entry with only the IP is limited by the per-IP rule alone.
    assert!(spillway.entry("login").key("10.0.0.9").enter().is_ok());
    // A position past the last is ignored.
    assert!(spillway.entry("login").key_at(9, "x").enter().is_ok());
}

#[test]
fn invalid_rules_change_nothing() {
    let (_clock, spillway) = spillway();
    spillway
        .load_keyed_rules(vec![KeyedRule::qps("ok", "api", 1.0)])
        .unwrap();
    let err = spillway
        .load_keyed_rules(vec![KeyedRule::qps("bad", "api", -1.0)])
        .unwrap_err();
    assert_eq!((err.kind(), err.field()), ("keyed", "count"));
    let nine: Vec<KeyedRule> = (0..9)
        .map(|i| KeyedRule::qps(format!("r{i}"), "api", 1.0))
        .collect();
    let err = spillway.load_keyed_rules(nine).unwrap_err();
    assert_eq!((err.index(), err.field()), (8, "resource"));
    let err = spillway
        .load_keyed_rules(vec![KeyedRule::qps("far", "api", 1.0).with_param(4)])
        .unwrap_err();
    assert_eq!(err.field(), "param");
    let err = spillway
        .load_keyed_rules(vec![
            KeyedRule::in_flight("api", 1).with_id("by-ip"),
            KeyedRule::in_flight("api", 1)
                .with_id("by-user")
                .with_param(1),
        ])
        .unwrap_err();
    assert_eq!((err.index(), err.field()), (1, "param"));
    assert_eq!(spillway.keyed_rules(), [KeyedRule::qps("ok", "api", 1.0)]);
    assert_eq!(admitted(&spillway, "api", "k", 3), 1);
}
