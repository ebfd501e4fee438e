//! A sliding window bucket by bucket, traced against what Sentinel 1.8.9's `LeapArray` returns
//! for the same calls (`currentWindow`, `getWindowValue`, `getWindowPass`, `getPreviousWindow`,
//! `getValidHead`, `list`), worked through its code by hand. Times are Unix-epoch
//! milliseconds, as Sentinel's, given to the window in nanoseconds.

use spillway::stats::{Bucket, Event, NodeConfig, ResourceNode, SlidingWindow, WindowConfig};
use std::time::Duration;

/// A multiple of every bucket length below, so that buckets start at `T0 + k * length`.
const T0_MS: u64 = 1_700_000_000_000;

fn at(offset_ms: u64) -> u64 {
    (T0_MS + offset_ms) * 1_000_000
}

/// Sentinel's second window: 2 buckets of 500 ms.
fn second() -> SlidingWindow {
    SlidingWindow::new(WindowConfig::sentinel_second())
}

fn starts(buckets: &[Bucket]) -> Vec<u64> {
    buckets.iter().map(|b| b.start_nanos).collect()
}

#[test]
fn current_window_creates_returns_and_resets_the_bucket_of_its_slot() {
    let w = second();
    // Absent until something creates it.
    assert_eq!(w.window_value(at(100)), None);
    let created = w.current_bucket(at(100));
    assert_eq!(created.start_nanos, at(0));
    assert!(!created.detached);
    assert_eq!(created.counts.pass, 0);
    assert_eq!(
        created.counts.min_rt_micros, 5_000_000,
        "an empty bucket's min RT is the max RT"
    );
    // Present and empty now, not absent.
    assert_eq!(w.window_value(at(499)).map(|c| c.pass), Some(0));

    w.add(at(200), Event::Pass, 3);
    w.add_completion(at(300), 40_000, 2, 1);
    let same = w.current_bucket(at(450));
    assert_eq!(same.start_nanos, at(0));
    assert_eq!(
        (same.counts.pass, same.counts.success, same.counts.error),
        (3, 2, 1)
    );
    assert_eq!(same.counts.rt_micros, 40_000);
    assert_eq!(same.counts.min_rt_micros, 40_000);

    // One interval later the same slot: Sentinel resets the old bucket to the new start.
    let reset = w.current_bucket(at(1_000));
    assert_eq!(reset.start_nanos, at(1_000));
    assert_eq!(reset.counts.pass, 0);
    assert!(!reset.detached);
    assert_eq!(w.window_value(at(200)), None, "the old bucket is gone");
    assert_eq!(w.window_pass(at(200)), 0);
}

#[test]
fn a_time_behind_its_slot_gets_a_detached_bucket_and_changes_nothing() {
    let w = second();
    w.add(at(1_100), Event::Pass, 4); // slot 0 holds [1000, 1500)
    let behind = w.current_bucket(at(100)); // slot 0 too, one interval earlier
    assert!(behind.detached);
    assert_eq!(behind.start_nanos, at(0));
    assert_eq!(behind.counts.pass, 0);
    assert_eq!(w.window_value(at(100)), None);
    assert_eq!(
        w.window_pass(at(1_100)),
        4,
        "the slot's bucket is untouched"
    );
    // An add at that time is lost, as an add to Sentinel's detached bucket is.
    w.add(at(100), Event::Pass, 7);
    assert_eq!(w.window_value(at(100)), None);
    assert_eq!(w.window_pass(at(1_100)), 4);
    assert_eq!(w.sum(at(1_400), Event::Pass), 4);
}

#[test]
fn get_window_pass_answers_for_a_bucket_nothing_recycled_however_old() {
    let w = second();
    w.add(at(0), Event::Pass, 2);
    w.add(at(600), Event::Pass, 5);
    // A minute later the window is empty, but both slots still hold their buckets.
    let later = at(60_000);
    assert_eq!(w.sum(later, Event::Pass), 0);
    assert_eq!(w.window_pass(at(0)), 2);
    assert_eq!(w.window_pass(at(499)), 2);
    assert_eq!(w.window_pass(at(600)), 5);
    // A time whose slot holds another bucket: Sentinel's `isTimeInWindow` fails, null.
    assert_eq!(w.window_value(at(1_000)), None);
    assert_eq!(w.window_value(at(59_999)), None);
    // Reading the sums wrote nothing: the buckets still answer.
    assert_eq!(w.window_pass(at(0)), 2);
}

#[test]
fn a_newer_bucket_still_in_a_thread_line_has_recycled_the_slot() {
    // This thread's adds go through a line of its own when it has one (then the bucket of
    // [1000, 1500) is still counted in the line, not in the shared ring), or straight to the
    // ring: either way the slot holds the newer bucket. Sentinel's add at 1000 reset slot 0,
    // so the bucket of [0, 500) is gone there too.
    let w = second();
    w.add(at(0), Event::Pass, 1);
    w.add(at(1_000), Event::Pass, 2);
    assert_eq!(w.window_value(at(0)), None);
    assert_eq!(w.window_pass(at(1_000)), 2);
    assert_eq!(starts(&w.buckets(at(1_000))), [at(1_000)]);
}

