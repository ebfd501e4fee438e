//! An adaptive limit's queue by criticality, tenant and deadline, traced on a manual clock: a
//! freed place goes to the most critical waiter, a full queue sheds its least critical waiter
//! for a more critical newcomer, tenants of one criticality take turns, and a waiter whose
//! deadline has come (or cannot be met at the current latency) is refused before it runs. A
//! stress test races criticalities and tenants through a small limit and checks it is never
//! passed.

mod support;

use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule, AimdConfig, QueueOrder};
use spillway::{Admission, BlockKind, Criticality, Entry, EntryBuilder, Spillway, Waiting};
use std::time::Duration;
use support::manual;

/// AIMD held at `limit`.
fn fixed(limit: u32) -> AdaptiveAlgorithm {
    AdaptiveAlgorithm::Aimd(AimdConfig {
        initial_limit: limit,
        min_limit: limit,
        max_limit: limit,
        ..AimdConfig::default()
    })
}

/// A spillway whose resource `r` has an adaptive limit of `limit` with a FIFO queue of
/// `capacity` (100 ms timeout).
fn limited(limit: u32, capacity: u32) -> (Spillway, spillway::ManualClock) {
    let (spillway, clock) = manual();
    let queue = AdaptiveQueue {
        capacity,
        order: QueueOrder::Fifo,
        timeout: Duration::from_millis(100),
    };
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "r-adaptive",
            "r",
            fixed(limit),
        )
        .with_queue(queue)])
        .unwrap();
    (spillway, clock)
}

fn wait(builder: EntryBuilder<'_>) -> Waiting<'_> {
    match builder.try_enter() {
        Ok(Admission::Waiting(waiting)) => waiting,
        other => panic!("expected to wait, got {other:?}"),
    }
}

fn ready(admission: Result<Admission<'_>, spillway::BlockError>) -> Entry<'_> {
    match admission {
        Ok(Admission::Ready(entry)) => entry,
        other => panic!("expected an admission, got {other:?}"),
    }
}

#[test]
fn a_freed_place_goes_to_the_most_critical_waiter_then_in_order() {
    let (spillway, _clock) = limited(1, 10);
    let running = ready(spillway.entry("r").try_enter());
    let on = |criticality| wait(spillway.entry("r").criticality(criticality));
    let prefetch = on(Criticality::Sheddable);
    let browse = on(Criticality::Critical);
    let checkout = on(Criticality::CriticalPlus);
    let search = on(Criticality::Critical);
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!(state.waiting_by_criticality, [1, 0, 2, 1]);

    let mut order = Vec::new();
    let mut waiting = [
        ("prefetch", Some(prefetch)),
        ("browse", Some(browse)),
        ("checkout", Some(checkout)),
        ("search", Some(search)),
    ];
    drop(running);
    for _ in 0..4 {
        let granted: Vec<usize> = (0..waiting.len())
            .filter(|&at| waiting[at].1.as_ref().is_some_and(Waiting::is_granted))
            .collect();
        assert_eq!(granted.len(), 1, "one place, one caller");
        let (name, caller) = &mut waiting[granted[0]];
        order.push(*name);
        drop(ready(caller.take().unwrap().resume()));
    }
    // The checkout first, then the critical ones in the order they came, the prefetch last.
    assert_eq!(order, ["checkout", "browse", "search", "prefetch"]);
}

#[test]
fn a_full_queue_sheds_its_least_critical_waiter_for_a_more_critical_newcomer() {
    let (spillway, _clock) = limited(1, 2);
    let running = ready(spillway.entry("r").try_enter());
    let sheddable = || spillway.entry("r").criticality(Criticality::Sheddable);
    let older = wait(sheddable());
    let newer = wait(sheddable());
    let checkout = wait(spillway.entry("r").criticality(Criticality::CriticalPlus));
    // The newest sheddable waiter (served last in FIFO order) gave way: it is refused, and
    // its refusal names its criticality.
    assert!(!newer.is_granted());
    let err = newer.resume().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Adaptive);
    assert_eq!(err.criticality(), Some(Criticality::Sheddable));
    assert!(err.to_string().contains("(sheddable request)"), "{err}");
    // A sheddable newcomer finds the queue full of waiters that keep their places.
    let refused = sheddable().try_enter().unwrap_err();
    assert_eq!(refused.kind(), BlockKind::Adaptive);
    assert_eq!(refused.criticality(), Some(Criticality::Sheddable));
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!(state.evicted, [1, 0, 0, 0]);
    assert_eq!(state.full, [1, 0, 0, 0]);
    assert_eq!(state.waiting_by_criticality, [1, 0, 0, 1]);
    // The checkout has the next place.
    drop(running);
    assert!(checkout.is_granted() && !older.is_granted());
}

/// A tenant's fingerprint by a fixed hash: which of the queue's lanes two tenants share must
/// not change from run to run (a fingerprint's seed is random per process).
fn tenant_hash(tenant: &str) -> u64 {
    use std::hash::BuildHasher as _;
    foldhash::quality::FixedState::with_seed(0x5350_494c_4c57_4159).hash_one(tenant)
}

#[test]
fn tenants_of_one_criticality_take_turns() {
    let (spillway, _clock) = limited(1, 20);
    let running = ready(spillway.entry("r").try_enter());
    let mut waiting: Vec<(&str, Option<Waiting<'_>>)> = Vec::new();
    for _ in 0..6 {
        waiting.push((
            "noisy",
            Some(wait(
                spillway.entry("r").tenant_fingerprint(tenant_hash("noisy")),
            )),
        ));
    }
    for _ in 0..2 {
        waiting.push((
            "quiet",
            Some(wait(
                spillway.entry("r").tenant_fingerprint(tenant_hash("quiet")),
            )),
        ));
    }
    drop(running);
    let mut order = Vec::new();
    for _ in 0..8 {
        let at = (0..waiting.len())
            .find(|&at| waiting[at].1.as_ref().is_some_and(Waiting::is_granted))
            .expect("a place was handed on");
        order.push(waiting[at].0);
        drop(ready(waiting[at].1.take().unwrap().resume()));
    }
    // In arrival order the quiet tenant would come 7th and 8th; taking turns, it comes
    // within the first round of each of its calls (the noisy one spreads over two buckets).
    let quiet: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, tenant)| **tenant == "quiet")
        .map(|(at, _)| at + 1)
        .collect();
    assert!(quiet[0] <= 3 && quiet[1] <= 6, "{order:?}");
}

