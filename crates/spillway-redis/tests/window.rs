//! The strict shared window against a real `redis-server`: exact across processes on a manual
//! clock, Redis's own clock by default, a flushed script loaded again, and bad input.

mod common;

use common::RedisServer;
use spillway::ManualClock;
use spillway_redis::{Error, SharedWindow, Time};
use std::sync::Arc;
use std::time::Duration;

fn on(clock: &ManualClock, limit: f64) -> SharedWindow {
    let time = Time::Clock(Arc::new(clock.clone()));
    SharedWindow::new("orders", limit, Duration::from_secs(1), 2, time).unwrap()
}

#[tokio::test]
async fn three_processes_share_one_limit_exactly_for_10_seconds() {
    let redis = RedisServer::start().await;
    let mut processes = [
        redis.connect().await,
        redis.connect().await,
        redis.connect().await,
    ];
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    let window = on(&clock, 1000.0);
    // 3 requests a millisecond, one from each process: 3x the limit. Passes per 500 ms bucket,
    // and per process.
    let mut buckets = vec![0u64; 20];
    let mut per_process = [0u64; 3];
    for ms in 0..10_000u64 {
        for (process, redis) in processes.iter_mut().enumerate() {
            let checked = window.try_acquire(redis, 1).await.unwrap();
            assert_eq!(checked.now_ms, 1_700_000_000_000 + ms);
            if checked.admitted {
                buckets[(ms / 500) as usize] += 1;
                per_process[process] += 1;
            }
        }
        clock.advance_millis(1);
    }
    // Sentinel's window: any two consecutive buckets (one second) pass at most the limit, and
    // under steady overload one bucket of each pair takes it all.
    for pair in buckets.windows(2) {
        assert!(pair[0] + pair[1] <= 1000, "{buckets:?}");
    }
    assert_eq!(buckets.iter().sum::<u64>(), 10_000, "{buckets:?}");
    assert_eq!(buckets[0], 1000);
    assert!(per_process.iter().all(|&n| n > 3000), "{per_process:?}");
}

#[tokio::test]
async fn a_request_taking_more_than_one_pass_is_refused_whole() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let clock = ManualClock::starting_at_millis(10_000);
    let window = on(&clock, 10.0);
    assert!(window.try_acquire(&mut conn, 7).await.unwrap().admitted);
    let refused = window.try_acquire(&mut conn, 4).await.unwrap();
    assert!(!refused.admitted);
    assert_eq!(refused.passes, 7);
    assert!(window.try_acquire(&mut conn, 3).await.unwrap().admitted);
    // 1 s later the first bucket has left the window (Sentinel: more than the interval old).
    clock.advance_millis(1000);
    let checked = window.try_acquire(&mut conn, 10).await.unwrap();
    assert!(checked.admitted, "{checked:?}");
    assert_eq!(checked.passes, 0);
}

#[tokio::test]
async fn by_default_the_time_is_redis_own() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let window = SharedWindow::per_second("redis-time", 5.0).unwrap();
    let before = redis_time_ms(&mut conn).await;
    let checked = window.try_acquire(&mut conn, 1).await.unwrap();
    let after = redis_time_ms(&mut conn).await;
    assert!(checked.admitted);
    assert!(
        (before..=after).contains(&checked.now_ms),
        "{before} {checked:?} {after}"
    );
}

/// Redis's clock, in milliseconds.
async fn redis_time_ms(conn: &mut redis::aio::ConnectionManager) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    seconds * 1000 + micros / 1000
}

#[tokio::test]
async fn a_script_redis_forgot_is_loaded_again() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let clock = ManualClock::starting_at_millis(10_000);
    let window = on(&clock, 2.0);
    assert!(window.try_acquire(&mut conn, 1).await.unwrap().admitted);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    // The same window, its count kept: one more passes, then it is full.
    assert!(window.try_acquire(&mut conn, 1).await.unwrap().admitted);
    assert!(!window.try_acquire(&mut conn, 1).await.unwrap().admitted);
}

#[tokio::test]
async fn a_redis_error_is_an_error_and_changes_nothing() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let clock = ManualClock::starting_at_millis(10_000);
    let window = on(&clock, 2.0);
    // Something else under the window's key: Redis refuses the script's hash commands.
    let _: () = redis::cmd("SET")
        .arg(window.key())
        .arg("not a hash")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = window.try_acquire(&mut conn, 1).await.unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err}");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let kept: String = redis::cmd("GET")
        .arg(window.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kept, "not a hash");
}

#[tokio::test]
async fn an_unreachable_redis_is_a_clear_error() {
    // A port nothing listens on: the kernel's pick, released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    // One attempt: the manager's default retries with a growing backoff for about a minute.
    let config = redis::aio::ConnectionManagerConfig::new().set_number_of_retries(0);
    let connected = tokio::time::timeout(
        Duration::from_secs(30),
        client.get_connection_manager_with_config(config),
    );
    let err = connected
        .await
        .expect("refused at once")
        .map(|_| ())
        .unwrap_err();
    let err = Error::from(err);
    assert!(err.to_string().starts_with("redis: "), "{err}");
}

#[test]
fn settings_that_cannot_work_are_refused_with_why() {
    let cases: [(&str, f64, Duration, u32, &str); 6] = [
        ("", 1.0, Duration::from_secs(1), 2, "1 to 200 bytes"),
        ("a{b}", 1.0, Duration::from_secs(1), 2, "braces"),
        ("x", -1.0, Duration::from_secs(1), 2, "limit"),
        ("x", f64::NAN, Duration::from_secs(1), 2, "limit"),
        ("x", 1.0, Duration::from_micros(1500), 2, "whole number"),
        ("x", 1.0, Duration::from_secs(1), 3, "do not divide"),
    ];
    for (name, limit, interval, buckets, why) in cases {
        let err = SharedWindow::new(name, limit, interval, buckets, Time::Redis).unwrap_err();
        assert!(
            matches!(err, Error::Invalid(_)) && err.to_string().contains(why),
            "{name:?} {limit} {interval:?} {buckets}: {err}"
        );
    }
}
