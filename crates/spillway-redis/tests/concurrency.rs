//! The shared concurrency limit against a real `redis-server`: never more permits in use than
//! the limit across processes, a dead holder's permits back after its TTL (and not before), a
//! renewal keeping them, and bad input.

mod common;

use common::RedisServer;
use spillway::ManualClock;
use spillway_redis::{Error, SharedConcurrency, Time};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const START_MS: u64 = 1_700_000_000_000;
const TTL: Duration = Duration::from_secs(3);

fn holder(clock: &ManualClock, name: &str, limit: u64, who: &str) -> SharedConcurrency {
    let time = Time::Clock(Arc::new(clock.clone()));
    SharedConcurrency::new(name, limit, who, TTL, time).unwrap()
}

#[tokio::test]
async fn a_dead_holders_permits_come_back_after_its_ttl_and_not_before() {
    let redis = RedisServer::start().await;
    let (mut a_conn, mut b_conn) = (redis.connect().await, redis.connect().await);
    let clock = ManualClock::starting_at_millis(START_MS);
    let a = holder(&clock, "jobs", 5, "a");
    let b = holder(&clock, "jobs", 5, "b");
    let taken = a.try_acquire(&mut a_conn, 5).await.unwrap();
    assert!(taken.admitted);
    assert_eq!((taken.in_use, taken.mine, taken.live), (0, 5, 1));
    // A dies holding all 5: B is refused until A's heartbeat runs out, 3 s after its call.
    clock.advance(TTL - Duration::from_millis(1));
    let refused = b.try_acquire(&mut b_conn, 1).await.unwrap();
    assert!(!refused.admitted);
    assert_eq!((refused.in_use, refused.mine, refused.live), (5, 0, 2));
    clock.advance_millis(1);
    let freed = b.try_acquire(&mut b_conn, 5).await.unwrap();
    assert!(freed.admitted);
    assert_eq!((freed.in_use, freed.mine, freed.live), (0, 5, 1));
    // A comes back late and releases what it thought it held: its permits were freed already,
    // and B's stay taken.
    assert_eq!(a.release(&mut a_conn, 5).await.unwrap(), 0);
    assert!(!a.try_acquire(&mut a_conn, 1).await.unwrap().admitted);
}

#[tokio::test]
async fn a_renewed_hold_is_kept() {
    let redis = RedisServer::start().await;
    let (mut a_conn, mut b_conn) = (redis.connect().await, redis.connect().await);
    let clock = ManualClock::starting_at_millis(START_MS);
    let a = holder(&clock, "renewed", 2, "a");
    let b = holder(&clock, "renewed", 2, "b");
    assert!(a.try_acquire(&mut a_conn, 2).await.unwrap().admitted);
    for _ in 0..5 {
        clock.advance(TTL / 2);
        assert_eq!(a.renew(&mut a_conn).await.unwrap().mine, 2);
        assert!(!b.try_acquire(&mut b_conn, 1).await.unwrap().admitted);
    }
    assert_eq!(a.release(&mut a_conn, 1).await.unwrap(), 1);
    assert!(b.try_acquire(&mut b_conn, 1).await.unwrap().admitted);
    assert!(!b.try_acquire(&mut b_conn, 1).await.unwrap().admitted);
}

#[tokio::test]
async fn racing_holders_never_exceed_the_limit() {
    let redis = RedisServer::start().await;
    let limit = 4u64;
    // Three processes, each with six tasks taking and giving back permits over its own
    // connection, on Redis's clock: the permits the tasks hold at once (counted after a grant,
    // uncounted before a release) never exceed the limit.
    let in_flight = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let granted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for process in 0..3 {
        let shared = SharedConcurrency::new(
            "raced",
            limit,
            &format!("process-{process}"),
            Duration::from_secs(30),
            Time::Redis,
        )
        .unwrap();
        let conn = redis.connect().await;
        for _ in 0..6 {
            let (shared, mut conn) = (shared.clone(), conn.clone());
            let (in_flight, most, granted) = (in_flight.clone(), most.clone(), granted.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..150 {
                    if shared.try_acquire(&mut conn, 1).await.unwrap().admitted {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        granted.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        assert_eq!(shared.release(&mut conn, 1).await.unwrap(), 1);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= limit,
        "{most} permits in use at once, limit {limit}"
    );
    assert!(granted.load(Ordering::SeqCst) > 0);
    // All given back: the whole limit is free again.
    let mut conn = redis.connect().await;
    let check = SharedConcurrency::new("raced", limit, "checker", TTL, Time::Redis).unwrap();
    let all = check.try_acquire(&mut conn, limit as u32).await.unwrap();
    assert!(all.admitted && all.in_use == 0, "{all:?}");
    println!(
        "{} granted, at most {most} at once",
        granted.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn a_redis_error_is_an_error_and_changes_nothing() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let shared = holder(&clock, "wrongtype", 1, "a");
    let _: () = redis::cmd("SET")
        .arg(shared.key())
        .arg("not a hash")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = shared.try_acquire(&mut conn, 1).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
}

#[test]
fn settings_that_cannot_work_are_refused_with_why() {
    let cases: [(&str, &str, Duration, &str); 4] = [
        ("", "a", TTL, "1 to 200 bytes"),
        ("x{y}", "a", TTL, "braces"),
        ("x", "", TTL, "holder"),
        ("x", "a", Duration::from_micros(10), "TTL"),
    ];
    for (name, who, ttl, why) in cases {
        let err = SharedConcurrency::new(name, 1, who, ttl, Time::Redis).unwrap_err();
        assert!(
            matches!(err, Error::Invalid(_)) && err.to_string().contains(why),
            "{name:?} {who:?} {ttl:?}: {err}"
        );
    }
}
