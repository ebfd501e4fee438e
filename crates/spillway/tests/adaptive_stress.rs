//! Eight threads through one adaptive limiter: the calls held never exceed the limit, and no
//! sample is lost, whether the limit stays or moves under them.

use spillway::adaptive::{
    AdaptiveLimiter, Aimd, AimdConfig, ChangeReason, LimitAlgorithm, LimitUpdate, Outcome,
    RttEstimates, Sample,
};
use spillway::ManualClock;
use std::sync::atomic::{AtomicU64, Ordering};

const THREADS: u64 = 8;
const PER_THREAD: u64 = 20_000;

/// A limit that never moves.
#[derive(Debug)]
struct Fixed(u32);

impl LimitAlgorithm for Fixed {
    fn initial_limit(&self) -> u32 {
        self.0
    }

    fn on_sample(&mut self, _: &Sample, _: u64, _: u32) -> Option<LimitUpdate> {
        None
    }

    fn estimates(&self) -> RttEstimates {
        RttEstimates::default()
    }
}

/// Runs the threads: each admits and releases `PER_THREAD` times, dropping one call in
/// `drop_every` (0: none), and counts the calls it holds in `held`. Returns the most held at
/// once and the admissions (each released once, as a sample).
fn hammer(limiter: &AdaptiveLimiter, drop_every: u64) -> (u64, u64) {
    let held = AtomicU64::new(0);
    let most = AtomicU64::new(0);
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let (held, most, admitted) = (&held, &most, &admitted);
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    let Ok(ticket) = limiter.admit() else {
                        continue;
                    };
                    assert!(
                        ticket.in_flight() <= ticket.limit(),
                        "admitted over the limit"
                    );
                    admitted.fetch_add(1, Ordering::Relaxed);
                    let now = held.fetch_add(1, Ordering::AcqRel) + 1;
                    most.fetch_max(now, Ordering::Relaxed);
                    held.fetch_sub(1, Ordering::AcqRel);
                    let dropped = drop_every > 0 && (i + thread) % drop_every == 0;
                    let outcome = if dropped {
                        Outcome::Dropped
                    } else {
                        Outcome::Success
                    };
                    limiter.release(ticket, outcome);
                }
            });
        }
    });
    (
        most.load(Ordering::Relaxed),
        admitted.load(Ordering::Relaxed),
    )
}

#[test]
fn a_fixed_limit_is_never_exceeded_by_eight_threads() {
    let limiter = AdaptiveLimiter::with_clock(Fixed(3), ManualClock::new());
    let (most, admitted) = hammer(&limiter, 0);
    assert!(most <= 3, "{most} calls held at once under a limit of 3");
    let state = limiter.state();
    assert_eq!(state.in_flight, 0);
    assert_eq!(state.samples, admitted, "samples lost");
    assert_eq!(admitted + state.refusals, THREADS * PER_THREAD);
}

#[test]
fn a_moving_limit_stays_within_its_bounds_and_loses_no_sample() {
    let aimd = Aimd::new(AimdConfig {
        initial_limit: 4,
        min_limit: 2,
        max_limit: 6,
        ..AimdConfig::default()
    })
    .unwrap();
    let limiter = AdaptiveLimiter::with_clock(aimd, ManualClock::new());
    let (most, admitted) = hammer(&limiter, 7);
    assert!(
        most <= 6,
        "{most} calls held at once under a limit of at most 6"
    );
    let state = limiter.state();
    assert_eq!(state.in_flight, 0);
    assert_eq!(state.samples, admitted, "samples lost");
    assert!(state.updates > 0, "the limit moved");
    assert!(matches!(
        state.last_change,
        ChangeReason::Grew | ChangeReason::Dropped
    ));
    assert!((2..=6).contains(&state.limit));
}

/// Eight threads through a resource with an adaptive limit of 3 and a queue: each waits for a
/// place (spinning on its grant, giving up after a while) or takes one at once. The entries
/// held never exceed 3, every wait ends granted-and-resumed, given up, or dropped, and the
/// limiter ends with nothing in flight and nobody waiting.
#[test]
fn waiting_entries_never_pass_the_limit_and_the_queue_empties() {
    use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule};
    use spillway::{Admission, Spillway};

    const LIMIT: u64 = 3;
    let spillway = Spillway::new_with_clock(ManualClock::new());
    let aimd = AimdConfig {
        initial_limit: LIMIT as u32,
        min_limit: LIMIT as u32,
        max_limit: LIMIT as u32,
        ..AimdConfig::default()
    };
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "r-adaptive",
            "r",
            AdaptiveAlgorithm::Aimd(aimd),
        )
        .with_queue(AdaptiveQueue {
            capacity: 4,
            ..AdaptiveQueue::default()
        })])
        .unwrap();
    let held = AtomicU64::new(0);
    let most = AtomicU64::new(0);
    let (entered, gave_up, dropped) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let (spillway, held, most) = (&spillway, &held, &most);
            let (entered, gave_up, dropped) = (&entered, &gave_up, &dropped);
            s.spawn(move || {
                for i in 0..PER_THREAD / 4 {
                    let entry = match spillway.entry("r").try_enter() {
                        Ok(Admission::Ready(entry)) => entry,
                        Ok(Admission::Waiting(waiting)) => {
                            let mut spins = 0;
                            while !waiting.is_granted() && spins < 200 {
                                std::thread::yield_now();
                                spins += 1;
                            }
                            match (waiting.is_granted(), (i + thread) % 5) {
                                // Sometimes a caller goes away, granted or not.
                                (_, 0) => {
                                    drop(waiting);
                                    dropped.fetch_add(1, Ordering::Relaxed);
                                    continue;
                                }
                                (true, _) => match waiting.resume() {
                                    Ok(Admission::Ready(entry)) => entry,
                                    other => panic!("granted, then {other:?}"),
                                },
                                (false, _) => {
                                    waiting.give_up();
                                    gave_up.fetch_add(1, Ordering::Relaxed);
                                    continue;
                                }
                            }
                        }
                        Ok(Admission::Queued(_)) => panic!("no pacing rule"),
                        Err(_) => continue,
                    };
                    entered.fetch_add(1, Ordering::Relaxed);
                    let now = held.fetch_add(1, Ordering::AcqRel) + 1;
                    most.fetch_max(now, Ordering::Relaxed);
                    std::thread::yield_now();
                    held.fetch_sub(1, Ordering::AcqRel);
                    drop(entry);
                }
            });
        }
    });
    let most = most.load(Ordering::Relaxed);
    assert!(
        most <= LIMIT,
        "{most} held at once, over the limit of {LIMIT}"
    );
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.in_flight, state.waiting), (0, 0));
    assert_eq!(state.queue_timeouts, gave_up.load(Ordering::Relaxed));
    let entered = entered.load(Ordering::Relaxed);
    assert!(
        entered > 0 && state.samples == entered,
        "{state:?}, {entered} entered"
    );
    let stats = spillway.resource("r").unwrap().stats();
    assert_eq!(stats.total_pass, entered);
    // Every attempt ended one way: entered, gave up, went away, or refused at once.
    let refused_at_once = state.refusals - state.queue_timeouts;
    let ended = entered
        + gave_up.load(Ordering::Relaxed)
        + dropped.load(Ordering::Relaxed)
        + refused_at_once;
    assert_eq!(ended, THREADS * (PER_THREAD / 4));
}
