//! Model-checked rate limiter state (run with `RUSTFLAGS="--cfg spillway_loom"`): concurrent
//! reservations, a rate change and an undo on the optimistic schedule, under every interleaving
//! loom explores. Each outcome must equal one of the sequential orders.

use super::schedule::Schedule;
use super::smooth::Curve;
use loom::thread;
use std::sync::Arc;

const BURSTY: Curve = Curve::Bursty {
    max_burst_seconds: 1.0,
};

/// 4 permits a second: 250 ms each, and the clock stays at zero, so no permit is ever stored.
fn schedule() -> Arc<Schedule> {
    Arc::new(Schedule::new(BURSTY, 4.0))
}

fn reserve(schedule: &Schedule, permits: u32) -> i64 {
    schedule.update(|smooth| (smooth.reserve_earliest_available(permits, 0), true))
}

#[test]
fn loom_rate_limiter_reservations_are_totally_ordered() {
    loom::model(|| {
        let schedule = schedule();
        let other = {
            let schedule = schedule.clone();
            thread::spawn(move || reserve(&schedule, 2))
        };
        let mine = reserve(&schedule, 1);
        let theirs = other.join().unwrap();
        // Pay later: whoever went first got moment 0 and charged its permits to the other.
        let orders = [(0, 250_000), (500_000, 0)];
        assert!(orders.contains(&(mine, theirs)), "{mine} {theirs}");
        assert_eq!(schedule.next_free_micros(), 750_000);
        assert_eq!(schedule.snapshot().stored_permits, 0.0);
    });
}

#[test]
fn loom_rate_limiter_rate_change_is_atomic_with_reservations() {
    loom::model(|| {
        let schedule = schedule();
        let changer = {
            let schedule = schedule.clone();
            thread::spawn(move || schedule.set_rate(2.0, 0))
        };
        let first = reserve(&schedule, 1);
        let second = reserve(&schedule, 1);
        changer.join().unwrap();
        let state = schedule.snapshot();
        assert_eq!(first, 0);
        // The rate changed before both reservations (500 ms each), between them, or after.
        let outcomes = [(500_000, 1_000_000), (250_000, 750_000), (250_000, 500_000)];
        let outcome = (second, schedule.next_free_micros());
        assert!(outcomes.contains(&outcome), "{outcome:?}");
        assert_eq!(state.rate(), 2.0);
    });
}

#[test]
fn loom_rate_limiter_undo_only_when_last() {
    loom::model(|| {
        let schedule = schedule();
        let (moment, undo) = schedule.reserve_with_undo(1, 0);
        assert_eq!(moment, 0);
        let other = {
            let schedule = schedule.clone();
            thread::spawn(move || reserve(&schedule, 1))
        };
        let undone = schedule.undo(undo);
        let theirs = other.join().unwrap();
        if undone {
            // Undone first: the other reservation took moment 0 as if the first never was.
            assert_eq!((theirs, schedule.next_free_micros()), (0, 250_000));
        } else {
            // The other came after: the first stays, and the undo changed nothing.
            assert_eq!((theirs, schedule.next_free_micros()), (250_000, 500_000));
        }
    });
}

#[test]
fn loom_rate_limiter_a_reservation_within_a_timeout_sees_one_state() {
    loom::model(|| {
        let schedule = schedule();
        // Whoever goes first gets moment 0; the other would wait 250 ms, more than its 100 ms.
        let other = {
            let schedule = schedule.clone();
            thread::spawn(move || schedule.try_reserve_with_undo(1, 0, 100_000).map(|r| r.0))
        };
        let mine = schedule.try_reserve_with_undo(1, 0, 100_000).map(|r| r.0);
        let theirs = other.join().unwrap();
        assert!(
            [(Some(0), None), (None, Some(0))].contains(&(mine, theirs)),
            "{mine:?} {theirs:?}"
        );
        // The refused one wrote nothing: one reservation's worth is owed.
        assert_eq!(schedule.next_free_micros(), 250_000);
    });
}
