//! Model-checked per-key concurrency (run with `RUSTFLAGS="--cfg spillway_loom"`): the sketch's
//! count-check-and-take-back never admits a key past its limit, however two callers interleave.

use super::sketch::{Cells, FlightSketch};
use loom::sync::Arc;
use loom::thread;

/// Two callers race for the key's one place while a third key shares none of its cells: at
/// most one is admitted, and once the winner leaves, the key holds nothing.
#[test]
fn never_more_than_the_limit_in_flight_for_a_key() {
    loom::model(|| {
        let sketch = Arc::new(FlightSketch::new(2));
        let key = Cells::of(0x0123_4567_89ab_cdef, 2);
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let sketch = sketch.clone();
                thread::spawn(move || {
                    let got = sketch.try_enter(key, 1);
                    if got {
                        assert!(sketch.in_flight(key) >= 1);
                    }
                    got
                })
            })
            .collect();
        let winners: Vec<bool> = callers.into_iter().map(|c| c.join().unwrap()).collect();
        assert!(
            winners.iter().filter(|&&got| got).count() <= 1,
            "{winners:?}"
        );
        for _ in winners.iter().filter(|&&got| got) {
            sketch.exit(key);
        }
        assert_eq!(sketch.in_flight(key), 0);
    });
}
