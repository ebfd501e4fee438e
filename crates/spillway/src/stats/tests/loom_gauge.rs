use crate::stats::gauge::SlotGauge;
use crate::sync::thread_slot;
use loom::sync::Arc;
use loom::thread;

/// Entries that start on one thread and end on another (an owned line and the shared line) leave
/// the gauge's sum right, and a concurrent read sees a value some interleaving could produce.
#[test]
fn gauge_sums_across_owned_and_shared_lines() {
    loom::model(|| {
        let gauge = Arc::new(SlotGauge::new(1)); // one owned line: the first thread to ask
        gauge.add(thread_slot(), 1); // main thread, owned line: an entry starts
        let other = {
            let gauge = gauge.clone();
            // a thread with no owned line ends the entry and starts and ends another
            thread::spawn(move || {
                let slot = thread_slot();
                gauge.add(slot, u64::MAX);
                gauge.add(slot, 1);
                gauge.add(slot, u64::MAX);
            })
        };
        let seen = gauge.value();
        assert!((0..=1).contains(&seen), "read {seen}");
        other.join().unwrap();
        assert_eq!(gauge.value(), 0);
    });
}
