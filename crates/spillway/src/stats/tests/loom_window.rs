use crate::stats::{Event, SlidingWindow, WindowConfig};
use loom::sync::Arc;
use loom::thread;

const MS: u64 = 1_000_000;
/// A time far from zero, on a bucket boundary of the 2 x 500 ms window.
const T0: u64 = 1_700_000_000_000 * MS;

fn window(stripes: usize) -> Arc<SlidingWindow> {
    Arc::new(SlidingWindow::new(
        WindowConfig::sentinel_second().with_stripes(stripes),
    ))
}

/// The first adds into a never-used window race its full reset: neither is lost.
#[test]
fn first_use_reset_loses_no_add() {
    loom::model(|| {
        let w = window(1);
        let other = {
            let w = w.clone();
            thread::spawn(move || w.add(T0, Event::Pass, 1))
        };
        w.add(T0 + 10 * MS, Event::Pass, 2);
        other.join().unwrap();
        assert_eq!(w.sum(T0 + 10 * MS, Event::Pass), 3);
        assert_eq!(w.late_events(), 0);
    });
}

/// An add for the new bucket races a stalled add for the bucket its slot held before: the new
/// bucket counts exactly its own add, and the stalled one is either filed in its own (now
/// recycled) bucket or refused as late, never counted in the new bucket.
#[test]
fn roll_over_neither_loses_nor_misfiles() {
    loom::model(|| {
        let w = window(1);
        w.add(T0, Event::Pass, 100); // slot 0 holds the T0 bucket
        let stalled = {
            let w = w.clone();
            thread::spawn(move || w.add(T0 + 100 * MS, Event::Pass, 10))
        };
        let next = T0 + 1_000 * MS; // same slot, one interval later
        w.add(next, Event::Pass, 1);
        stalled.join().unwrap();
        assert_eq!(w.sum(next, Event::Pass), 1);
    });
}

/// Completions (three words each) racing a roll: the new bucket holds exactly its own.
#[test]
fn completion_racing_a_roll_stays_in_its_bucket() {
    loom::model(|| {
        let w = window(1);
        w.add(T0, Event::Pass, 1);
        let stalled = {
            let w = w.clone();
            thread::spawn(move || w.add_completion(T0 + 1, 900, 1, 0))
        };
        let next = T0 + 1_000 * MS;
        w.add_completion(next, 40, 2, 1);
        stalled.join().unwrap();
        let s = w.snapshot(next);
        assert_eq!(
            (s.success, s.rt_micros, s.error, s.min_rt_micros),
            (2, 40, 1, 40)
        );
    });
}

/// Two threads adding into the same bucket and stripe: compare-and-swap loses nothing.
#[test]
fn concurrent_adds_in_one_bucket_are_all_counted() {
    loom::model(|| {
        let w = window(1);
        w.add(T0, Event::Pass, 0);
        let other = {
            let w = w.clone();
            thread::spawn(move || w.add(T0 + MS, Event::Pass, 1))
        };
        w.add(T0 + 2 * MS, Event::Pass, 1);
        other.join().unwrap();
        assert_eq!(w.sum(T0 + 2 * MS, Event::Pass), 2);
    });
}
