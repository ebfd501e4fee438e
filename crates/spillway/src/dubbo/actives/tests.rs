//! Actives traces on a manual clock, the queue's order and hand-offs polled by hand, and threads
//! that block for real slots (never for time).

use super::*;
use crate::{BlockKind, ManualClock};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering as StdOrdering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;

const SECOND: Duration = Duration::from_secs(1);

fn limiter() -> (ActiveLimiter, ManualClock) {
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    (ActiveLimiter::new_with_clock(clock.clone()), clock)
}

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, StdOrdering::SeqCst);
    }
}

/// A queued caller, polled by hand with its own counting waker.
struct Polled {
    wait: ActiveWait,
    wakes: Arc<Wakes>,
}

impl Polled {
    fn queue(key: &ActiveKey, max: u32) -> Self {
        match key.acquire_or_queue(max, SECOND).unwrap() {
            ActiveAdmission::Queued(wait) => {
                let mut polled = Self {
                    wait,
                    wakes: Arc::default(),
                };
                assert!(polled.poll().is_none(), "a fresh waiter is pending");
                polled
            }
            ActiveAdmission::Ready(_) => panic!("expected to queue"),
        }
    }

    fn poll(&mut self) -> Option<ActivePermit> {
        let waker = Waker::from(self.wakes.clone());
        match Pin::new(&mut self.wait).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(permit) => Some(permit),
            Poll::Pending => None,
        }
    }

    fn wakes(&self) -> usize {
        self.wakes.0.load(StdOrdering::SeqCst)
    }
}

fn state(key: &ActiveKey) -> (u32, u32) {
    let state = key.state();
    (state.in_flight, state.waiters)
}

#[test]
fn refuses_at_the_limit_and_zero_is_unlimited() {
    let (actives, _) = limiter();
    let key = actives.key("s.m").unwrap();
    let first = key.try_acquire(2).unwrap();
    let second = key.try_acquire(2).unwrap();
    let err = key.try_acquire(2).unwrap_err();
    assert_eq!(err.kind(), BlockKind::Actives);
    assert_eq!(
        (err.observed(), err.threshold(), err.waited()),
        (2.0, 2.0, None)
    );
    let unlimited: Vec<_> = (0..5).map(|_| key.try_acquire(0).unwrap()).collect();
    assert_eq!(state(&key), (7, 0));
    drop((first, second, unlimited));
    assert_eq!(state(&key), (0, 0));
}

#[test]
fn blocking_acquire_waits_its_timeout_on_the_clock_and_says_so() {
    let (actives, clock) = limiter();
    let held = actives.acquire("s.m", 1, SECOND).unwrap();
    let before = clock.now_nanos();
    let err = actives
        .acquire("s.m", 1, Duration::from_millis(1_500))
        .unwrap_err();
    assert_eq!(clock.now_nanos() - before, 1_500_000_000);
    assert_eq!(err.kind(), BlockKind::Actives);
    assert_eq!(err.waited(), Some(Duration::from_millis(1_500)));
    assert_eq!((err.observed(), err.threshold()), (1.0, 1.0));
    assert_eq!(
        err.to_string(),
        "s.m blocked by actives: observed 1 against threshold 1 after waiting 1.5s"
    );
    // The waiter left the queue.
    assert_eq!(actives.state("s.m").map(|s| s.waiters), Some(0));
    drop(held);
    assert!(actives.acquire("s.m", 1, SECOND).is_ok());
}

#[test]
fn zero_timeout_refuses_at_once_without_queueing() {
    let (actives, clock) = limiter();
    let key = actives.key("s.m").unwrap();
    let _held = key.try_acquire(1).unwrap();
    let before = clock.now_nanos();
    let err = key.acquire(1, Duration::ZERO).unwrap_err();
    assert_eq!(clock.now_nanos(), before);
    assert_eq!(
        (err.kind(), err.waited()),
        (BlockKind::Actives, Some(Duration::ZERO))
    );
    assert_eq!(state(&key), (1, 0));
}

