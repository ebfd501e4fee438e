//! The leased concurrency limit against a real `redis-server`: processes admit within the
//! permits they hold, so the fleet's requests in flight never exceed the limit; spare permits
//! go back; a dead process's hold comes back after its TTL; and the limit in front of a
//! resource, released when the entry ends.

mod common;

use common::RedisServer;
use spillway::cluster::ClusterRule;
use spillway::{BlockKind, ManualClock, Spillway};
use spillway_redis::{LeaseSettings, LeasedConcurrency, SharedConcurrency, Time};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

const START_MS: u64 = 1_700_000_000_000;
const TTL: Duration = Duration::from_secs(3);

fn leased(clock: &ManualClock, name: &str, limit: u64, who: &str) -> LeasedConcurrency {
    leased_by(clock, name, limit, who, 4)
}

/// [`leased`], taking at most `max_batch` permits a call.
fn leased_by(
    clock: &ManualClock,
    name: &str,
    limit: u64,
    who: &str,
    max_batch: u64,
) -> LeasedConcurrency {
    let time = Time::Clock(Arc::new(clock.clone()));
    let shared = SharedConcurrency::new(name, limit, who, TTL, time).unwrap();
    let settings = LeaseSettings {
        max_batch,
        ..LeaseSettings::default()
    };
    LeasedConcurrency::new(shared, Arc::new(clock.clone()), settings).unwrap()
}

#[tokio::test]
async fn three_processes_never_have_more_in_flight_than_the_limit() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let limit = 6u64;
    let mut processes = Vec::new();
    for who in ["a", "b", "c"] {
        processes.push((
            leased(&clock, "fleet", limit, who),
            redis.connect().await,
            VecDeque::<u64>::new(),
        ));
    }
    // Each process starts a request every millisecond, lasting 1 to 9 ms (3 to 27 wanted in
    // flight at once, against 6), for 5 s; each refills when its lease says so.
    let mut seed = 7u64;
    let (mut admitted, mut busy_ms, mut calls) = (0u64, 0u64, 0u64);
    for ms in 0..5_000u64 {
        for (lease, conn, ends) in &mut processes {
            while ends.front().is_some_and(|&end| end <= ms) {
                ends.pop_front();
                lease.release(1);
            }
            if lease.wants_refill() {
                lease.refill(conn).await.unwrap();
                calls += 1;
            }
            if lease.try_acquire(1) {
                admitted += 1;
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let end = ms + 1 + (seed >> 33) % 9;
                let at = ends.partition_point(|&e| e <= end);
                ends.insert(at, end);
            }
        }
        let in_flight: u64 = processes.iter().map(|(lease, ..)| lease.in_use()).sum();
        let held: u64 = processes.iter().map(|(lease, ..)| lease.held()).sum();
        assert!(in_flight <= limit, "{in_flight} in flight at {ms} ms");
        assert!(held <= limit, "{held} held at {ms} ms");
        busy_ms += u64::from(in_flight >= limit - 1);
        clock.advance_millis(1);
    }
    println!("admitted {admitted}, limit nearly full {busy_ms} of 5000 ms, {calls} calls");
    // What docs/cluster.md quotes, on this manual clock (deterministic): the limit nearly
    // full for 4,694 of 5,000 ms with 754 calls, within 2%.
    assert!(
        busy_ms.abs_diff(4_694) <= 94,
        "the limit was nearly full for {busy_ms} of 5,000 ms"
    );
    assert!(calls.abs_diff(754) <= 15, "{calls} calls");
}

#[tokio::test]
async fn spare_permits_go_back_and_a_dead_holds_come_back_after_its_ttl() {
    let redis = RedisServer::start().await;
    let (mut a_conn, mut b_conn) = (redis.connect().await, redis.connect().await);
    let clock = ManualClock::starting_at_millis(START_MS);
    let a = leased(&clock, "spare", 4, "a");
    let b = leased(&clock, "spare", 4, "b");
    // A's four requests find its hold empty; it takes 4 and admits them.
    for _ in 0..4 {
        assert!(!a.try_acquire(1));
    }
    assert_eq!(a.refill(&mut a_conn).await.unwrap(), 4);
    for _ in 0..4 {
        assert!(a.try_acquire(1));
    }
    // B finds none free.
    assert!(!b.try_acquire(1));
    assert_eq!(b.refill(&mut b_conn).await.unwrap(), 0);
    // Two of A's end; when they have stayed spare through a whole 100 ms period (the next
    // one), they go back, and B gets them.
    a.release(2);
    clock.advance_millis(199);
    assert!(!a.wants_refill());
    clock.advance_millis(1);
    assert!(a.wants_refill());
    assert_eq!(a.refill(&mut a_conn).await.unwrap(), 2);
    assert_eq!((a.held(), a.in_use()), (2, 2));
    assert!(!b.try_acquire(1) && !b.try_acquire(1));
    assert_eq!(b.refill(&mut b_conn).await.unwrap(), 2);
    // A dies with two in flight: B gets them only when A's hold runs out, 3 s after its last
    // call.
    clock.advance(TTL - Duration::from_millis(1));
    for _ in 0..3 {
        b.try_acquire(1);
    }
    b.refill(&mut b_conn).await.unwrap();
    assert_eq!(b.held(), 2);
    // Past A's TTL, and past the 20 ms a lease waits after Redis had no permit free.
    clock.advance_millis(20);
    b.try_acquire(1);
    assert_eq!(b.refill(&mut b_conn).await.unwrap(), 2);
    assert_eq!(b.held(), 4);
}

