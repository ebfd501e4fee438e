//! Event traces of per-key rules at given times (milliseconds), against Sentinel's
//! `ParamFlowChecker` step by step; the flood of cold keys; races on one key.

use super::limiter::Path;
use super::*;
use crate::flow::{Decision, Grade};
use std::time::Duration;

const MS: u64 = 1_000_000;

fn at(ms: u64) -> u64 {
    ms * MS
}

/// Decisions for `key` at each of `times` (ms).
fn trace(limiter: &KeyedLimiter, key: &str, times: &[u64]) -> Vec<Decision> {
    times
        .iter()
        .map(|&t| limiter.check(fingerprint(key), 1, at(t)))
        .collect()
}

use Decision::{Block, Pass};

#[test]
fn reject_refills_a_key_only_once_its_duration_has_passed() {
    let limiter = KeyedLimiter::new(&KeyedRule::qps("r", "api", 3.0));
    // t=0: a new key's bucket is full (3): three pass. Refilled only when more than 1000 ms have
    // passed since the last refill: not at 1000, at 1001 with (1001 * 3) / 1000 = 3 tokens.
    assert_eq!(
        trace(
            &limiter,
            "k",
            &[0, 0, 0, 0, 500, 1000, 1001, 1001, 1001, 1001]
        ),
        [Pass, Pass, Pass, Block, Block, Block, Pass, Pass, Pass, Block]
    );
    // 1500 ms later: (1500 * 3) / 1000 = 4 tokens, capped at the bucket's 3.
    assert_eq!(
        trace(&limiter, "k", &[2501, 2501, 2501, 2501]),
        [Pass, Pass, Pass, Block]
    );
}

#[test]
fn a_partial_refill_adds_what_the_time_passed_earns_truncated() {
    let limiter = KeyedLimiter::new(&KeyedRule::qps("r", "api", 4.0));
    assert_eq!(trace(&limiter, "k", &[0, 0, 0]), [Pass, Pass, Pass]);
    // One token left. At 1300: (1300 * 4) / 1000 = 5; 5 + 1 > 4, so the bucket is full again:
    // 4 - 1 = 3 left after this call.
    assert_eq!(
        trace(&limiter, "k", &[1300, 1300, 1300, 1300, 1300]),
        [Pass, Pass, Pass, Pass, Block]
    );
}

#[test]
fn burst_fills_a_new_bucket_beyond_the_count_and_duration_spreads_the_count() {
    let rule = KeyedRule::qps("r", "api", 2.0)
        .with_burst(2)
        .with_duration(Duration::from_secs(2));
    let limiter = KeyedLimiter::new(&rule);
    assert_eq!(
        trace(&limiter, "k", &[0, 0, 0, 0, 0]),
        [Pass, Pass, Pass, Pass, Block]
    );
    // After more than 2 s: (2001 * 2) / 2000 = 2 tokens (the burst is not refilled unless the
    // bucket would overflow).
    assert_eq!(
        trace(&limiter, "k", &[2001, 2001, 2001]),
        [Pass, Pass, Block]
    );
    // A call for more than count + burst is refused outright.
    assert_eq!(limiter.check(fingerprint("other"), 5, 0), Block);
    assert_eq!(limiter.check(fingerprint("other"), 4, 0), Pass);
}

#[test]
fn exceptions_have_their_own_limits_and_zero_refuses_everything() {
    let rule = KeyedRule::qps("r", "api", 1.0)
        .with_exception("vip", 3)
        .with_exception("banned", 0);
    let limiter = KeyedLimiter::new(&rule);
    assert_eq!(
        trace(&limiter, "vip", &[0, 0, 0, 0]),
        [Pass, Pass, Pass, Block]
    );
    assert_eq!(trace(&limiter, "plain", &[0, 0]), [Pass, Block]);
    assert_eq!(trace(&limiter, "banned", &[0, 5_000]), [Block, Block]);
    // An exception is matched as text: the same characters in a `String` key match.
    assert_eq!(
        limiter.check(fingerprint(&String::from("vip")), 1, at(0)),
        Block
    );
}