#[test]
fn released_slots_go_to_the_oldest_waiter_first() {
    let (actives, _) = limiter();
    let key = actives.key("s.m").unwrap();
    let held = key.try_acquire(1).unwrap();
    let mut waiters: Vec<Polled> = (0..3).map(|_| Polled::queue(&key, 1)).collect();
    assert_eq!(state(&key), (1, 3));

    drop(held);
    assert_eq!(state(&key), (1, 2), "handed over, never freed");
    assert_eq!(
        waiters.iter().map(Polled::wakes).collect::<Vec<_>>(),
        [1, 0, 0]
    );
    assert!(
        key.try_acquire(5).is_err(),
        "a newcomer never passes waiters"
    );
    let first = waiters[0].poll().expect("the oldest is served");
    assert!(waiters[1].poll().is_none() && waiters[2].poll().is_none());

    drop(first);
    let second = waiters[1].poll().expect("then the next");
    assert_eq!(waiters[2].wakes(), 0);
    drop(second);
    let third = waiters[2].poll().expect("then the last");
    assert_eq!(state(&key), (1, 0));
    drop(third);
    assert_eq!(state(&key), (0, 0));
}

#[test]
fn a_dropped_waiter_leaves_and_a_dropped_grant_passes_on() {
    let (actives, _) = limiter();
    let key = actives.key("s.m").unwrap();
    let held = key.try_acquire(1).unwrap();
    let a = Polled::queue(&key, 1);
    let b = Polled::queue(&key, 1);
    let mut c = Polled::queue(&key, 1);

    drop(b); // cancelled while waiting: leaves, wakes nobody
    assert_eq!(state(&key), (1, 2));
    assert_eq!((a.wakes(), c.wakes()), (0, 0));

    drop(held); // granted to `a`...
    assert_eq!(a.wakes(), 1);
    drop(a); // ...which is dropped before it looks: the slot goes on to `c`
    assert_eq!(c.wakes(), 1);
    let permit = c.poll().expect("the grant was passed on, not lost");
    assert_eq!(state(&key), (1, 0));
    drop(permit);
    assert_eq!(state(&key), (0, 0));
}

#[test]
fn giving_up_after_a_grant_keeps_the_slot() {
    let (actives, clock) = limiter();
    let key = actives.key("s.m").unwrap();
    let held = key.try_acquire(1).unwrap();
    let waiter = Polled::queue(&key, 1);
    clock.advance(SECOND); // the deadline passes...
    assert_eq!(waiter.wait.remaining(), Duration::ZERO);
    drop(held); // ...and the grant arrives before the timer fires
    let permit = waiter
        .wait
        .give_up()
        .expect("a granted slot is returned, not lost");
    assert_eq!(state(&key), (1, 0));
    drop(permit);
    assert_eq!(state(&key), (0, 0));
}

#[test]
fn giving_up_reports_the_time_waited() {
    let (actives, clock) = limiter();
    let key = actives.key("s.m").unwrap();
    let _held = key.try_acquire(1).unwrap();
    let waiter = Polled::queue(&key, 1);
    clock.advance(Duration::from_millis(250));
    assert_eq!(waiter.wait.waited(), Duration::from_millis(250));
    assert_eq!(waiter.wait.remaining(), Duration::from_millis(750));
    clock.advance(Duration::from_millis(750));
    let err = waiter.wait.give_up().unwrap_err();
    assert_eq!(err.waited(), Some(SECOND));
    assert_eq!(state(&key), (1, 0));
}

#[test]
fn the_queue_is_bounded() {
    let clock = ManualClock::new();
    let actives = ActiveLimiter::builder()
        .clock(clock.clone())
        .max_waiters(2)
        .build();
    let key = actives.key("s.m").unwrap();
    let _held = key.try_acquire(1).unwrap();
    let _a = Polled::queue(&key, 1);
    let _b = Polled::queue(&key, 1);
    let err = key.acquire_or_queue(1, SECOND).unwrap_err();
    assert_eq!(err.kind(), BlockKind::ActivesQueueFull);
    assert_eq!((err.observed(), err.threshold()), (2.0, 2.0));
    assert_eq!(state(&key), (1, 2));

    let nobody_waits = ActiveLimiter::builder().clock(clock).max_waiters(0).build();
    let _held = nobody_waits.try_acquire("s.m", 1).unwrap();
    let err = nobody_waits.acquire("s.m", 1, SECOND).unwrap_err();
    assert_eq!(err.kind(), BlockKind::ActivesQueueFull);
}

