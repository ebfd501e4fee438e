//! Shared limits on a real three-node Redis Cluster: each limit's keys are in one slot (so its
//! two-key script runs), the script is found on the node that owns the slot, and the checks are
//! as exact as on one server.

mod common;

use common::cluster::RedisCluster;
use spillway::ManualClock;
use spillway_redis::{LeasedWindow, SharedWindow, Time};
use std::sync::Arc;
use std::time::Duration;

fn window(name: &str, clock: &ManualClock, limit: f64) -> SharedWindow {
    let time = Time::Clock(Arc::new(clock.clone()));
    SharedWindow::new(name, limit, Duration::from_secs(1), 2, time).unwrap()
}

#[tokio::test]
async fn strict_and_leased_checks_work_on_a_cluster_as_on_one_server() {
    let cluster = RedisCluster::start().await;
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    // Names that hash to different slots, so that more than one node serves a limit.
    let names = ["orders", "search", "tenant-7"];
    let mut conn = cluster.connect().await;
    let mut slots = Vec::new();
    for name in names {
        let strict = window(name, &clock, 5.0);
        let admitted = {
            let mut admitted = 0;
            for _ in 0..8 {
                if strict.try_acquire(&mut conn, 1).await.unwrap().admitted {
                    admitted += 1;
                }
            }
            admitted
        };
        assert_eq!(admitted, 5, "{name}");
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(strict.key())
            .query_async(&mut conn)
            .await
            .unwrap();
        slots.push(slot);
    }
    slots.dedup();
    assert!(slots.len() > 1, "the names share a slot: {slots:?}");

    // Leased, from two connections (processes): each refill sends the window and the
    // heartbeat set in one script call, which a cluster runs only if both keys share a slot.
    let mut processes = Vec::new();
    for _ in 0..2 {
        let lease = LeasedWindow::new(window("leased", &clock, 10.0), Arc::new(clock.clone()), 4);
        processes.push((lease.unwrap(), cluster.connect().await));
    }
    let mut admitted = 0;
    for _ in 0..100 {
        for (lease, conn) in &mut processes {
            if lease.wants_refill() {
                lease.refill(conn).await.unwrap();
            }
            if lease.try_acquire(1) {
                admitted += 1;
            }
        }
        clock.advance_millis(1);
    }
    assert_eq!(admitted, 10);
    assert!(processes
        .iter()
        .all(|(lease, _)| lease.live_processes() == 2));
}