#[test]
fn throttle_paces_each_key_and_refuses_a_wait_of_the_max_queueing_time() {
    let rule = KeyedRule::qps("r", "api", 10.0).with_behavior(KeyedBehavior::Throttle {
        max_queueing_time: Duration::from_millis(300),
    });
    let limiter = KeyedLimiter::new(&rule);
    // 100 ms apart. The first passes; each next one queues behind the last, until the wait
    // would be 300 ms (Sentinel refuses a wait equal to the max: `expected - now < max`).
    let wait = |ms| Decision::Wait(Duration::from_millis(ms));
    assert_eq!(
        trace(&limiter, "k", &[0, 0, 0, 0]),
        [Pass, wait(100), wait(200), Block]
    );
    // Another key has its own schedule.
    assert_eq!(trace(&limiter, "j", &[0, 0]), [Pass, wait(100)]);
    // Past the schedule: passes at once and starts it again from now.
    assert_eq!(trace(&limiter, "k", &[1_000, 1_000]), [Pass, wait(100)]);
}

#[test]
fn concurrency_counts_each_key_in_flight() {
    let rule = KeyedRule::in_flight("api", 2)
        .with_id("c")
        .with_exception("vip", 3);
    let limiter = KeyedLimiter::new(&rule);
    let (a, vip) = (fingerprint("a"), fingerprint("vip"));
    assert_eq!(
        [0, 0, 0].map(|_| limiter.check(a, 1, 0)),
        [Pass, Pass, Block]
    );
    assert_eq!(limiter.in_flight(a), 2);
    limiter.exit(a);
    assert_eq!(limiter.check(a, 1, 0), Pass);
    assert_eq!(
        [0, 0, 0, 0].map(|_| limiter.check(vip, 1, 0)),
        [Pass, Pass, Pass, Block]
    );
    assert_eq!(limiter.heap_bytes(), KeyedLimiter::new(&rule).heap_bytes());
}

#[test]
fn a_key_that_lost_its_place_is_not_fresh_when_it_comes_back() {
    // One set of four places. `a` uses its whole limit without being refused (so it is not
    // protected), then four busier keys take every place.
    let limiter = KeyedLimiter::new(&KeyedRule::qps("r", "api", 5.0).with_capacity(WAYS));
    let a = fingerprint("a");
    for _ in 0..5 {
        assert_eq!(limiter.decide(a, 1, at(10)), (Pass, Path::Exact));
    }
    for other in ["b", "c", "d", "e"] {
        for _ in 0..8 {
            limiter.check(fingerprint(other), 1, at(20));
        }
    }
    assert!(limiter.stats().evictions >= 1, "{:?}", limiter.stats());
    // Back in the same window: the sketch remembers its five passes, so it is refused, where a
    // fresh bucket would have passed it.
    let (decision, _) = limiter.decide(a, 1, at(30));
    assert_eq!(decision, Block);
    // Windows later its passes are forgotten, as its bucket would have refilled.
    let (decision, _) = limiter.decide(a, 1, at(3_000));
    assert_eq!(decision, Pass);
}

#[test]
fn a_key_being_limited_keeps_its_place_against_busier_keys() {
    // One set of four places. `limited` asks 3 times against a limit of 2: refused once. The
    // others have limits of 1,000: never refused.
    let mut rule = KeyedRule::qps("r", "api", 2.0).with_capacity(WAYS);
    for key in 0..24 {
        rule = rule.with_exception(format!("w{key}"), 1_000);
    }
    let limiter = KeyedLimiter::new(&rule);
    let limited = fingerprint("limited");
    assert_eq!(trace(&limiter, "limited", &[0, 0, 0]), [Pass, Pass, Block]);
    // Eight keys, each busier than the last (10 calls and more), want the places: they take
    // the other three in turn, never the limited key's, in this window and the next.
    for (at_ms, keys) in [(100, 0..8), (1_100, 8..16)] {
        for key in keys {
            for _ in 0..10 + key {
                limiter.check(fingerprint(&format!("w{key}")), 1, at(at_ms));
            }
        }
        assert_eq!(limiter.decide(limited, 1, at(at_ms)).1, Path::Exact);
    }
    assert!(limiter.stats().evictions >= 8, "{:?}", limiter.stats());
    // Two windows after its last refusal, it is a key like the others: the busier ones take
    // its place.
    for key in 16..24 {
        for _ in 0..10 + key {
            limiter.check(fingerprint(&format!("w{key}")), 1, at(3_500));
        }
    }
    assert_eq!(limiter.decide(limited, 1, at(3_500)).1, Path::Sketch);
}