#[test]
fn waiters_keep_their_order_across_different_limits() {
    let (actives, _) = limiter();
    let key = actives.key("s.m").unwrap();
    let held: Vec<_> = (0..2).map(|_| key.try_acquire(3).unwrap()).collect();
    // The oldest waiter allows 1 in flight; the younger ones would fit under 3 but never pass it.
    let narrow = Polled::queue(&key, 1);
    let mut wide_a = Polled::queue(&key, 3);
    let mut wide_b = Polled::queue(&key, 3);
    assert_eq!(state(&key), (2, 3));

    drop(narrow); // the head leaves: both younger waiters now fit (2 -> 3, then full)
    assert_eq!((wide_a.wakes(), wide_b.wakes()), (1, 0));
    let _a = wide_a.poll().expect("granted");
    assert!(wide_b.poll().is_none());
    assert_eq!(state(&key), (3, 1));
    drop(held);
    assert!(wide_b.poll().is_some());
}

#[test]
fn a_narrow_head_is_served_only_below_its_own_limit() {
    let (actives, _) = limiter();
    let key = actives.key("s.m").unwrap();
    let mut held: Vec<_> = (0..3).map(|_| key.try_acquire(3).unwrap()).collect();
    let mut narrow = Polled::queue(&key, 2);
    held.pop();
    assert_eq!(
        (narrow.wakes(), state(&key)),
        (0, (2, 1)),
        "2 in flight: not below 2"
    );
    held.pop();
    assert_eq!(narrow.wakes(), 1);
    assert!(narrow.poll().is_some());
}

#[test]
fn key_cap_evicts_only_keys_nobody_holds() {
    let actives = ActiveLimiter::builder().max_keys(1).build();
    let held = actives.try_acquire("a", 1).unwrap();
    let err = actives.try_acquire("b", 1).unwrap_err();
    assert_eq!((err.kind(), err.resource()), (BlockKind::Actives, "b"));
    assert_eq!(actives.key_overflows(), 1);
    drop(held);
    assert!(actives.try_acquire("b", 1).is_ok());
    assert_eq!(actives.state("a"), None);
}

/// Waits (with yields, never sleeps) until `key` has `waiters` waiters.
fn until_waiters(key: &ActiveKey, waiters: u32) {
    while key.state().waiters != waiters {
        thread::yield_now();
    }
}

#[test]
fn blocked_threads_are_served_in_arrival_order() {
    let actives = ActiveLimiter::new();
    let key = actives.key("s.m").unwrap();
    let held = key.try_acquire(1).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let (mine, order) = (key.clone(), order.clone());
            let handle = thread::spawn(move || {
                let permit = mine.acquire(1, Duration::from_secs(600)).unwrap();
                order.lock().unwrap().push(i);
                drop(permit); // hands the slot to the next in line
            });
            until_waiters(&key, i + 1);
            handle
        })
        .collect();
    drop(held);
    for handle in threads {
        handle.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<_>>());
    assert_eq!(state(&key), (0, 0));
}

#[test]
fn stress_never_exceeds_the_limit() {
    const MAX: u32 = 3;
    let actives = Arc::new(ActiveLimiter::builder().max_waiters(4).build());
    let inside = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (actives, inside, peak) = (actives.clone(), inside.clone(), peak.clone());
            thread::spawn(move || {
                for i in 0..2_000u32 {
                    let permit = match (t + i) % 4 {
                        0 => actives.try_acquire("s.m", MAX).ok(),
                        1 => actives.acquire("s.m", MAX, Duration::ZERO).ok(),
                        // Queue and leave again at once: exercises cancellation under load.
                        2 => match actives.acquire_or_queue("s.m", MAX, SECOND) {
                            Ok(ActiveAdmission::Ready(permit)) => Some(permit),
                            Ok(ActiveAdmission::Queued(wait)) => wait.give_up().ok(),
                            Err(_) => None,
                        },
                        _ => actives.acquire("s.m", MAX, Duration::from_secs(600)).ok(),
                    };
                    if let Some(permit) = permit {
                        let now = inside.fetch_add(1, StdOrdering::SeqCst) + 1;
                        peak.fetch_max(now, StdOrdering::SeqCst);
                        assert!(now <= MAX, "{now} in flight over a limit of {MAX}");
                        thread::yield_now();
                        inside.fetch_sub(1, StdOrdering::SeqCst);
                        drop(permit);
                    }
                }
            })
        })
        .collect();
    for handle in threads {
        handle.join().unwrap();
    }
    assert!(peak.load(StdOrdering::SeqCst) >= 1);
    let state = actives.state("s.m").unwrap();
    assert_eq!((state.in_flight, state.waiters), (0, 0));
}
