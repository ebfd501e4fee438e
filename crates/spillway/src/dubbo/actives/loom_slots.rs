//! Model-checked actives queue (run with `RUSTFLAGS="--cfg spillway_loom"`): hand-offs, leaving
//! the queue and the lock-free paths, under every interleaving loom explores.

use super::slots::{Slots, Take, Waiter};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

/// Waits (parking the loom thread) until a slot is handed to `waiter`.
fn wait_for_grant(waiter: &Waiter) {
    loom::future::block_on(poll_fn(|cx| {
        if waiter.register(cx.waker()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }));
}

/// Takes a slot under `max`, waiting in the queue if needed.
fn take(slots: &Slots, max: u32) {
    match slots.take_or_queue(max, 8) {
        Take::Taken => {}
        Take::Queued(waiter) => wait_for_grant(&waiter),
        Take::QueueFull(_) => unreachable!("the queue holds 8"),
    }
}

#[test]
fn a_release_reaches_a_waiter_that_is_joining() {
    loom::model(|| {
        let slots = Arc::new(Slots::new());
        assert!(slots.try_take(1).is_ok());
        let releaser = {
            let slots = slots.clone();
            thread::spawn(move || slots.release())
        };
        // Races the release: either takes the freed slot or is handed it; never stuck.
        take(&slots, 1);
        releaser.join().unwrap();
        assert_eq!((slots.in_flight(), slots.waiters()), (1, 0));
        slots.release();
        assert_eq!(slots.in_flight(), 0);
    });
}

#[test]
fn never_more_than_max_in_flight() {
    loom::model(|| {
        let slots = Arc::new(Slots::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (slots, inside) = (slots.clone(), inside.clone());
                thread::spawn(move || {
                    take(&slots, 1);
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two in flight");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    slots.release();
                })
            })
            .collect();
        for handle in threads {
            handle.join().unwrap();
        }
        assert_eq!((slots.in_flight(), slots.waiters()), (0, 0));
    });
}

#[test]
fn a_leaving_waiter_never_swallows_a_grant() {
    loom::model(|| {
        let slots = Arc::new(Slots::new());
        assert!(slots.try_take(1).is_ok());
        let Take::Queued(leaver) = slots.take_or_queue(1, 8) else {
            unreachable!("the only slot is held")
        };
        let Take::Queued(stayer) = slots.take_or_queue(1, 8) else {
            unreachable!("the only slot is held")
        };
        let releaser = {
            let slots = slots.clone();
            thread::spawn(move || slots.release())
        };
        let canceller = {
            let slots = slots.clone();
            thread::spawn(move || {
                // Dropping a wait: a slot granted before it left is passed on.
                if slots.cancel(&leaver) {
                    slots.release();
                }
            })
        };
        // Whatever the order, the slot reaches the waiter that stayed.
        wait_for_grant(&stayer);
        releaser.join().unwrap();
        canceller.join().unwrap();
        assert_eq!((slots.in_flight(), slots.waiters()), (1, 0));
    });
}