/// The hot key's admissions never exceed what its bucket allows, at any moment: a full bucket
/// (count + burst) plus `count` per started duration.
fn within_the_limit(
    admitted: u64,
    count: u64,
    burst: u64,
    elapsed_ms: u64,
    duration_ms: u64,
) -> bool {
    admitted <= count + burst + count * (elapsed_ms / duration_ms + 1)
}

#[test]
fn a_flood_of_a_million_cold_keys_never_evicts_the_hot_key_being_limited() {
    const COUNT: u64 = 20;
    let rule = KeyedRule::qps("per-user", "api", COUNT as f64).with_capacity(1_024);
    let limiter = KeyedLimiter::new(&rule);
    let bytes = limiter.heap_bytes();
    let hot = fixed_fingerprint("hot");
    let (mut admitted, mut hot_checks) = (0u64, 0u64);
    // 10 s: a million distinct cold keys, 100,000 a second, one call each (about 12 to a
    // sketch cell each window); between every 4,000 of them the hot key asks once: 25 a
    // second, a little over its limit.
    for i in 0..1_000_000u64 {
        let now_ms = i / 100;
        limiter.check(fixed_fingerprint(&i), 1, at(now_ms));
        if i % 4_000 == 0 {
            let (decision, path) = limiter.decide(hot, 1, at(now_ms));
            hot_checks += 1;
            if decision.admits() {
                admitted += 1;
            }
            assert!(
                within_the_limit(admitted, COUNT, 0, now_ms, 1_000),
                "{admitted} admitted by {now_ms} ms"
            );
            // Once limited, it keeps its exact state.
            if hot_checks > COUNT + 1 {
                assert_eq!(
                    path,
                    Path::Exact,
                    "the hot key lost its place at {now_ms} ms"
                );
            }
        }
    }
    // It got its limit at each refill, less a few in its first second (while the flood's
    // cells in the sketch outweighed it): 20 every 1,040 ms (a refill needs more than 1 s since
    // the last, and it asks every 40 ms).
    assert!(admitted >= COUNT * 9, "{admitted}");
    assert!(limiter.stats().evictions > 0, "the cold keys did churn");
    assert_eq!(limiter.heap_bytes(), bytes, "memory is fixed");
}

#[test]
fn memory_is_a_constant_of_the_capacity() {
    let bytes = |capacity| {
        KeyedLimiter::new(&KeyedRule::qps("r", "api", 1.0).with_capacity(capacity)).heap_bytes()
    };
    // 4,096 keys (the default): 1,024 sets of four places, two sketches of 4 rows x 8,192,
    // and the two striped counters of checks and refusals.
    let counters = 2 * crate::stats::StripedCounter::new().heap_bytes();
    let default = bytes(DEFAULT_CAPACITY);
    assert_eq!(
        default,
        1_024 * std::mem::size_of::<crate::sync::Mutex<[[u64; 5]; WAYS]>>()
            + 2 * 4 * 8_192 * 8
            + counters
    );
    assert!(bytes(1) < default && default < bytes(100_000));
    let rule = KeyedRule::in_flight("api", 1)
        .with_id("c")
        .with_capacity(DEFAULT_CAPACITY);
    assert_eq!(
        KeyedLimiter::new(&rule).heap_bytes(),
        4 * 8_192 * 8 + 2 * 4 * 8 + counters
    );
}

