//! Model-checked adaptive limiter (run with `RUSTFLAGS="--cfg spillway_loom"`): admissions race
//! each other, releases and the limit changes those releases make.

use super::{AdaptiveLimiter, LimitAlgorithm, LimitUpdate, Outcome, RttEstimates, Sample};
use crate::sync::{AtomicU64, Ordering};
use crate::ManualClock;
use loom::sync::Arc;
use loom::thread;

/// Lowers the limit to 1 on the first sample and raises it to 2 on the next, and so on.
#[derive(Debug)]
struct Seesaw {
    samples: u32,
}

impl LimitAlgorithm for Seesaw {
    fn initial_limit(&self) -> u32 {
        2
    }

    fn on_sample(&mut self, _: &Sample, _: u64, _: u32) -> Option<LimitUpdate> {
        self.samples += 1;
        let limit = if self.samples % 2 == 1 { 1 } else { 2 };
        Some(LimitUpdate::new(limit, super::ChangeReason::Grew))
    }

    fn estimates(&self) -> RttEstimates {
        RttEstimates::default()
    }
}

/// Two callers and the main thread race through admissions and releases while each release
/// moves the limit between 1 and 2: the calls held never exceed the largest limit (2), no
/// admission is made above the limit it saw, every release's sample reaches the algorithm, and
/// the count ends at 0 with the limit where the last sample put it.
#[test]
fn admissions_never_pass_the_limit_and_no_sample_is_lost() {
    loom::model(|| {
        let limiter = Arc::new(AdaptiveLimiter::with_clock(
            Seesaw { samples: 0 },
            ManualClock::new(),
        ));
        let held = Arc::new(AtomicU64::new(0));
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let (limiter, held) = (limiter.clone(), held.clone());
                thread::spawn(move || {
                    let Ok(ticket) = limiter.admit() else {
                        return 0;
                    };
                    assert!(ticket.in_flight() <= ticket.limit());
                    assert!(held.fetch_add(1, Ordering::AcqRel) < 2);
                    held.fetch_sub(1, Ordering::AcqRel);
                    limiter.release(ticket, Outcome::Success);
                    1
                })
            })
            .collect();
        let mine = limiter.admit().ok();
        let mine_admitted = mine.is_some();
        if let Some(ticket) = mine {
            assert!(held.fetch_add(1, Ordering::AcqRel) < 2);
            held.fetch_sub(1, Ordering::AcqRel);
            limiter.release(ticket, Outcome::Success);
        }
        let admitted: u64 =
            callers.into_iter().map(|c| c.join().unwrap()).sum::<u64>() + u64::from(mine_admitted);
        let state = limiter.state();
        assert_eq!(state.in_flight, 0);
        assert_eq!(state.samples, admitted, "a sample was lost");
        assert_eq!(state.limit, if admitted % 2 == 1 { 1 } else { 2 });
    });
}

/// Never moves the limit.
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

fn queued(limit: u32) -> AdaptiveLimiter {
    AdaptiveLimiter::with_clock(Fixed(limit), ManualClock::new())
        .with_queue(Some(super::AdaptiveQueue::default()))
}

/// A caller joins the queue of a full limit of 1 while the only call in flight ends: whatever
/// the interleaving, the freed place is not lost. The caller either takes it at once or is
/// handed it in the queue, and the count ends at 0 once it leaves.
#[test]
fn a_place_freed_while_a_caller_joins_the_queue_is_handed_over() {
    loom::model(|| {
        let limiter = Arc::new(queued(1));
        limiter
            .take_place(false, &super::Claim::default())
            .expect("the first place");
        let joining = {
            let limiter = limiter.clone();
            thread::spawn(
                move || match limiter.take_place(true, &super::Claim::default()) {
                    // Took the freed place, or waits in the queue (handed it, now or later).
                    Ok(()) | Err(super::NoPlace::Waiting(_)) => {}
                    Err(
                        super::NoPlace::Refused(_)
                        | super::NoPlace::Expired(_)
                        | super::NoPlace::Full(_),
                    ) => {
                        panic!("the queue had room, and no deadline")
                    }
                },
            )
        };
        limiter.end_place(0, Outcome::Ignore);
        joining.join().unwrap();
        let state = limiter.state();
        assert_eq!(
            (state.in_flight, state.waiting),
            (1, 0),
            "the place was lost"
        );
        limiter.end_place(0, Outcome::Ignore);
        assert_eq!(limiter.state().in_flight, 0);
    });
}

