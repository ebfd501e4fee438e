//! The leased check against a real `redis-server`: processes admit from batches they lease,
//! within the documented bound, with few calls to Redis; unused passes go back; a full window
//! is not asked again before its next bucket; the driver refills in the background.

mod common;

use common::RedisServer;
use spillway::{Clock, ManualClock};
use spillway_redis::{Fallback, LeaseMode, LeaseSettings, LeasedWindow, SharedWindow, Time};
use std::sync::Arc;
use std::time::Duration;

const START_MS: u64 = 1_700_000_000_000;

fn window(clock: &ManualClock, limit: f64) -> SharedWindow {
    let time = Time::Clock(Arc::new(clock.clone()));
    SharedWindow::new("leased", limit, Duration::from_secs(1), 2, time).unwrap()
}

fn leased(clock: &ManualClock, limit: f64, max_batch: u64) -> LeasedWindow {
    LeasedWindow::new(window(clock, limit), Arc::new(clock.clone()), max_batch).unwrap()
}

#[tokio::test]
async fn three_leasing_processes_stay_within_the_bound_with_few_calls() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let max_batch = 10;
    let mut processes = Vec::new();
    for _ in 0..3 {
        processes.push((leased(&clock, 1000.0, max_batch), redis.connect().await));
    }
    // 3 requests a millisecond, one from each process (3x the limit), for 10 s; each process
    // refills when its lease says so, before its request (its driver's job in production).
    let mut buckets = vec![0u64; 20];
    let mut calls = 0u64;
    for ms in 0..10_000u64 {
        for (lease, conn) in &mut processes {
            if lease.wants_refill() {
                lease.refill(conn).await.unwrap();
                calls += 1;
            }
            if lease.try_acquire(1) {
                buckets[(ms / 500) as usize] += 1;
            }
        }
        clock.advance_millis(1);
    }
    let bound = 1000 + 3 * 2 * max_batch;
    for pair in buckets.windows(2) {
        assert!(pair[0] + pair[1] <= bound, "{buckets:?}");
    }
    let admitted: u64 = buckets.iter().sum();
    println!("admitted {admitted} with {calls} calls to Redis: {buckets:?}");
    // What docs/cluster.md quotes, on this manual clock (the run is deterministic): 10,000
    // admitted, the strict check's count on the same arrivals, and 1,063 refills, within 2%
    // (a batch that stopped following demand, at 2,500 refills, fails).
    assert!(admitted.abs_diff(10_000) <= 200, "{admitted}: {buckets:?}");
    assert!(
        calls.abs_diff(1_063) <= 21,
        "{calls} calls for 30,000 requests"
    );
}

#[tokio::test]
async fn an_expired_lease_gives_its_unused_passes_back() {
    let redis = RedisServer::start().await;
    let (mut a_conn, mut b_conn) = (redis.connect().await, redis.connect().await);
    let clock = ManualClock::starting_at_millis(START_MS);
    let (a, b) = (leased(&clock, 10.0, 8), leased(&clock, 10.0, 8));
    // A asks for 8 (refused: it holds nothing yet), then leases a batch of 8 and uses 1.
    for _ in 0..8 {
        assert!(!a.try_acquire(1));
    }
    assert_eq!(a.refill(&mut a_conn).await.unwrap(), 8);
    assert!(a.try_acquire(1));
    // B finds 2 left in the window.
    for _ in 0..8 {
        assert!(!b.try_acquire(1));
    }
    assert_eq!(b.refill(&mut b_conn).await.unwrap(), 2);
    // A's lease expires with 7 unused: its next refill gives them back, and B can have them
    // while their bucket is still in the window.
    clock.advance_millis(600);
    assert_eq!(a.held(), 0);
    assert!(!a.try_acquire(1));
    // Its batch follows its demand since its last refill: 2 asked.
    assert_eq!(a.refill(&mut a_conn).await.unwrap(), 2);
    for _ in 0..8 {
        assert!(!b.try_acquire(1));
    }
    assert_eq!(b.held(), 0);
    // B's own 2, unused, go back too: 10 - (8 + 2 - 7 - 2) - 2 = 7; without the returns, 0.
    assert_eq!(b.refill(&mut b_conn).await.unwrap(), 7);
}

