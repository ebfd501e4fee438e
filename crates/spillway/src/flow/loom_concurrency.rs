//! Model-checked check-and-count (run with `RUSTFLAGS="--cfg spillway_loom"`): the step every
//! exact concurrency limit (flow rules, Dubbo's `executes`) takes its places through.

use super::concurrency::try_increment;
use crate::sync::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// Three callers race for two places while one place is released: never more than two are
/// held, and the count ends at what the winners hold.
#[test]
fn never_more_than_the_limit_in_flight() {
    loom::model(|| {
        let in_flight = Arc::new(AtomicU64::new(1)); // one place already held
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let in_flight = in_flight.clone();
                thread::spawn(move || {
                    let got = try_increment(&in_flight, |current| current < 2).is_ok();
                    if got {
                        assert!(in_flight.load(Ordering::Acquire) <= 2);
                    }
                    got
                })
            })
            .collect();
        in_flight.fetch_sub(1, Ordering::AcqRel); // the held place is released
        let winners = callers
            .into_iter()
            .map(|c| c.join().unwrap())
            .filter(|&got| got)
            .count() as u64;
        assert!((1..=2).contains(&winners));
        assert_eq!(in_flight.load(Ordering::Acquire), winners);
    });
}