/// A waiting caller gives up while the call in flight ends and hands it the place: the place
/// ends either with nobody (the caller left first) or passed back (it was handed the place,
/// then left), never held by no one, never twice.
#[test]
fn a_caller_leaving_while_it_is_handed_a_place_gives_the_place_back() {
    loom::model(|| {
        let limiter = Arc::new(queued(1));
        limiter
            .take_place(false, &super::Claim::default())
            .expect("the first place");
        let Err(super::NoPlace::Waiting(slot)) = limiter.take_place(true, &super::Claim::default())
        else {
            panic!("the limit of 1 is full");
        };
        let leaving = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                limiter.stop_waiting(&slot, true);
            })
        };
        limiter.end_place(0, Outcome::Ignore);
        leaving.join().unwrap();
        let state = limiter.state();
        assert_eq!((state.in_flight, state.waiting), (0, 0));
        assert_eq!((state.queue_timeouts, state.refusals), (1, 1));
    });
}

/// A critical caller joins a full queue (room for one) and takes the place of its sheddable
/// waiter while the call in flight ends and hands its place over: whatever the interleaving,
/// the freed place goes to exactly one of them, the sheddable caller is either granted or
/// refused (never both, never neither), and nothing is held once both leave.
#[test]
fn a_caller_taking_a_waiters_place_races_the_hand_over() {
    use super::wait_slot::Shed;
    use super::{Claim, NoPlace};
    use crate::Criticality;
    loom::model(|| {
        let queue = super::AdaptiveQueue {
            capacity: 1,
            ..super::AdaptiveQueue::default()
        };
        let limiter = Arc::new(
            AdaptiveLimiter::with_clock(Fixed(1), ManualClock::new()).with_queue(Some(queue)),
        );
        limiter
            .take_place(false, &Claim::default())
            .expect("the first place");
        let sheddable = Claim {
            criticality: Criticality::Sheddable,
            ..Claim::default()
        };
        let Err(NoPlace::Waiting(shed)) = limiter.take_place(true, &sheddable) else {
            panic!("the limit of 1 is full");
        };
        let joining = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                let urgent = Claim {
                    criticality: Criticality::CriticalPlus,
                    ..Claim::default()
                };
                match limiter.take_place(true, &urgent) {
                    Err(NoPlace::Waiting(slot)) => slot,
                    _ => panic!("a critical caller waits: the sheddable one gives way"),
                }
            })
        };
        limiter.end_place(0, Outcome::Ignore);
        let urgent = joining.join().unwrap();
        let evicted = shed.shed() == Some(Shed::Evicted);
        assert!(shed.is_granted() != evicted, "granted or refused, once");
        assert_eq!(
            urgent.is_granted(),
            evicted,
            "the place went to one of them"
        );
        assert_eq!(limiter.state().in_flight, 1, "one place, held once");
        for slot in [&shed, &urgent] {
            limiter.stop_waiting(slot, false);
        }
        let state = limiter.state();
        assert_eq!((state.in_flight, state.waiting), (0, 0));
        assert_eq!(state.evicted, [u64::from(evicted), 0, 0, 0]);
    });
}

/// Records the start of each sample it is fed (under the limiter's lock), and says no sample
/// can move the limit: every release is held in its thread's buffer until it is full.
#[derive(Debug)]
struct Recorder(Arc<std::sync::Mutex<Vec<u64>>>);

impl LimitAlgorithm for Recorder {
    fn initial_limit(&self) -> u32 {
        4
    }

    fn on_sample(&mut self, sample: &Sample, _: u64, _: u32) -> Option<LimitUpdate> {
        self.0.lock().unwrap().push(sample.started_nanos);
        None
    }

    fn estimates(&self) -> RttEstimates {
        RttEstimates::default()
    }

    fn quiet(&self, _: u32) -> super::Quiet {
        super::Quiet::until(u64::MAX)
    }
}

/// Two threads end three calls each while no sample can move the limit: two wait in each
/// thread's buffer (it holds two under loom) and the third, finding it full, feeds the
/// algorithm under the lock, with whatever the other thread holds. However they interleave,
/// reading the state feeds the rest: every sample reaches the algorithm once, and each
/// thread's in the order it ended them.
#[test]
fn held_samples_all_reach_the_algorithm_each_threads_in_order() {
    loom::model(|| {
        let fed = Arc::new(std::sync::Mutex::new(Vec::new()));
        let limiter = Arc::new(AdaptiveLimiter::with_clock(
            Recorder(fed.clone()),
            ManualClock::new(),
        ));
        let callers: Vec<_> = [10, 20]
            .into_iter()
            .map(|tag| {
                let limiter = limiter.clone();
                thread::spawn(move || {
                    for call in 0..3 {
                        limiter
                            .take_place(false, &super::Claim::default())
                            .expect("a limit of 4, at most 2 in flight");
                        limiter.end_place(tag + call, Outcome::Success);
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.join().unwrap();
        }
        let state = limiter.state();
        assert_eq!((state.in_flight, state.samples), (0, 6));
        let fed = fed.lock().unwrap().clone();
        for tag in [10, 20] {
            let mine: Vec<u64> = fed.iter().copied().filter(|t| t / 10 == tag / 10).collect();
            assert_eq!(mine, vec![tag, tag + 1, tag + 2], "fed {fed:?}");
        }
    });
}