#[test]
fn racing_threads_never_pass_a_key_beyond_its_limit() {
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
    let limiter = KeyedLimiter::new(&KeyedRule::qps("r", "api", 100.0).with_burst(10));
    let passed = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..1_000 {
                    if limiter.check(fingerprint("k"), 1, at(0)).admits() {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(
        passed.load(Ordering::Relaxed),
        110,
        "exactly count + burst at one instant"
    );

    let limiter = KeyedLimiter::new(&KeyedRule::in_flight("api", 3).with_id("c"));
    let (in_flight, most) = (AtomicI64::new(0), AtomicI64::new(0));
    let key = fingerprint("k");
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..5_000 {
                    if limiter.check(key, 1, 0).admits() {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        limiter.exit(key);
                    }
                }
            });
        }
    });
    assert!(
        most.load(Ordering::SeqCst) <= 3,
        "{} in flight",
        most.load(Ordering::SeqCst)
    );
    assert_eq!(limiter.in_flight(key), 0);
}

#[test]
fn empty_and_huge_keys_are_keys_like_any_other() {
    let limiter = KeyedLimiter::new(&KeyedRule::qps("r", "api", 1.0));
    let huge = "x".repeat(1 << 20);
    assert_eq!(trace(&limiter, "", &[0, 0]), [Pass, Block]);
    assert_eq!(trace(&limiter, &huge, &[0, 0]), [Pass, Block]);
    assert_eq!(
        limiter.check(fingerprint(&0u64), 1, 0),
        Pass,
        "a key hashing anywhere"
    );
    let _ = Grade::Qps;
}

#[test]
fn invalid_rules_are_refused_by_field() {
    let field = |rule: KeyedRule| validate_keyed_rules(&[rule]).unwrap_err().field();
    assert_eq!(field(KeyedRule::qps("", "api", 1.0)), "id");
    assert_eq!(field(KeyedRule::qps("r", "", 1.0)), "resource");
    assert_eq!(field(KeyedRule::qps("r", "api", -1.0)), "count");
    assert_eq!(field(KeyedRule::qps("r", "api", f64::NAN)), "count");
    assert_eq!(
        field(KeyedRule::qps("r", "api", 1.0).with_duration(Duration::ZERO)),
        "duration"
    );
    assert_eq!(
        field(KeyedRule::qps("r", "api", 1.0).with_duration(Duration::from_millis(1_500))),
        "duration"
    );
    assert_eq!(
        field(KeyedRule::qps("r", "api", 1.0).with_capacity(0)),
        "capacity"
    );
    assert_eq!(
        field(KeyedRule::in_flight("api", 1).with_id("r").with_burst(1)),
        "burst"
    );
    assert_eq!(
        field(
            KeyedRule::qps("r", "api", 1.0)
                .with_exception("a", 1)
                .with_exception("a", 2)
        ),
        "exceptions"
    );
    let twice = [KeyedRule::qps("r", "a", 1.0), KeyedRule::qps("r", "b", 1.0)];
    let err = validate_keyed_rules(&twice).unwrap_err();
    assert_eq!((err.index(), err.field()), (1, "id"));
    assert_eq!(
        err.to_string(),
        "keyed rule #1 (id `r`): `id` is also the id of keyed rule #0"
    );
}

#[test]
fn a_rule_counts_its_checks_refusals_and_exact_keys() {
    let limiter = KeyedLimiter::new(&KeyedRule::qps("per-user", "api", 2.0));
    let (alice, bob) = (fingerprint("alice"), fingerprint("bob"));
    for _ in 0..3 {
        limiter.check(alice, 1, 0);
    }
    limiter.check(bob, 1, 0);
    let stats = limiter.stats();
    assert_eq!((stats.checks, stats.refused), (4, 1), "{stats:?}");
    assert_eq!(stats.exact_keys, 2);
    assert!(stats.sketch_bytes > 0 && stats.sketch_bytes < limiter.heap_bytes());
}

