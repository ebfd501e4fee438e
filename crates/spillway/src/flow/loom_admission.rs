//! Model-checked admissions of a QPS reject rule (run with `RUSTFLAGS="--cfg spillway_loom"`):
//! racing admissions never exceed the count, and a give-back races them safely.

use super::admission::AdmissionRing;
use crate::stats::{SlidingWindow, WindowConfig};
use loom::sync::Arc;
use loom::thread;

/// A ring seeded (empty) on a Sentinel-shaped window, at bucket 0.
fn ring() -> (Arc<AdmissionRing>, Arc<SlidingWindow>) {
    let window = Arc::new(SlidingWindow::new(
        WindowConfig::sentinel_second().with_stripes(0),
    ));
    let ring = Arc::new(AdmissionRing::new());
    assert!(ring.ready(&window, 0));
    (ring, window)
}

#[test]
fn loom_admissions_never_exceed_the_count() {
    loom::model(|| {
        let (ring, window) = ring();
        let other = {
            let (ring, window) = (ring.clone(), window.clone());
            thread::spawn(move || ring.admit(&window, 0, 1, 2.0, 2).is_ok())
        };
        let mine = [
            ring.admit(&window, 0, 1, 2.0, 2),
            ring.admit(&window, 0, 1, 2.0, 2),
        ];
        let theirs = other.join().unwrap();
        let admitted = mine.iter().filter(|r| r.is_ok()).count() + usize::from(theirs);
        assert_eq!(admitted, 2);
    });
}

#[test]
fn loom_a_give_back_frees_exactly_its_place() {
    loom::model(|| {
        let (ring, window) = ring();
        let first = ring.admit(&window, 0, 1, 1.0, 1).unwrap();
        let other = {
            let (ring, window) = (ring.clone(), window.clone());
            thread::spawn(move || ring.admit(&window, 0, 1, 1.0, 1).is_ok())
        };
        ring.give_back(first);
        let theirs = other.join().unwrap();
        // Whether the other came before the give-back (refused) or after (admitted), one place
        // is held at the end exactly when it was admitted.
        let held_now = ring.admit(&window, 0, 1, 1.0, 1).is_err();
        assert_eq!(held_now, theirs);
    });
}

/// Two first uses race the seed: the one that finds it in progress waits for it rather than
/// reading the window, so exactly `count` are admitted.
#[test]
fn loom_a_racing_first_use_waits_for_the_seed() {
    loom::model(|| {
        let window = Arc::new(SlidingWindow::new(
            WindowConfig::sentinel_second().with_stripes(0),
        ));
        let ring = Arc::new(AdmissionRing::new());
        let admit = |ring: &AdmissionRing, window: &SlidingWindow| {
            assert!(ring.ready(window, 0));
            ring.admit(window, 0, 1, 1.0, 1).is_ok()
        };
        let other = {
            let (ring, window) = (ring.clone(), window.clone());
            thread::spawn(move || admit(&ring, &window))
        };
        let mine = admit(&ring, &window);
        let theirs = other.join().unwrap();
        assert_eq!(usize::from(mine) + usize::from(theirs), 1);
    });
}