#[test]
fn a_waiter_whose_deadline_comes_is_refused_before_it_runs() {
    let (spillway, clock) = limited(1, 10);
    let running = ready(spillway.entry("r").try_enter());
    let hurried = wait(spillway.entry("r").deadline(Duration::from_millis(30)));
    let patient = wait(spillway.entry("r"));
    // It waits no longer than its deadline; the other the queue's timeout.
    assert_eq!(hurried.timeout(), Duration::from_millis(30));
    assert_eq!(patient.timeout(), Duration::from_millis(100));
    clock.advance(Duration::from_millis(40));
    assert_eq!(hurried.timeout(), Duration::ZERO);
    // The freed place skips it: it would start past its deadline.
    drop(running);
    assert!(!hurried.is_granted() && patient.is_granted());
    let err = hurried.resume().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Deadline);
    assert_eq!(err.criticality(), Some(Criticality::Critical));
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!(state.expired, [0, 0, 1, 0]);
    assert_eq!(state.queue_timeouts, 0);
    drop(ready(patient.resume()));
}

#[test]
fn a_caller_that_cannot_be_done_by_its_deadline_is_refused_without_waiting() {
    let (spillway, clock) = limited(1, 10);
    // A call that takes 80 ms: the limit's current latency.
    let slow = ready(spillway.entry("r").try_enter());
    clock.advance(Duration::from_millis(80));
    drop(slow);
    let running = ready(spillway.entry("r").try_enter());
    let err = spillway
        .entry("r")
        .deadline(Duration::from_millis(50))
        .try_enter()
        .unwrap_err();
    assert_eq!(err.kind(), BlockKind::Deadline);
    // A deadline of zero has passed; one with room for the call waits.
    let err = spillway
        .entry("r")
        .deadline(Duration::ZERO)
        .try_enter()
        .unwrap_err();
    assert_eq!(err.kind(), BlockKind::Deadline);
    let waiting = wait(spillway.entry("r").deadline(Duration::from_millis(200)));
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!(state.expired, [0, 0, 2, 0]);
    drop(running);
    assert!(waiting.is_granted());
}