#[test]
fn a_key_without_a_place_is_limited_over_a_sliding_duration() {
    // One set of four places, each held by a key refused at 0 ms (so kept through the next
    // window): `k` is decided by the sketch throughout.
    let limiter = KeyedLimiter::new(&KeyedRule::qps("r", "api", 4.0).with_capacity(WAYS));
    for holder in ["h1", "h2", "h3", "h4"] {
        assert_eq!(
            trace(&limiter, holder, &[0; 5]),
            [Pass, Pass, Pass, Pass, Block]
        );
    }
    let k = fingerprint("k");
    let decide = |ms| {
        let (decision, path) = limiter.decide(k, 1, at(ms));
        assert_eq!(path, Path::Sketch, "at {ms} ms");
        decision
    };
    // Four passes at the end of the first window, then refused.
    for _ in 0..4 {
        assert_eq!(decide(900), Pass);
    }
    assert_eq!(decide(950), Block);
    // At the next window's start, the four still count in full (a fixed window would pass four
    // more at once); 300 ms on, 70% of them, rounded up: 3, so one more passes.
    assert_eq!(decide(1_000), Block);
    assert_eq!(decide(1_300), Pass);
    assert_eq!(decide(1_300), Block);
    // 760 ms on: ceil(4 x 0.24) = 1 of them, and the one this window: two more.
    assert_eq!(decide(1_760), Pass);
    assert_eq!(decide(1_760), Pass);
    assert_eq!(decide(1_760), Block);
}

#[test]
fn a_key_without_a_place_past_what_a_sketch_cell_holds_is_refused() {
    // 20,000,000 a day: more than a sketch's cell counts (2^24 - 1). Each place is held by a
    // key refused at 0 ms, so `k` is decided by the sketch. Before 0.2 its count stopped at
    // 16,777,215 and every later call passed.
    let rule = KeyedRule::qps("r", "api", 20_000_000.0)
        .with_duration(std::time::Duration::from_secs(86_400))
        .with_capacity(WAYS);
    let limiter = KeyedLimiter::new(&rule);
    for holder in ["h1", "h2", "h3", "h4"] {
        assert_eq!(
            limiter.decide(fingerprint(holder), u32::MAX, at(0)).0,
            Block
        );
    }
    let k = fingerprint("k");
    let mut passed = 0;
    for call in 0..100 {
        let (decision, path) = limiter.decide(k, 1_000_000, at(1_000 + call));
        assert_eq!(path, Path::Sketch);
        if decision == Pass {
            passed += 1;
        }
    }
    // 17 x 1,000,000 pass; the 17th saturates its cells, which then read as the most a key
    // can pass in a window, twice the count: refused for the rest of the day.
    assert_eq!(passed, 17);
    // The next day, the previous day's count weighs as 40,000,000 spread over it: refused
    // while more than 19,000,000 of it lies within a day of now, passing again after that,
    // not a whole day later.
    let day = 86_400_000;
    assert_eq!(limiter.decide(k, 1_000_000, at(day + 1_000)).0, Block);
    assert_eq!(
        limiter.decide(k, 1_000_000, at(day + day * 52 / 100)).0,
        Block
    );
    assert_eq!(
        limiter.decide(k, 1_000_000, at(day + day * 53 / 100)).0,
        Pass
    );
}