#[tokio::test]
async fn in_front_of_a_resource_an_entry_holds_its_place_until_it_ends() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let places = Arc::new(leased(&clock, "db", 2, "a"));
    let spillway = Spillway::new_with_clock(clock.clone());
    spillway
        .load_cluster_rules(vec![ClusterRule::new("db-fleet", "db", places.clone())])
        .unwrap();
    // Two requests find no place held; the lease takes two.
    for _ in 0..2 {
        let err = spillway.entry("db").enter().unwrap_err();
        assert_eq!(err.kind(), BlockKind::Cluster);
        assert_eq!(err.rule_id(), Some("db-fleet"));
    }
    assert_eq!(places.refill(&mut conn).await.unwrap(), 2);
    let first = spillway.entry("db").enter().unwrap();
    let second = spillway.entry("db").enter().unwrap();
    // No more: a third request has to wait for one to end, not for time to pass (10 s, the
    // lease beating each second as its driver would).
    for _ in 0..10 {
        clock.advance_millis(1000);
        if places.wants_refill() {
            places.refill(&mut conn).await.unwrap();
        }
        assert!(spillway.entry("db").enter().is_err());
    }
    drop(first);
    assert_eq!(places.in_use(), 1);
    let third = spillway.entry("db").enter().unwrap();
    drop((second, third));
    assert_eq!(places.in_use(), 0);
}

/// Admits one request at a time on `lease`, refilling after each refusal, until `most` are in
/// or it has refused four times; returns how many it admitted.
async fn admit_up_to(
    lease: &LeasedConcurrency,
    conn: &mut redis::aio::ConnectionManager,
    most: u64,
) -> u64 {
    let (mut admitted, mut refused) = (0, 0);
    while admitted < most && refused < 4 {
        if lease.try_acquire(1) {
            admitted += 1;
        } else {
            refused += 1;
            let _ = lease.refill(conn).await;
        }
    }
    admitted
}

#[tokio::test]
async fn a_process_back_first_on_an_empty_redis_keeps_to_its_share_of_places() {
    let mut redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let mut processes = Vec::new();
    for who in ["a", "b", "c"] {
        processes.push((
            leased_by(&clock, "return", 6, who, 1),
            redis.connect().await,
        ));
    }
    // Two requests in flight in each process, its share of 6 among 3 (a permit a call).
    for (lease, conn) in &mut processes {
        assert_eq!(admit_up_to(lease, conn, 2).await, 2);
        clock.advance_millis(1);
    }
    for (lease, conn) in &mut processes {
        lease.refill(conn).await.unwrap();
        assert_eq!(lease.live_processes(), 3);
    }
    redis.kill().await;
    for (lease, conn) in &mut processes {
        assert!(lease.refill(conn).await.is_err());
        assert!(!lease.try_acquire(1), "the share, 2, is in flight");
    }
    // Redis comes back empty (every hold lost), and only the first process has probed it.
    redis.restart().await;
    let (first, conn) = &mut processes[0];
    *conn = redis.connect().await;
    first.refill(conn).await.unwrap();
    // Redis would grant it 6 more; it keeps to its share while the others still hold theirs.
    // Before, it took 3 more in four tries: 9 in flight against 6.
    let more = admit_up_to(first, conn, 6).await;
    let first_held = first.held();
    let in_flight: u64 = processes.iter().map(|(lease, _)| lease.in_use()).sum();
    assert_eq!((more, in_flight), (0, 6));
    // Nor does it hold places it cannot use (at most the one its last refusal asked for past
    // its two): the others find some when they are back. Before, each refusal asked Redis for
    // more, and it held all 6, the others none.
    assert!(first_held <= 3, "{first_held} held");
    for (lease, conn) in &mut processes[1..] {
        *conn = redis.connect().await;
        let _ = lease.refill(conn).await;
        assert!(lease.held() >= 1, "{} held", lease.held());
    }
}
