//! How far a QPS reject rule can admit over its count in any one-second span (issue: flow rules,
//! window accuracy). The rule reads the sliding window, so a span of one second that straddles
//! the window's buckets can hold more than `count`:
//!
//! - the admissions in any `buckets` consecutive buckets are at most `count` (each admission saw
//!   the window, its own bucket included, at or under `count`), and a one-second span overlaps
//!   at most `buckets + 1` consecutive buckets, so it never holds more than `2 * count`;
//! - adversarial arrivals reach that bound with any bucket count: `count` at the very end of a
//!   bucket, then `count` at the start of the bucket that pushes it out of the window, a span of
//!   `(buckets - 1) / buckets` seconds (0.5 s with Sentinel's 2 x 500 ms, 0.9 s with 10 x 100 ms);
//! - uniform arrivals faster than `count` get exactly `count` in every one-second span.
//!
//! Finer buckets do not lower the worst case; they shorten the time a burst is held back.

use proptest::prelude::*;
use spillway::flow::{Decision, QpsReject};
use spillway::stats::{NodeConfig, ResourceNode, WindowConfig};
use std::time::Duration;

const T0_MS: u64 = 1_700_000_000_000;
const COUNT: u64 = 100;

fn shapes() -> [(usize, WindowConfig); 2] {
    [
        (2, WindowConfig::sentinel_second()),
        (10, WindowConfig::new(10, Duration::from_secs(1)).unwrap()),
    ]
}

/// Offers `attempts` calls at each of `times` (ms after T0, non-decreasing); returns the
/// admission times in ms.
fn admit(config: WindowConfig, times: impl IntoIterator<Item = (u64, u64)>) -> Vec<u64> {
    let node = ResourceNode::new(NodeConfig::default().with_second_window(config));
    let rule = QpsReject::new(COUNT as f64);
    let mut admitted = Vec::new();
    for (ms, attempts) in times {
        let now = (T0_MS + ms) * 1_000_000;
        for _ in 0..attempts {
            if rule.check(&node, now, 1) == Decision::Pass {
                node.add_pass(now, 1);
                admitted.push(ms);
            }
        }
    }
    admitted
}

/// The most admissions in any half-open span `[t, t + 1000 ms)`.
fn most_in_one_second(admitted: &[u64]) -> u64 {
    let mut most = 0;
    let mut start = 0;
    for end in 0..admitted.len() {
        while admitted[end] - admitted[start] >= 1_000 {
            start += 1;
        }
        most = most.max((end - start + 1) as u64);
    }
    most
}

#[test]
fn uniform_arrivals_get_exactly_count_per_second() {
    for (_, config) in shapes() {
        let admitted = admit(config, (0..10_000).map(|ms| (ms, 1)));
        assert_eq!(most_in_one_second(&admitted), COUNT, "{config:?}");
        assert_eq!(admitted.len() as u64, 10 * COUNT, "{config:?}");
    }
}

#[test]
fn bursts_at_bucket_edges_reach_twice_count() {
    for (buckets, config) in shapes() {
        let bucket_ms = 1_000 / buckets as u64;
        // Everything at the last millisecond of the first bucket, then at the first millisecond
        // of the bucket that pushes it out of the window.
        let admitted = admit(config, [(bucket_ms - 1, 2 * COUNT), (1_000, 2 * COUNT)]);
        assert_eq!(most_in_one_second(&admitted), 2 * COUNT, "{config:?}");
        let span = admitted.last().unwrap() - admitted.first().unwrap();
        assert_eq!(span, 1_000 - bucket_ms + 1, "{config:?}");
    }
}

proptest! {
    /// Whatever the arrivals, no one-second span holds more than twice the count.
    #[test]
    fn never_more_than_twice_count(
        arrivals in proptest::collection::vec((0u64..50, 0u64..80), 1..200),
        fine in any::<bool>(),
    ) {
        let (_, config) = shapes()[usize::from(fine)];
        let mut ms = 0;
        let times: Vec<(u64, u64)> = arrivals
            .into_iter()
            .map(|(gap, attempts)| {
                ms += gap;
                (ms, attempts)
            })
            .collect();
        let admitted = admit(config, times);
        prop_assert!(most_in_one_second(&admitted) <= 2 * COUNT);
    }
}
