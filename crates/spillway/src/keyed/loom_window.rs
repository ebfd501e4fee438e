//! Model-checked conservative update (run with `RUSTFLAGS="--cfg spillway_loom"`): two keys that
//! share cells add to a window sketch at once, each from its own thread (the limiter adds to one
//! key under that key's set's lock, so adds of the same key never race), and neither key's count
//! ever reads below what was added for it.

use super::sketch::{Cells, WindowSketch};
use loom::sync::Arc;
use loom::thread;

/// Four columns a row: the model's keys share two cells and not the other two.
const WIDTH: usize = 4;

#[test]
fn racing_adds_of_two_keys_never_count_either_below_its_truth() {
    let (a, b) = (
        Cells::of(0x0123_4567_89ab_cdef, WIDTH),
        Cells::of(0x2545_f491_4f6c_dd1f, WIDTH),
    );
    loom::model(move || {
        let sketch = Arc::new(WindowSketch::new(WIDTH));
        // `a` already counts one, in the window before: the add reads it as the previous count.
        sketch.add(a, 6, 1);
        let other = {
            let sketch = sketch.clone();
            thread::spawn(move || {
                sketch.add(b, 7, 2);
                assert!(sketch.counts(b, 7).0 >= 2);
            })
        };
        sketch.add(a, 7, 1);
        sketch.add_previous(a, 7, 1);
        assert!(sketch.counts(a, 7).0 >= 1);
        other.join().unwrap();
        let (now, before) = sketch.counts(a, 7);
        assert!(now >= 1 && before >= 2, "a: ({now}, {before})");
        assert!(sketch.counts(b, 7).0 >= 2);
    });
}

/// The two keys share at least one cell and not all of them (else the model proves less).
#[test]
fn the_model_s_keys_share_some_cells() {
    let (a, b) = (
        Cells::of(0x0123_4567_89ab_cdef, WIDTH),
        Cells::of(0x2545_f491_4f6c_dd1f, WIDTH),
    );
    let shared = a
        .indices()
        .iter()
        .zip(b.indices())
        .filter(|(x, y)| *x == y)
        .count();
    assert!((1..a.indices().len()).contains(&shared), "{shared} shared");
}
