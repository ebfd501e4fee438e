//! Event traces on a manual time line, checked against what Sentinel's `LeapArray` /
//! `ArrayMetric` return for the same timed adds (times in Unix-epoch milliseconds).

use super::*;
use crate::stats::WindowConfig;
use proptest::prelude::*;
use std::time::Duration;

const T0_MS: u64 = 1_700_000_000_000;

fn ms(millis: u64) -> u64 {
    millis * 1_000_000
}

fn at(offset_ms: u64) -> u64 {
    ms(T0_MS + offset_ms)
}

fn sentinel_second() -> SlidingWindow {
    SlidingWindow::new(WindowConfig::sentinel_second())
}

#[test]
fn sentinel_second_window_trace() {
    let w = sentinel_second();
    // T0 is a multiple of 500 ms, so buckets are [T0, T0+500), [T0+500, T0+1000), ...
    w.add(at(0), Event::Pass, 1);
    assert_eq!(w.sum(at(0), Event::Pass), 1);
    assert_eq!(w.sum(at(499), Event::Pass), 1);
    w.add(at(500), Event::Pass, 2);
    assert_eq!(w.sum(at(500), Event::Pass), 3);
    assert_eq!(w.sum(at(999), Event::Pass), 3);
    // At T0+1000 Sentinel resets slot 0 for the new bucket; the T0+500 bucket is 500 ms old.
    assert_eq!(w.sum(at(1000), Event::Pass), 2);
    assert_eq!(w.sum(at(1499), Event::Pass), 2);
    // At T0+1500 the T0+500 bucket is recycled: empty window.
    assert_eq!(w.sum(at(1500), Event::Pass), 0);
    assert_eq!(w.rate(at(1500), Event::Pass), 0.0);
}

#[test]
fn rate_divides_by_interval_seconds() {
    let w = SlidingWindow::new(WindowConfig::new(4, Duration::from_secs(2)).unwrap());
    w.add(at(0), Event::Pass, 3);
    w.add(at(1_500), Event::Pass, 4);
    assert_eq!(w.sum(at(1_999), Event::Pass), 7);
    assert_eq!(w.rate(at(1_999), Event::Pass), 3.5);
    // 2 s after T0 the first bucket is stale (strictly older than the interval once rolled).
    assert_eq!(w.sum(at(2_000), Event::Pass), 4);
}

#[test]
fn a_bucket_exactly_one_interval_old_is_not_read() {
    // Sentinel's stale test is `now - start > interval`, after `currentWindow` has recycled the
    // slot that `now` maps to. A bucket whose start is exactly `interval` before `now` shares that
    // slot, so it is gone; one bucket later it is still in.
    let w = SlidingWindow::new(WindowConfig::new(5, Duration::from_millis(1_000)).unwrap());
    w.add(at(0), Event::Block, 1);
    w.add(at(200), Event::Block, 10);
    assert_eq!(w.sum(at(999), Event::Block), 11);
    assert_eq!(w.sum(at(1_000), Event::Block), 10);
    assert_eq!(w.sum(at(1_199), Event::Block), 10);
    assert_eq!(w.sum(at(1_200), Event::Block), 0);
}

#[test]
fn completions_sum_rt_once_and_track_min() {
    let w = sentinel_second();
    // Sentinel's addRtAndSuccess(rt, count): success += count, rt += rt, minRt = min(minRt, rt).
    w.add_completion(at(0), 3_000, 2, 0);
    w.add_completion(at(600), 1_000, 1, 1);
    let s = w.snapshot(at(600));
    assert_eq!(
        (s.success, s.rt_micros, s.error, s.min_rt_micros),
        (3, 4_000, 1, 1_000)
    );
    assert_eq!(w.min_rt_micros(at(600)), 1_000);
    // The 1 ms completion's bucket leaves the window at T0+1500: min RT is back to the max RT.
    assert_eq!(w.min_rt_micros(at(1_500)), 5_000_000);
}

#[test]
fn recorded_rt_is_capped_at_max_rt() {
    let w =
        SlidingWindow::new(WindowConfig::sentinel_second().with_max_rt(Duration::from_millis(100)));
    w.add_completion(at(0), 250_000, 1, 0);
    let s = w.snapshot(at(0));
    assert_eq!((s.rt_micros, s.min_rt_micros), (100_000, 100_000));
}

#[test]
fn min_rt_floors_at_one_microsecond() {
    let w = sentinel_second();
    w.add_completion(at(0), 0, 1, 0);
    assert_eq!(w.min_rt_micros(at(0)), 1);
}