#[test]
fn a_freed_place_skips_a_waiter_that_could_not_be_done_by_its_deadline() {
    let (spillway, clock) = limited(1, 10);
    // A call that takes 80 ms: the limit's current latency.
    let slow = ready(spillway.entry("r").try_enter());
    clock.advance(Duration::from_millis(80));
    drop(slow);
    let running = ready(spillway.entry("r").try_enter());
    // 100 ms left, 80 expected: it may wait.
    let hurried = wait(spillway.entry("r").deadline(Duration::from_millis(100)));
    let patient = wait(spillway.entry("r"));
    // 30 ms later a place frees (the average falls to 73.75 ms): 70 ms left is too little.
    clock.advance(Duration::from_millis(30));
    drop(running);
    assert!(!hurried.is_granted() && patient.is_granted());
    assert_eq!(hurried.resume().unwrap_err().kind(), BlockKind::Deadline);
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.in_flight, state.expired), (1, [0, 0, 1, 0]));
    drop(ready(patient.resume()));
}

#[test]
fn a_caller_that_gives_up_at_its_deadline_is_refused_for_it() {
    let (spillway, clock) = limited(1, 10);
    let _running = ready(spillway.entry("r").try_enter());
    let waiting = wait(spillway.entry("r").deadline(Duration::from_millis(20)));
    // Its timer (as the tower layer sets it, to `timeout()`) fires: the deadline came.
    clock.advance(waiting.timeout());
    let err = waiting.give_up();
    assert_eq!(err.kind(), BlockKind::Deadline);
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.expired, state.queue_timeouts), ([0, 0, 1, 0], 0));
    // A caller whose own timer (the queue's timeout) fires first is refused by the limit.
    let waiting = wait(spillway.entry("r").deadline(Duration::from_secs(5)));
    clock.advance(waiting.timeout());
    assert_eq!(waiting.give_up().kind(), BlockKind::Adaptive);
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.queue_timeouts, state.refusals), (1, 2));
}

#[test]
fn racing_criticalities_and_tenants_never_pass_the_limit() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    const LIMIT: u32 = 3;
    let (spillway, _clock) = limited(LIMIT, 4);
    let held = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let (spillway, held, most) = (spillway.clone(), held.clone(), most.clone());
            std::thread::spawn(move || {
                let mut outcomes = [0u64; 2];
                for call in 0..2_000usize {
                    let criticality = Criticality::ALL[(call + thread) % 4];
                    let tenant = (call * 7 + thread) % 5;
                    let builder = spillway.entry("r").criticality(criticality).tenant(&tenant);
                    let entry = match builder.try_enter() {
                        Ok(Admission::Ready(entry)) => Some(entry),
                        Ok(Admission::Waiting(waiting)) => {
                            // Wait a little for a place, then resume or give up.
                            for _ in 0..50 {
                                if waiting.is_granted() {
                                    break;
                                }
                                std::thread::yield_now();
                            }
                            waiting.resume().ok().and_then(|admission| match admission {
                                Admission::Ready(entry) => Some(entry),
                                _ => None,
                            })
                        }
                        Ok(Admission::Queued(_)) => unreachable!("no pacing rule"),
                        Err(_) => None,
                    };
                    match entry {
                        Some(entry) => {
                            let now = held.fetch_add(1, Ordering::AcqRel) + 1;
                            most.fetch_max(now, Ordering::AcqRel);
                            std::thread::yield_now();
                            held.fetch_sub(1, Ordering::AcqRel);
                            drop(entry);
                            outcomes[0] += 1;
                        }
                        None => outcomes[1] += 1,
                    }
                }
                outcomes
            })
        })
        .collect();
    let mut admitted = 0;
    for thread in threads {
        admitted += thread.join().unwrap()[0];
    }
    assert!(admitted > u64::from(LIMIT), "{admitted}");
    assert!(
        most.load(Ordering::Acquire) <= LIMIT as usize,
        "the limit was passed"
    );
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!(
        (state.in_flight, state.waiting),
        (0, 0),
        "a place or a waiter was lost"
    );
}