#[test]
fn racing_threads_never_pass_a_key_without_a_place_beyond_its_limit() {
    // As above: the places are held, so `k` is decided by the sketch; four threads race on it
    // at one instant, 1,000 calls each, against a limit of 100.
    let mut rule = KeyedRule::qps("r", "api", 100.0).with_capacity(WAYS);
    for holder in ["h1", "h2", "h3", "h4"] {
        rule = rule.with_exception(holder, 1);
    }
    let limiter = KeyedLimiter::new(&rule);
    for holder in ["h1", "h2", "h3", "h4"] {
        assert_eq!(trace(&limiter, holder, &[0, 0]), [Pass, Block]);
    }
    let passed = std::sync::atomic::AtomicU64::new(0);
    let start = std::sync::Barrier::new(4);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                start.wait();
                for _ in 0..1_000 {
                    let (decision, path) = limiter.decide(fingerprint("k"), 1, at(10));
                    assert_eq!(path, Path::Sketch);
                    if decision.admits() {
                        passed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(passed.into_inner(), 100, "exactly the limit at one instant");
}

#[test]
fn thousands_of_keys_in_flight_at_once_each_get_their_own_count() {
    // 1,000 keys, one call each in flight, against a limit of one: none is refused. A key is
    // counted too high only when each of its four cells also counts another key in flight:
    // with k keys in flight, about (1 - e^(-k / 8,192))^4 of calls, here 0.04 refusals in all.
    // (When a sketch's rows all placed a key alike, one shared cell was enough: about 60.)
    let limiter = KeyedLimiter::new(&KeyedRule::in_flight("api", 1).with_id("c"));
    let refused = (0..1_000u64)
        .filter(|key| !limiter.check(fixed_fingerprint(key), 1, 0).admits())
        .count();
    assert_eq!(refused, 0);
    for key in 0..1_000u64 {
        limiter.exit(fixed_fingerprint(&key));
    }
    assert_eq!(limiter.in_flight(fixed_fingerprint(&7u64)), 0);

    // The rate docs/keyed.md quotes: with 3,000 keys in flight, one call in 110 of a new key
    // is refused early (20,000 tries: 181 expected; 130 to 240 allowed).
    let admitted: Vec<u64> = (0..3_000u64)
        .map(|key| fixed_fingerprint(&key))
        .filter(|&key| limiter.check(key, 1, 0).admits())
        .collect();
    let others = 3_000 - admitted.len() as u64;
    let refused = (10_000..30_000u64)
        .filter(|key| {
            let key = fixed_fingerprint(key);
            let admits = limiter.check(key, 1, 0).admits();
            if admits {
                limiter.exit(key);
            }
            !admits
        })
        .count();
    assert!(
        (130..=240).contains(&refused),
        "{refused} of 20,000 refused"
    );
    assert!(others < 30, "{others} of the 3,000 refused");
}

/// Honest users' refusals under a flood of distinct keys: `(refused, asked)`. A hundred users
/// each ask at half their limit (`count / 2` a second, spread evenly), between calls of
/// `flood` distinct keys a second, one call each, for 10 s; the users' calls in the first two
/// seconds (while the table fills) are not counted.
fn honest_refusals(capacity: usize, count: u64, flood: u64) -> (u64, u64) {
    const USERS: u64 = 100;
    const SECONDS: u64 = 10;
    let limiter =
        KeyedLimiter::new(&KeyedRule::qps("r", "api", count as f64).with_capacity(capacity));
    let users: Vec<u64> = (0..USERS)
        .map(|user| fixed_fingerprint(&format!("user{user}")))
        .collect();
    let every = flood / (USERS * (count / 2));
    let (mut refused, mut asked, mut next) = (0, 0, 0);
    for call in 0..flood * SECONDS {
        let now = call * 1_000_000_000 / flood;
        limiter.check(fixed_fingerprint(&(u64::MAX - call)), 1, now);
        if call % every == 0 {
            let admitted = limiter.check(users[next % users.len()], 1, now).admits();
            next += 1;
            if now >= 2_000_000_000 {
                asked += 1;
                refused += u64::from(!admitted);
            }
        }
    }
    (refused, asked)
}

#[test]
fn a_flood_of_distinct_keys_leaves_honest_keys_their_limit() {
    // The numbers docs/keyed.md quotes, each within 1% of the users' calls. At the default
    // capacity, 20,000 flood keys a second leave users with a count of 5 alone, and 5,000 a
    // second users with a count of 2.
    for (capacity, count, flood) in [
        (DEFAULT_CAPACITY, 5, 20_000),
        (DEFAULT_CAPACITY, 2, 5_000),
        (65_536, 2, 20_000),
        (65_536, 5, 80_000),
    ] {
        let (refused, asked) = honest_refusals(capacity, count, flood);
        assert!(
            refused * 100 <= asked,
            "capacity {capacity}, count {count}, {flood} keys/s: {refused} of {asked} refused"
        );
    }
    // Past what the default capacity holds, the sketch refuses users without a place early
    // (what docs/keyed.md says a larger capacity is for): 40,000 keys a second, count 2.
    let (refused, asked) = honest_refusals(DEFAULT_CAPACITY, 2, 40_000);
    assert!(refused * 4 > asked, "{refused} of {asked} refused");
}