#[tokio::test]
async fn a_full_window_is_not_asked_again_before_its_next_bucket() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let clock = ManualClock::starting_at_millis(START_MS + 100);
    let lease = leased(&clock, 2.0, 5);
    for _ in 0..5 {
        assert!(!lease.try_acquire(1));
    }
    assert_eq!(lease.refill(&mut conn).await.unwrap(), 2);
    assert!(lease.try_acquire(1) && lease.try_acquire(1) && !lease.try_acquire(1));
    // Full until its next bucket begins, at START_MS + 500.
    clock.advance_millis(399);
    assert!(!lease.wants_refill());
    clock.advance_millis(1);
    assert!(lease.wants_refill());
    // The window still holds the 2 passes of its first bucket.
    assert_eq!(lease.refill(&mut conn).await.unwrap(), 0);
}

#[tokio::test]
async fn the_driver_refills_when_a_request_finds_the_lease_short() {
    let redis = RedisServer::start().await;
    let clock: Arc<dyn spillway::Clock> = Arc::new(spillway::SystemClock::new());
    let window = SharedWindow::per_second("driven", 100.0).unwrap();
    let lease = Arc::new(LeasedWindow::new(window, clock, 4).unwrap());
    let (refilled, mut refills) = tokio::sync::mpsc::unbounded_channel();
    let driver = {
        let (lease, conn) = (lease.clone(), redis.connect().await);
        tokio::spawn(async move {
            lease
                .drive(conn, |outcome| {
                    let _ = refilled.send(outcome.map_err(|err| err.to_string()));
                })
                .await;
        })
    };
    // Nothing is held before a request asks; the driver's first call may be its heartbeat.
    assert!(!lease.try_acquire(1));
    let granted = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match refills.recv().await.unwrap() {
                Ok(0) => continue,
                outcome => return outcome,
            }
        }
    });
    // A batch of at least the one asked for (more if it came soon after the heartbeat: the
    // demand at that pace over a lease's life), at most `max_batch`.
    let granted = granted.await.expect("a refill within 30 s");
    assert!(matches!(granted, Ok(1..=4)), "{granted:?}");
    assert!(lease.try_acquire(1));
    driver.abort();
}

#[test]
fn a_batch_of_zero_is_refused() {
    let clock = ManualClock::new();
    let err = LeasedWindow::new(window(&clock, 1.0), Arc::new(clock), 0).unwrap_err();
    assert!(err.to_string().contains("max_batch"), "{err}");
}

fn with(clock: &ManualClock, limit: f64, settings: LeaseSettings) -> LeasedWindow {
    LeasedWindow::with_settings(window(clock, limit), Arc::new(clock.clone()), settings).unwrap()
}

/// A connection manager that gives up on a dead Redis at once (the lease's probes retry).
async fn fast_failing(redis: &RedisServer) -> redis::aio::ConnectionManager {
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_number_of_retries(1)
        .set_connection_timeout(Duration::from_millis(200))
        .set_max_delay(100);
    let client = redis::Client::open(redis.url()).unwrap();
    client
        .get_connection_manager_with_config(config)
        .await
        .unwrap()
}

#[tokio::test]
async fn heartbeats_count_the_live_processes_and_a_silent_one_leaves() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let mut processes = Vec::new();
    for _ in 0..3 {
        processes.push((leased(&clock, 300.0, 10), redis.connect().await));
    }
    assert_eq!(
        processes[0].0.live_processes(),
        1,
        "assumed before any heartbeat"
    );
    for (lease, conn) in &mut processes {
        assert!(lease.wants_refill(), "a first heartbeat is due at once");
        lease.refill(conn).await.unwrap();
    }
    let counted: Vec<u64> = processes
        .iter()
        .map(|(lease, _)| lease.live_processes())
        .collect();
    assert_eq!(counted, [1, 2, 3]);
    // The third goes quiet; the others beat every second (a third of the 3 s TTL).
    let (quiet, _) = processes.pop().unwrap();
    for _ in 0..4 {
        clock.advance_millis(1000);
        for (lease, conn) in &mut processes {
            assert!(lease.wants_refill());
            lease.refill(conn).await.unwrap();
        }
    }
    assert!(processes
        .iter()
        .all(|(lease, _)| lease.live_processes() == 2));
    drop(quiet);
}

