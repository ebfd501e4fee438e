//! A quiet route under a leased limit, against a real `redis-server`: a request that finds its
//! process holding no pass waits for its lease's next refill (`until_ready`) and is admitted,
//! for every kind (window, bucket, concurrency), where before it was refused for want of a
//! lease. Each process's driver runs as in production; the lease's clock is a manual one, one
//! request every 2 s of it (every lease long expired in between).

mod common;

use common::RedisServer;
use spillway::ManualClock;
use spillway_redis::{
    LeaseSettings, LeasedBucket, LeasedConcurrency, LeasedWindow, SharedBucket, SharedConcurrency,
    SharedWindow, Time,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const START_MS: u64 = 1_700_000_000_000;

/// Settings with a call timeout that a loaded machine meets.
fn settings() -> LeaseSettings {
    LeaseSettings {
        call_timeout: Duration::from_secs(2),
        ..LeaseSettings::default()
    }
}

/// Ten requests, one every 2 s of `clock`: how many `take` admitted right away (as before,
/// without waiting) and how many after `until_ready`.
async fn quiet(
    clock: &ManualClock,
    take: impl Fn() -> bool,
    ready: impl AsyncFn(),
    release: impl Fn(),
) -> (u32, u32) {
    let (mut at_once, mut after_wait) = (0, 0);
    for _ in 0..10 {
        clock.advance_millis(2_000);
        if take() {
            at_once += 1;
        } else {
            ready().await;
            if take() {
                after_wait += 1;
            }
        }
        release();
    }
    (at_once, after_wait)
}

#[tokio::test]
async fn a_window_lease_admits_a_quiet_route() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let time = Time::Clock(Arc::new(clock.clone()));
    let window = SharedWindow::new("quiet-window", 300.0, Duration::from_secs(1), 2, time).unwrap();
    let lease =
        Arc::new(LeasedWindow::with_settings(window, Arc::new(clock.clone()), settings()).unwrap());
    let calls = Arc::new(AtomicU64::new(0));
    let (driven, counted) = (lease.clone(), calls.clone());
    let conn = redis.connect().await;
    tokio::spawn(async move {
        driven
            .drive(conn, move |_| {
                counted.fetch_add(1, Ordering::Relaxed);
            })
            .await;
    });
    let (at_once, after_wait) = quiet(
        &clock,
        || lease.try_acquire(1),
        async || lease.until_ready(1).await,
        || {},
    )
    .await;
    // Every one admitted, after a wait for the refill its lease had not had reason to make.
    assert_eq!((at_once, after_wait), (0, 10));
    // One refill each (with the expired pass given back in the same turn), and heartbeats.
    assert!(calls.load(Ordering::Relaxed) <= 30, "{calls:?}");
}

#[tokio::test]
async fn a_bucket_lease_admits_a_quiet_route() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let time = Time::Clock(Arc::new(clock.clone()));
    let bucket = SharedBucket::new("quiet-bucket", 300.0, 1.0, time).unwrap();
    let lease =
        Arc::new(LeasedBucket::with_settings(bucket, Arc::new(clock.clone()), settings()).unwrap());
    let (driven, conn) = (lease.clone(), redis.connect().await);
    tokio::spawn(async move { driven.drive(conn, |_| {}).await });
    let (at_once, after_wait) = quiet(
        &clock,
        || lease.try_acquire(1),
        async || lease.until_ready(1).await,
        || {},
    )
    .await;
    assert_eq!((at_once, after_wait), (0, 10));
}

#[tokio::test]
async fn a_concurrency_lease_admits_a_quiet_route() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let time = Time::Clock(Arc::new(clock.clone()));
    let shared =
        SharedConcurrency::new("quiet-places", 6, "only", Duration::from_secs(3), time).unwrap();
    let lease =
        Arc::new(LeasedConcurrency::new(shared, Arc::new(clock.clone()), settings()).unwrap());
    let (driven, conn) = (lease.clone(), redis.connect().await);
    tokio::spawn(async move { driven.drive(conn, |_| {}).await });
    let (at_once, after_wait) = quiet(
        &clock,
        || lease.try_acquire(1),
        async || lease.until_ready(1).await,
        || lease.release(1),
    )
    .await;
    // The first waits for a hold; later ones find it kept (a spare place goes back only after
    // a whole period spare, and the heartbeat keeps it) or wait for it again: none refused.
    assert_eq!(
        at_once + after_wait,
        10,
        "{at_once} at once, {after_wait} after a wait"
    );
}

#[tokio::test]
async fn a_full_limit_is_refused_at_once_without_waiting() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let time = Time::Clock(Arc::new(clock.clone()));
    let window = SharedWindow::new("quiet-full", 2.0, Duration::from_secs(1), 2, time).unwrap();
    let lease =
        Arc::new(LeasedWindow::with_settings(window, Arc::new(clock.clone()), settings()).unwrap());
    let (driven, conn) = (lease.clone(), redis.connect().await);
    tokio::spawn(async move { driven.drive(conn, |_| {}).await });
    let mut admitted = 0;
    for _ in 0..5 {
        lease.until_ready(1).await;
        admitted += u32::from(lease.try_acquire(1));
    }
    assert_eq!(admitted, 2, "the limit of 2 this window");
    // The limit is known full until its next bucket: no wait, a refusal.
    assert!(lease.is_ready(1));
    assert!(!lease.try_acquire(1));
}