#[test]
fn get_previous_window_follows_sentinels_arithmetic() {
    let w = second();
    w.add(at(0), Event::Pass, 1);
    w.add(at(500), Event::Pass, 2);
    let previous = |now_ms| {
        w.previous_bucket(at(now_ms))
            .map(|b| (b.start_nanos, b.counts.pass))
    };
    assert_eq!(previous(700), Some((at(0), 1)));
    // At 1200 the slot of 700 holds [500, 1000): 700 ms old, not deprecated.
    assert_eq!(previous(1_200), Some((at(500), 2)));
    // At 1700 the slot of 1200 holds [0, 500): deprecated (1700 > 1000).
    assert_eq!(previous(1_700), None);
    // The slot of 1500 ([500, 1000)) at 2000: 1500 ms old, deprecated.
    assert_eq!(previous(2_000), None);

    // With a single bucket the slot of `now - length` is the current bucket's own slot, and
    // Sentinel's checks let the current bucket through.
    let one = SlidingWindow::new(WindowConfig::new(1, Duration::from_secs(1)).unwrap());
    one.add(at(0), Event::Pass, 5);
    let previous = one.previous_bucket(at(300)).unwrap();
    assert_eq!((previous.start_nanos, previous.counts.pass), (at(0), 5));

    // Before one bucket length from the epoch Sentinel's index would be negative: none.
    assert_eq!(second().previous_bucket(499_000_000), None);
}

#[test]
fn get_valid_head_is_the_bucket_in_the_slot_after_now() {
    let w = second();
    assert_eq!(w.valid_head(at(700)), None);
    w.add(at(0), Event::Pass, 1);
    w.add(at(500), Event::Pass, 2);
    let head = |now_ms| {
        w.valid_head(at(now_ms))
            .map(|b| (b.start_nanos, b.counts.pass))
    };
    // At 700 the slot of 1200 holds [0, 500): the oldest bucket a read covers.
    assert_eq!(head(700), Some((at(0), 1)));
    // At 1001 the slot of 1501 holds [500, 1000).
    assert_eq!(head(1_001), Some((at(500), 2)));
    // At 1000 exactly, [0, 500) is one interval old: not deprecated (strict).
    assert_eq!(head(1_000), Some((at(500), 2)));
    assert_eq!(
        head(1_600),
        None,
        "the slot of 2100 holds [0, 500), deprecated"
    );

    let four = SlidingWindow::new(WindowConfig::new(4, Duration::from_secs(1)).unwrap());
    four.add(at(250), Event::Block, 3);
    let head = four.valid_head(at(1_100)).unwrap();
    assert_eq!((head.start_nanos, head.counts.block), (at(250), 3));
}

#[test]
fn list_keeps_every_bucket_not_deprecated_in_slot_order() {
    let w = SlidingWindow::new(WindowConfig::new(4, Duration::from_secs(1)).unwrap());
    w.add(at(250), Event::Pass, 1); // slot 1
    w.add(at(500), Event::Block, 2); // slot 2
    w.add(at(750), Event::Pass, 3); // slot 3
    w.add(at(1_000), Event::Pass, 4); // slot 0
    let listed = w.buckets(at(1_000));
    assert_eq!(starts(&listed), [at(1_000), at(250), at(500), at(750)]);
    let passes: Vec<u64> = listed.iter().map(|b| b.counts.pass).collect();
    assert_eq!(passes, [4, 1, 0, 3]);
    assert_eq!(listed[2].counts.block, 2);
    // [250, 500) is exactly one interval old at 1250 (listed) and deprecated a nanosecond on.
    assert_eq!(starts(&w.buckets(at(1_250)))[1], at(250));
    assert_eq!(
        starts(&w.buckets(at(1_250) + 1)),
        [at(1_000), at(500), at(750)]
    );
    // Nothing ever written: an empty list.
    assert!(second().buckets(at(0)).is_empty());
}

#[test]
fn a_borrowed_pass_is_in_its_bucket_once_the_bucket_exists() {
    // Sentinel's `OccupiableBucketLeapArray` copies the passes borrowed for a time into the
    // bucket it creates for that time; before, `getWindowValue` of that time is null.
    let w = second();
    w.add(at(100), Event::Pass, 1);
    w.add_borrowed(at(600), 2);
    assert_eq!(w.window_value(at(600)), None);
    let created = w.current_bucket(at(600));
    assert_eq!(created.counts.pass, 2);
    assert_eq!(w.window_pass(at(600)), 2);
    assert_eq!(w.waiting(at(600)), 0);
}

#[test]
fn a_nodes_minute_window_shows_its_buckets_too() {
    // The minute window (60 buckets of 1 s) is fed by the second window's lines; its view
    // counts the lines still holding one of its buckets.
    let node = ResourceNode::new(NodeConfig::default());
    node.add_pass(at(100), 1);
    node.add_pass(at(600), 2);
    node.add_pass(at(1_200), 4);
    let minute = node.minute_window();
    assert_eq!(minute.window_pass(at(0)), 3);
    assert_eq!(minute.window_pass(at(1_000)), 4);
    let listed = minute.buckets(at(1_500));
    assert_eq!(starts(&listed), [at(0), at(1_000)]);
    assert_eq!(minute.previous_bucket(at(1_500)).unwrap().counts.pass, 3);
    assert_eq!(node.second_window().window_pass(at(1_000)), 4);
    assert_eq!(node.second_window().window_value(at(100)), None);
}