#[tokio::test]
async fn redis_killed_and_restarted_falls_back_to_the_share_then_returns() {
    let mut redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let mut processes = Vec::new();
    for _ in 0..3 {
        let settings = LeaseSettings::default();
        processes.push((with(&clock, 300.0, settings), fast_failing(&redis).await));
    }
    for (lease, conn) in &mut processes {
        lease.refill(conn).await.unwrap();
    }
    let (lease, conn) = &mut processes[2];
    assert_eq!(lease.live_processes(), 3);
    assert_eq!(lease.mode(), LeaseMode::Global);

    redis.kill().await;
    clock.advance_millis(2000);
    // The first failed call switches to the fallback.
    assert!(lease.refill(conn).await.is_err());
    assert_eq!(lease.mode(), LeaseMode::Fallback);
    // One request a millisecond for a second: the share, 300 / 3, passes; none fails.
    let mut admitted = 0;
    for _ in 0..1000 {
        if lease.try_acquire(1) {
            admitted += 1;
        }
        clock.advance_millis(1);
    }
    assert_eq!(admitted, 100);
    // Probed every 500 ms while it stays down.
    assert!(lease.wants_refill());
    assert!(lease.refill(conn).await.is_err());
    clock.advance_millis(499);
    assert!(!lease.wants_refill());
    clock.advance_millis(1);
    assert!(lease.wants_refill());

    redis.restart().await;
    // The connection manager reconnects in the background after its failures: probe, 500 ms
    // apart on the lease's clock, until it answers (within 30 s of real time).
    let real = spillway::SystemClock::new();
    let restarted = real.now_millis();
    let mut probes = 0;
    let recovered = tokio::time::timeout(Duration::from_secs(30), async {
        while lease.mode() == LeaseMode::Fallback {
            if lease.wants_refill() {
                probes += 1;
                let _ = lease.refill(conn).await;
            }
            clock.advance_millis(500);
        }
    });
    recovered
        .await
        .expect("back to the global limit within 30 s");
    assert_eq!(lease.mode(), LeaseMode::Global);
    println!(
        "back to the global limit at probe {probes}, {} ms after the restart",
        real.now_millis() - restarted
    );
    // Global again: it leases from the (new, empty) window.
    for _ in 0..5 {
        assert!(!lease.try_acquire(1));
    }
    assert_eq!(lease.refill(conn).await.unwrap(), 5);
    assert!(lease.try_acquire(1));
}

#[tokio::test]
async fn failing_open_or_closed_admits_everything_or_nothing() {
    let mut redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let open = with(
        &clock,
        10.0,
        LeaseSettings {
            fallback: Fallback::Open,
            ..LeaseSettings::default()
        },
    );
    let closed = with(
        &clock,
        10.0,
        LeaseSettings {
            fallback: Fallback::Closed,
            ..LeaseSettings::default()
        },
    );
    let mut conn = fast_failing(&redis).await;
    redis.kill().await;
    assert!(open.refill(&mut conn).await.is_err());
    assert!(closed.refill(&mut conn).await.is_err());
    assert!((0..100).all(|_| open.try_acquire(1)));
    assert!((0..100).all(|_| !closed.try_acquire(1)));
}

#[tokio::test]
async fn a_lease_takes_what_single_checks_would_pass_over_a_long_window() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let time = Time::Clock(Arc::new(clock.clone()));
    // 1.5 a second over one 20 s bucket: Sentinel passes a check while passes / 20 + 1 <= 1.5,
    // so 11 checks of one pass in the window; a lease of 20 gets those 11, no fewer.
    let window = SharedWindow::new("long", 1.5, Duration::from_secs(20), 1, time.clone()).unwrap();
    let lease = LeasedWindow::new(window, Arc::new(clock.clone()), 20).unwrap();
    for _ in 0..20 {
        assert!(!lease.try_acquire(1));
    }
    assert_eq!(lease.refill(&mut conn).await.unwrap(), 11);
    // The strict check on the same window agrees: full.
    let strict = SharedWindow::new("long", 1.5, Duration::from_secs(20), 1, time).unwrap();
    assert!(!strict.try_acquire(&mut conn, 1).await.unwrap().admitted);
    // And on a fresh one, 11 single checks pass, the 12th does not.
    let fresh = SharedWindow::new(
        "long-fresh",
        1.5,
        Duration::from_secs(20),
        1,
        Time::Clock(Arc::new(clock.clone())),
    )
    .unwrap();
    for _ in 0..11 {
        assert!(fresh.try_acquire(&mut conn, 1).await.unwrap().admitted);
    }
    assert!(!fresh.try_acquire(&mut conn, 1).await.unwrap().admitted);
}