#[test]
fn previous_is_the_bucket_before_the_current_one() {
    let w = SlidingWindow::new(WindowConfig::sentinel_minute());
    w.add(at(1_000), Event::Pass, 5);
    w.add(at(2_000), Event::Pass, 7);
    assert_eq!(w.previous(at(1_999), Event::Pass), 0);
    assert_eq!(w.previous(at(2_500), Event::Pass), 5);
    assert_eq!(w.previous(at(3_000), Event::Pass), 7);
    assert_eq!(w.previous(at(4_000), Event::Pass), 0);
    assert_eq!(w.sum(at(4_000), Event::Pass), 12);
}

#[test]
fn max_bucket_is_at_least_one() {
    let w = sentinel_second();
    assert_eq!(w.max_bucket(at(0), Event::Success), 1);
    w.add_completion(at(0), 10, 3, 0);
    w.add_completion(at(500), 10, 5, 0);
    assert_eq!(w.max_bucket(at(500), Event::Success), 5);
}

#[test]
fn an_add_for_a_recycled_bucket_is_refused_as_late() {
    // No accumulators: every add goes straight to the shared ring.
    let w = SlidingWindow::new(WindowConfig::sentinel_second().with_stripes(0));
    w.add(at(1_000), Event::Pass, 1); // slot 0 now holds the T0+1000 bucket
    w.add(at(0), Event::Pass, 1); // a stalled thread's add for T0: its slot was recycled
    assert_eq!(w.late_events(), 1);
    assert_eq!(w.sum(at(1_000), Event::Pass), 1);
}

#[test]
fn an_add_older_than_its_threads_accumulator_goes_to_its_own_bucket() {
    let w = sentinel_second();
    w.add(at(1_000), Event::Pass, 1); // this thread's accumulator holds the T0+1000 bucket
    w.add(at(0), Event::Pass, 1); // clock read behind: filed in the ring under T0, out of window
    assert_eq!(w.late_events(), 0);
    assert_eq!(w.sum(at(1_000), Event::Pass), 1);
    w.add(at(1_500), Event::Pass, 1); // hands T0+1000 over to the ring, recycling T0's slot
    assert_eq!(w.sum(at(1_500), Event::Pass), 2);
}

#[test]
fn an_out_of_order_add_within_the_window_is_filed_in_its_own_bucket() {
    let w = sentinel_second();
    w.add(at(500), Event::Pass, 1);
    w.add(at(499), Event::Pass, 1); // clock skew between cores: still in its (older) bucket
    assert_eq!(w.late_events(), 0);
    assert_eq!(w.previous(at(500), Event::Pass), 1);
    assert_eq!(w.sum(at(500), Event::Pass), 2);
}

#[test]
fn a_slot_idle_long_enough_for_tags_to_wrap_is_reset() {
    let w = sentinel_second();
    w.add(at(0), Event::Pass, 4);
    // 2^24 buckets later the 24-bit tag is the same again; the full-width start says otherwise.
    let later = at(0) + (1u64 << 24) * ms(500);
    w.add(later, Event::Pass, 1);
    assert_eq!(w.sum(later, Event::Pass), 1);
    w.add_completion(later, 7, 1, 0);
    assert_eq!(w.min_rt_micros(later), 7);
}

#[test]
fn one_bucket_windows_previous_bucket_is_the_current_one_as_in_sentinel() {
    // Sentinel's `previousWindowPass`: `currentWindow()` resets the only slot to the current
    // bucket, then `getPreviousWindow()` reads that slot and lets it through.
    let w = SlidingWindow::new(WindowConfig::new(1, Duration::from_secs(1)).unwrap());
    w.add(at(0), Event::Pass, 1);
    assert_eq!(w.previous(at(999), Event::Pass), 1);
    assert_eq!(
        w.previous(at(1_000), Event::Pass),
        0,
        "reset by the read's currentWindow"
    );
    assert_eq!(w.previous_snapshot(at(999)).pass, 1);
    assert_eq!(w.sum(at(999), Event::Pass), 1);
    assert_eq!(w.sum(at(1_000), Event::Pass), 0);
}

#[test]
fn time_near_zero_reads_only_existing_buckets() {
    let w = SlidingWindow::new(WindowConfig::sentinel_minute());
    w.add(0, Event::Pass, 1);
    assert_eq!(w.sum(0, Event::Pass), 1);
    assert_eq!(w.previous(0, Event::Pass), 0);
}

#[test]
fn adds_from_many_threads_are_summed() {
    // Two accumulators: some threads own one, the others write the shared ring.
    let w = SlidingWindow::new(WindowConfig::sentinel_second().with_stripes(2));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..1_000 {
                    w.add(at(0), Event::Pass, 1);
                }
            });
        }
    });
    assert_eq!(w.sum(at(0), Event::Pass), 4_000);
}

