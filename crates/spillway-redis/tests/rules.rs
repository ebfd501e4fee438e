//! A leased window as a cluster rule of spillway, against a real `redis-server`: two instances
//! (two processes, as far as Redis can tell) share one limit through their entry paths.

mod common;

use common::RedisServer;
use spillway::cluster::ClusterRule;
use spillway::{BlockKind, ManualClock, Spillway};
use spillway_redis::{LeasedWindow, SharedWindow, Time};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn two_instances_share_a_cluster_rule_through_their_entries() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    let (limit, max_batch) = (20.0, 5);
    let mut instances = Vec::new();
    for _ in 0..2 {
        let time = Time::Clock(Arc::new(clock.clone()));
        let window = SharedWindow::new("api", limit, Duration::from_secs(1), 2, time).unwrap();
        let lease =
            Arc::new(LeasedWindow::new(window, Arc::new(clock.clone()), max_batch).unwrap());
        let spillway = Spillway::new_with_clock(clock.clone());
        spillway
            .load_cluster_rules(vec![ClusterRule::new("api-fleet", "api", lease.clone())])
            .unwrap();
        instances.push((spillway, lease, redis.connect().await));
    }
    // Nothing is held before the first refill: refused, by the cluster rule.
    let err = instances[0].0.entry("api").enter().unwrap_err();
    assert_eq!(
        (err.kind(), err.rule_id()),
        (BlockKind::Cluster, Some("api-fleet"))
    );
    assert_eq!(err.threshold(), limit);

    // One request a millisecond on each for 2 s (100x the limit); each refills when its lease
    // says so (its driver's job in production).
    let mut per_bucket = [0u64; 4];
    for ms in 0..2000u64 {
        for (spillway, lease, conn) in &mut instances {
            if lease.wants_refill() {
                lease.refill(conn).await.unwrap();
            }
            if spillway.entry("api").enter().is_ok() {
                per_bucket[(ms / 500) as usize] += 1;
            }
        }
        clock.advance_millis(1);
    }
    // The leased bound: the limit plus 2 x max_batch per instance in any two consecutive
    // buckets.
    let bound = 20 + 2 * 2 * max_batch;
    for pair in per_bucket.windows(2) {
        assert!(pair[0] + pair[1] <= bound, "{per_bucket:?}");
    }
    // On these arrivals, exactly what the strict check admits: the limit in the first bucket
    // of each second.
    assert_eq!(per_bucket, [20, 0, 20, 0]);
    let admitted: u64 = per_bucket.iter().sum();
    let passes: u64 = instances
        .iter()
        .map(|(spillway, _, _)| spillway.resource("api").unwrap().stats().total_pass)
        .sum();
    assert_eq!(passes, admitted);
}
