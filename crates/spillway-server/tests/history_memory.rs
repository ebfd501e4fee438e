//! The dashboard history's memory, measured: the bytes live on the heap (counted by this test's
//! allocator) for 100 and 10,000 resources with a full 5-minute history, and for 10,000
//! resources under the default cap of 1,000. Run with `--nocapture` to see the numbers.

use spillway_server::history::{History, Sample};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

/// The system allocator, counting the bytes it holds.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counter is an
// atomic, touched without allocating. (The default `realloc` goes through these two.)
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Live heap bytes of a history of `resources` resources, `cap` of them tracked, after 300
/// seconds of traffic on every one (the names built once, outside the count).
fn measured(resources: usize, cap: usize) -> (usize, usize, usize) {
    let names: Vec<Arc<str>> = (0..resources)
        .map(|n| Arc::from(format!("GET /api/resource-{n}")))
        .collect();
    let before = LIVE.load(Ordering::Relaxed);
    let mut history = History::new(300, cap);
    let rule = history.rule_number("api-qps");
    let mut samples = Vec::with_capacity(resources);
    for second in 0..300u64 {
        samples.clear();
        samples.extend(names.iter().enumerate().map(|(n, name)| {
            let mut sample = Sample {
                pass: 100 + n as u32,
                block: 3,
                success: 100,
                rt_avg_micros: 1_500,
                rt_p99_micros: 9_000,
                in_flight: 2,
                ..Sample::default()
            };
            sample.blocks[0].rule = rule;
            sample.blocks[0].count = 3;
            (name.clone(), sample)
        }));
        history.record(second, &samples);
    }
    // The second's list is the caller's, not the history's.
    drop(samples);
    let live = (LIVE.load(Ordering::Relaxed) - before) as usize;
    (live, history.heap_bytes(), history.resources().count())
}

#[test]
fn the_history_costs_its_window_times_its_resources() {
    let sample = std::mem::size_of::<Sample>();
    for (resources, cap) in [(100, 1_000), (10_000, 10_000), (10_000, 1_000)] {
        let (live, estimate, tracked) = measured(resources, cap);
        println!(
            "{resources} resources, cap {cap}: {tracked} with a history, {live} bytes live ({} per resource with a history; a sample is {sample} bytes), estimate {estimate}",
            live / tracked.max(1)
        );
        assert_eq!(tracked, resources.min(cap));
        // Each tracked resource holds 300 samples; the rest is the tables.
        let rings = (tracked + 1) * 300 * sample;
        assert!(live >= rings, "{live} < {rings}");
        assert!(
            live <= rings * 5 / 4 + 64 * 1024,
            "{live} bytes for {rings} of rings"
        );
    }
}