proptest! {
    /// Single-threaded adds at non-decreasing times: every read equals the model "sum of the adds
    /// whose bucket id lies in (current - buckets, current]", which is Sentinel's read.
    #[test]
    fn reads_match_the_bucket_model(
        buckets in 1usize..12,
        bucket_ms in 1u64..400,
        steps in proptest::collection::vec((0u64..900, 1u64..5), 1..60),
        stripes in prop_oneof![Just(0usize), Just(4)],
    ) {
        let config = WindowConfig::new(buckets, Duration::from_millis(bucket_ms * buckets as u64))
            .unwrap()
            .with_stripes(stripes);
        let w = SlidingWindow::new(config);
        let len = ms(bucket_ms);
        let mut now = at(0);
        let mut adds: Vec<(u64, u64)> = Vec::new();
        for (gap_ms, n) in steps {
            now += ms(gap_ms);
            w.add(now, Event::Pass, n);
            adds.push((now / len, n));
            let current = now / len;
            let expected: u64 = adds
                .iter()
                .filter(|(id, _)| id + buckets as u64 > current)
                .map(|(_, n)| n)
                .sum();
            prop_assert_eq!(w.sum(now, Event::Pass), expected);
            let previous: u64 = adds
                .iter()
                // Sentinel's: the bucket before; with one bucket, the current one.
                .filter(|(id, _)| if buckets > 1 { *id + 1 == current } else { *id == current })
                .map(|(_, n)| n)
                .sum();
            prop_assert_eq!(w.previous(now, Event::Pass), previous);
        }
        prop_assert_eq!(w.late_events(), 0);
    }

    /// The bucket arithmetic: the slot of an id, and which ids a read covers.
    #[test]
    fn live_ids_are_the_last_buckets(buckets in 1usize..64, bucket_ms in 1u64..2_000, t in 0u64..(1 << 44)) {
        let config = WindowConfig::new(buckets, Duration::from_millis(bucket_ms * buckets as u64)).unwrap();
        let w = SlidingWindow::new(config);
        let now = ms(t);
        let current = now / ms(bucket_ms);
        let ids: Vec<u64> = w.live_ids(now).collect();
        prop_assert_eq!(ids.len() as u64, (buckets as u64).min(current + 1));
        prop_assert_eq!(ids[0], current);
        let mut slots: Vec<usize> = ids.iter().map(|&id| w.slot(id)).collect();
        slots.sort_unstable();
        slots.dedup();
        prop_assert_eq!(slots.len(), ids.len());
    }
}

proptest! {
    /// A minute window fed by the second window's lines reads exactly what an independently
    /// written minute window reads, for adds from several threads' lines (and from the shared
    /// ring, slot 9 having no line) at non-decreasing times, with reads between them.
    #[test]
    fn a_fed_window_reads_as_an_independent_one(
        steps in proptest::collection::vec(
            (0u64..700, 0usize..3, 0usize..4, 1u64..5, 0u64..5_000),
            1..80,
        ),
    ) {
        let second = WindowConfig::sentinel_second().with_stripes(4);
        let minute = WindowConfig::sentinel_minute().with_stripes(4);
        let (fine, coarse) = SlidingWindow::linked(second, minute);
        prop_assert!(coarse.is_fed());
        let reference = SlidingWindow::new(minute);
        let mut now = at(0);
        for (gap_ms, kind, slot, n, rt) in steps {
            now += ms(gap_ms);
            let slot = if slot == 3 { 9 } else { slot };
            match kind {
                0 => {
                    fine.add_from(slot, now, Event::Pass, n);
                    reference.add_from(slot, now, Event::Pass, n);
                }
                1 => {
                    fine.add_from(slot, now, Event::Block, n);
                    reference.add_from(slot, now, Event::Block, n);
                }
                _ => {
                    fine.add_completion_from(slot, now, rt, n, n / 2);
                    reference.add_completion_from(slot, now, rt, n, n / 2);
                }
            }
            // Occupied passes stay in the second window, as Sentinel's do.
            fine.add_from(slot, now, Event::OccupiedPass, 1);
            prop_assert_eq!(coarse.snapshot(now), reference.snapshot(now));
            prop_assert_eq!(coarse.previous_snapshot(now), reference.previous_snapshot(now));
            prop_assert_eq!(
                coarse.min_bucket_avg_rt_micros(now, 10),
                reference.min_bucket_avg_rt_micros(now, 10)
            );
        }
    }
}

#[test]
fn windows_whose_buckets_do_not_align_are_not_linked() {
    // 400 ms buckets: a second is not a whole number of them.
    let second = WindowConfig::new(3, Duration::from_millis(1_200)).unwrap();
    let (_, coarse) = SlidingWindow::linked(second, WindowConfig::sentinel_minute());
    assert!(!coarse.is_fed());
}
