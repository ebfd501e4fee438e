//! Sentinel's exact minimum RT against the bucket-average estimate.

use super::checks::{complete, enter, setup};
use crate::system::{MinRtEstimate, SystemCheck, SystemRule};
use crate::{BlockKind, Clock};
use std::time::Duration;

/// 100 calls of 10 ms and one 20 µs call (a fast error path) in the same bucket; then the load
/// rises. Returns the exact minimum RT, the bucket-average one, and how many BBR then admits.
fn one_lucky_call(estimate: MinRtEstimate) -> (u64, Option<u64>, usize) {
    let (spillway, clock, probe) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("load")
            .with_highest_system_load(4.0)
            .with_min_rt(estimate)])
        .unwrap();
    let slow: Vec<_> = (0..100).map(|_| enter(&spillway).unwrap()).collect();
    let fast = enter(&spillway).unwrap();
    clock.advance(Duration::from_micros(20));
    drop(fast);
    clock.advance(Duration::from_micros(9_980));
    drop(slow);
    let now = clock.now_nanos();
    let node = spillway.inbound_node();
    let exact = node.min_rt_micros(now);
    let bucket_average = node.minute_window().min_bucket_avg_rt_micros(now, 10);
    probe.set_load(8.0);
    // Count what BBR admits now.
    let mut held = Vec::new();
    while let Ok(entry) = enter(&spillway) {
        held.push(entry);
        assert!(held.len() < 1_000, "BBR never blocked");
    }
    (exact, bucket_average, held.len())
}

#[test]
fn the_exact_minimum_follows_one_lucky_call() {
    let (exact, _, admitted) = one_lucky_call(MinRtEstimate::Exact);
    // min RT 20 µs x max success QPS 202 = 0.004: only the `concurrency > 1` floor admits.
    assert_eq!(exact, 20);
    assert_eq!(admitted, 2);
}

#[test]
fn the_bucket_average_ignores_it() {
    let window = Duration::from_secs(10);
    let (_, bucket_average, admitted) = one_lucky_call(MinRtEstimate::BucketAverage { window });
    // The bucket's average: (100 x 10 ms + 20 µs) / 101 = 9_901 µs; x 202/s = 2.0: 3 admitted.
    assert_eq!(bucket_average, Some(9_901));
    assert_eq!(admitted, 3);
}

#[test]
fn the_bucket_average_remembers_the_calm_across_its_window() {
    let (spillway, clock, probe) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("load")
            .with_highest_system_load(4.0)
            .with_min_rt(MinRtEstimate::BucketAverage {
                window: Duration::from_secs(5),
            })])
        .unwrap();
    complete(&spillway, &clock, 100, Duration::from_millis(10)); // a calm second: 10 ms
    clock.advance_millis(1_000);
    complete(&spillway, &clock, 10, Duration::from_millis(400)); // congested: 400 ms
    let minute = spillway.inbound_node().minute_window();
    let now = clock.now_nanos();
    assert_eq!(minute.min_bucket_avg_rt_micros(now, 5), Some(10_000));
    assert_eq!(minute.min_bucket_avg_rt_micros(now, 1), Some(400_000));
    // Five seconds on, the calm second has left the estimate's window.
    clock.advance_millis(5_000);
    assert_eq!(
        minute.min_bucket_avg_rt_micros(clock.now_nanos(), 5),
        None,
        "nothing completed in the last 5 s"
    );
    probe.set_load(8.0);
    // With no estimate, BBR falls back on the max RT (5 s, as Sentinel's empty minimum), and the
    // max success QPS on its floor (1 per 500 ms bucket: 2/s): 2 x 5 = 10 before an entry.
    let held: Vec<_> = (0..11).map(|_| enter(&spillway).unwrap()).collect();
    assert_eq!(
        enter(&spillway).unwrap_err().kind(),
        BlockKind::System(SystemCheck::Load)
    );
    drop(held);
}
