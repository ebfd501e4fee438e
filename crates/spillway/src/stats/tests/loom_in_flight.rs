use crate::stats::{SlidingWindow, WindowConfig};
use crate::sync::thread_slot;
use loom::sync::Arc;
use loom::thread;

const MS: u64 = 1_000_000;
/// A time far from zero, on a bucket boundary of the 2 x 500 ms window.
const T0: u64 = 1_700_000_000_000 * MS;

/// Entries that start on one thread and end on another (a line of its own and the shared word)
/// leave the in-flight sum right, and a concurrent read sees a value some interleaving could
/// produce. The admission also moves the line to a new bucket, which must not touch the count.
#[test]
fn in_flight_sums_across_lines_and_the_shared_word() {
    loom::model(|| {
        // One line: the first thread to ask takes it; the other writes the shared word.
        let window = Arc::new(SlidingWindow::new(
            WindowConfig::sentinel_second().with_stripes(1),
        ));
        window.add_admission_from(thread_slot(), T0, 1); // main thread: an entry starts
        let other = {
            let window = window.clone();
            // a thread with no line ends that entry, then starts and ends another
            thread::spawn(move || {
                let slot = thread_slot();
                window.add_completion_moving(slot, T0 + MS, 1_000, 1, 0, u64::MAX);
                window.add_admission_from(slot, T0 + MS, 1);
                window.add_in_flight(slot, u64::MAX);
            })
        };
        let seen = window.in_flight();
        assert!((0..=1).contains(&seen), "read {seen}");
        other.join().unwrap();
        assert_eq!(window.in_flight(), 0);
        // The main thread's line moves to a later bucket: its count stays.
        window.add_admission_from(thread_slot(), T0 + 600 * MS, 1);
        assert_eq!(window.in_flight(), 1);
    });
}
