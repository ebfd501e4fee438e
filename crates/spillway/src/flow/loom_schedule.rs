//! Model-checked pacing schedule (run with `RUSTFLAGS="--cfg spillway_loom"`).

use super::schedule::Schedule;
use super::Decision;
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

const NOW: u64 = 1_700_000_000_000_000_000;
const COST: u64 = 100_000_000;

/// Three callers at one instant against a queue that holds one cost: one passes, one waits one
/// cost, one is refused, whatever the interleaving; no slot is shared.
#[test]
fn concurrent_reservations_take_distinct_slots() {
    loom::model(|| {
        let schedule = Arc::new(Schedule::new(Duration::from_nanos(COST)));
        let others: Vec<_> = (0..2)
            .map(|_| {
                let schedule = schedule.clone();
                thread::spawn(move || schedule.reserve(NOW, COST).0)
            })
            .collect();
        let mut decisions = vec![schedule.reserve(NOW, COST).0];
        decisions.extend(others.into_iter().map(|t| t.join().unwrap()));
        decisions.sort_by_key(|d| match d {
            Decision::Pass => 0,
            Decision::Wait(_) | Decision::Occupied(_) => 1,
            Decision::Block => 2,
        });
        assert_eq!(
            decisions,
            [
                Decision::Pass,
                Decision::Wait(Duration::from_nanos(COST)),
                Decision::Block
            ]
        );
    });
}

/// A waiter giving its slot back races a new caller: the new caller either gets the given-back
/// slot or queues behind it, never before the first pass's slot plus one cost.
#[test]
fn cancel_races_a_reservation() {
    loom::model(|| {
        let schedule = Arc::new(Schedule::new(Duration::from_nanos(3 * COST)));
        assert_eq!(schedule.reserve(NOW, COST).0, Decision::Pass);
        let (_, slot) = schedule.reserve(NOW, COST);
        let slot = slot.unwrap();
        let canceller = {
            let schedule = schedule.clone();
            thread::spawn(move || schedule.cancel(slot))
        };
        let (decision, _) = schedule.reserve(NOW, COST);
        let cancelled = canceller.join().unwrap();
        let wait = match decision {
            Decision::Wait(wait) => wait.as_nanos() as u64,
            other => panic!("unexpected {other:?}"),
        };
        if cancelled {
            // The cancel won: the new caller took the freed slot.
            assert_eq!(wait, COST);
        } else {
            // The new caller queued behind the slot first, so it could not be given back.
            assert_eq!(wait, 2 * COST);
        }
    });
}
