//! Start-up and the switches to the fallback and back, against a real `redis-server` killed and
//! restarted empty, on a manual clock shared by the processes and the scripts (so that every
//! count is exact): the first requests of a process are decided by Redis, a fallback starts
//! from what its process admitted in the current window, and what it admitted is counted in
//! the window when Redis answers again.

mod common;

use common::RedisServer;
use spillway::ManualClock;
use spillway_redis::{LeaseMode, LeaseSettings, LeasedWindow, SharedWindow, Strict, Time};
use std::sync::Arc;
use std::time::Duration;

/// A whole second: the windows' buckets start at it.
const START_MS: u64 = 1_700_000_000_000;
/// Longest any one wait may take (never reached when the test passes).
const STEP: Duration = Duration::from_secs(30);
/// The shared limit, a second, in two buckets.
const LIMIT: f64 = 300.0;

fn window(clock: &ManualClock, name: &str) -> SharedWindow {
    let time = Time::Clock(Arc::new(clock.clone()));
    SharedWindow::new(name, LIMIT, Duration::from_secs(1), 2, time).unwrap()
}

fn settings() -> LeaseSettings {
    LeaseSettings {
        probe_every: Duration::from_millis(20),
        ..LeaseSettings::default()
    }
}

/// A strict check of `name` whose connection task runs on `redis` (not yet answered).
fn strict(redis: &RedisServer, clock: &ManualClock, name: &str) -> Arc<Strict<SharedWindow>> {
    let check = Strict::new(window(clock, name), Arc::new(clock.clone()), settings()).map(Arc::new);
    let check = check.unwrap();
    let connector = check.clone();
    let client = redis::Client::open(redis.url()).unwrap();
    tokio::spawn(async move { connector.connect(client).await });
    check
}

/// Waits until every check is in `mode`.
async fn until_all(checks: &[Arc<Strict<SharedWindow>>], mode: LeaseMode) {
    let reached = tokio::time::timeout(STEP, async {
        while checks.iter().any(|check| check.mode() != mode) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    reached.await.unwrap_or_else(|_| panic!("all {mode:?}"));
}

/// How many of `count` checks of one, all at once on `check`, pass.
async fn burst(check: &Arc<Strict<SharedWindow>>, count: usize) -> usize {
    let checks = (0..count).map(|_| {
        let check = check.clone();
        tokio::spawn(async move { check.check(1).await.is_ok() })
    });
    let mut admitted = 0;
    for decided in checks.collect::<Vec<_>>() {
        admitted += usize::from(decided.await.unwrap());
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_strict_checks_of_three_processes_are_decided_by_redis() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let checks: Vec<_> = (0..3).map(|_| strict(&redis, &clock, "first")).collect();
    assert!(checks.iter().all(|c| c.mode() == LeaseMode::Starting));
    // 200 first requests on each at once, while each has just started: each waits for its
    // process's first answer, and then Redis decides. Before, the fallback (one process
    // assumed, so the whole limit) decided those that came before the first answer: up to
    // 600 passed.
    let bursts: Vec<_> = checks
        .iter()
        .map(|check| {
            let check = check.clone();
            tokio::spawn(async move { burst(&check, 200).await })
        })
        .collect();
    let mut admitted = 0;
    for each in bursts {
        admitted += each.await.unwrap();
    }
    println!("first requests: {admitted} of 600 admitted against {LIMIT}");
    assert_eq!(admitted, LIMIT as usize);
    assert!(checks.iter().all(|c| c.mode() == LeaseMode::Global));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_fallback_starts_from_its_admissions_and_redis_counts_it_on_return() {
    let mut redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let checks: Vec<_> = (0..3).map(|_| strict(&redis, &clock, "killed")).collect();
    until_all(&checks, LeaseMode::Global).await;
    // First bucket: 60 through Redis in each process.
    for check in &checks {
        assert_eq!(burst(check, 60).await, 60);
    }
    assert_eq!(checks[0].live_processes(), 3);

    redis.kill().await;
    // Each process's next check fails and falls back; the fallback admits it (61 of the share
    // of 100 in its local window).
    for check in &checks {
        assert!(check.check(1).await.is_ok());
    }
    until_all(&checks, LeaseMode::Fallback).await;
    // The second bucket: the share is 100 a second over the same window, which holds this
    // process's 61 already. Before, the local window started empty: 100 more each (480 in
    // the two buckets against 300).
    clock.advance_millis(600);
    let mut fallback = 0;
    for check in &checks {
        let admitted = burst(check, 100).await;
        assert_eq!(admitted, 39, "share 100, 61 admitted already");
        fallback += admitted + 1;
    }
    assert_eq!(
        180 + fallback,
        LIMIT as usize,
        "the two buckets hold the limit"
    );

    // Redis comes back empty. At its first answer each process reports its fallback's 40
    // (1 in the first bucket, 39 in the second): the window knows them.
    redis.restart().await;
    until_all(&checks, LeaseMode::Global).await;
    clock.advance_millis(400);
    // The next bucket's window holds the second bucket's 117: 183 more, exactly. Without the
    // report, 300 more (417 in those two buckets). Each process, just back, keeps to its
    // share less its 39 in the window, 61, even when Redis has room for more: the first one
    // offered 300 took 61, where before it took all 183.
    let mut after = 0;
    for (i, check) in checks.iter().enumerate() {
        let admitted = burst(check, if i == 0 { 300 } else { 100 }).await;
        assert_eq!(admitted, 61, "process {i}: the share less its 39");
        after += admitted;
    }
    println!("fallback admitted {fallback}, then {after} in the window after the restart");
    assert_eq!(after, 300 - 117);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_fallback_starts_from_its_admissions_and_redis_counts_it_on_return() {
    let mut redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let max_batch = 10;
    let lease = || {
        let settings = LeaseSettings {
            max_batch,
            ..settings()
        };
        LeasedWindow::with_settings(window(&clock, "leased"), Arc::new(clock.clone()), settings)
            .unwrap()
    };
    let mut processes = Vec::new();
    for _ in 0..3 {
        let lease = lease();
        assert_eq!(lease.mode(), LeaseMode::Starting);
        // Nothing is admitted before Redis first answers.
        assert!(!lease.try_acquire(1));
        processes.push((lease, redis.connect().await));
    }
    // First bucket: 60 admitted from leases in each process.
    for (lease, conn) in &mut processes {
        let mut admitted = 0;
        while admitted < 60 {
            if lease.try_acquire(1) {
                admitted += 1;
            } else {
                lease.refill(conn).await.unwrap();
            }
        }
        assert_eq!(lease.mode(), LeaseMode::Global);
    }
    // A heartbeat each, so that each knows the fleet is three.
    for (lease, conn) in &mut processes {
        lease.refill(conn).await.unwrap();
        assert_eq!(lease.live_processes(), 3);
    }

    redis.kill().await;
    for (lease, conn) in &mut processes {
        assert!(lease.refill(conn).await.is_err());
        assert_eq!(lease.mode(), LeaseMode::Fallback);
    }
    // The second bucket: the share, 100, over a local window that holds this process's 60.
    clock.advance_millis(600);
    let mut fallback = 0;
    for (lease, _) in &processes {
        let admitted = (0..100).filter(|_| lease.try_acquire(1)).count();
        assert_eq!(admitted, 40, "share 100, 60 admitted already");
        fallback += admitted;
    }

    // Redis comes back empty; each process's first refill reports its fallback's 40 first.
    redis.restart().await;
    for (lease, conn) in &mut processes {
        *conn = redis.connect().await;
        lease.refill(conn).await.unwrap();
        assert_eq!(lease.mode(), LeaseMode::Global);
    }
    // The next bucket: its window holds the 120 reported and the leases just taken, so the
    // fleet admits at most 180 more in it, from leases. Without the report, up to 300 more.
    clock.advance_millis(400);
    let mut after = 0;
    for _ in 0..100 {
        for (lease, conn) in &mut processes {
            if lease.try_acquire(1) {
                after += 1;
            } else if lease.wants_refill() {
                lease.refill(conn).await.unwrap();
            }
        }
    }
    println!("fallback admitted {fallback}, then {after} in the window after the restart");
    assert!(after <= 300 - 120, "{after} after the restart");
    assert!(
        after >= 120,
        "{after}: the leases still admit what the window has room for"
    );
}

/// Admits one at a time from `lease` until it refuses with no refill due, or `most` are in;
/// refilling on `conn` when it asks.
async fn admit_all(
    lease: &LeasedWindow,
    conn: &mut redis::aio::ConnectionManager,
    most: usize,
) -> usize {
    let mut admitted = 0;
    while admitted < most {
        if lease.try_acquire(1) {
            admitted += 1;
        } else if lease.wants_refill() {
            lease.refill(conn).await.unwrap();
        } else {
            break;
        }
    }
    admitted
}

/// Three processes leasing window `key` of `redis` (batches of 10): in the first bucket 60
/// admitted from leases in each, then a heartbeat each (the fleet is 3); then Redis killed.
async fn three_then_killed(
    redis: &mut RedisServer,
    clock: &ManualClock,
    key: &str,
) -> Vec<(LeasedWindow, redis::aio::ConnectionManager)> {
    let lease = || {
        let settings = LeaseSettings {
            max_batch: 10,
            ..settings()
        };
        LeasedWindow::with_settings(window(clock, key), Arc::new(clock.clone()), settings).unwrap()
    };
    let mut processes = Vec::new();
    for _ in 0..3 {
        processes.push((lease(), redis.connect().await));
    }
    for (lease, conn) in &mut processes {
        assert_eq!(admit_all(lease, conn, 60).await, 60);
    }
    for (lease, conn) in &mut processes {
        lease.refill(conn).await.unwrap();
        assert_eq!(lease.live_processes(), 3);
    }
    redis.kill().await;
    processes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_back_first_keeps_to_its_share_until_the_others_are_back() {
    let mut redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let mut processes = three_then_killed(&mut redis, &clock, "stagger").await;
    for (lease, conn) in &mut processes {
        assert!(lease.refill(conn).await.is_err());
    }
    // The second bucket: 40 each in the fallback (the share, 100, less the 60).
    clock.advance_millis(600);
    for (lease, _) in &processes {
        assert_eq!((0..100).filter(|_| lease.try_acquire(1)).count(), 40);
    }
    // Redis comes back empty, and only the first process has probed it yet: Redis counts its
    // heartbeat alone and knows of its 40, not of the others'.
    redis.restart().await;
    for (_, conn) in &mut processes {
        *conn = redis.connect().await;
    }
    let (first, conn) = &mut processes[0];
    first.refill(conn).await.unwrap();
    assert_eq!(first.mode(), LeaseMode::Global);
    assert!(first.keeps_to_share());
    // The next bucket: the window [500, 1500) ms holds 40 of each process's. The first one
    // admits its share less its 40: 60; before, the lease took what Redis had room for, 260,
    // while the others, still in their fallbacks, admitted their 60 each.
    clock.advance_millis(400);
    let (first, conn) = &mut processes[0];
    let first_back = admit_all(first, conn, 300).await;
    let mut others = 0;
    for (lease, _) in &processes[1..] {
        assert_eq!(lease.mode(), LeaseMode::Fallback);
        others += (0..100).filter(|_| lease.try_acquire(1)).count();
    }
    println!("back first {first_back}, the others in their fallbacks {others}");
    assert_eq!(first_back, 60, "the share, less the 40 of the fallback");
    assert_eq!(others, 120);
    assert_eq!(
        3 * 40 + first_back + others,
        LIMIT as usize,
        "the window holds the limit"
    );
    // The others come back and report; once every other process has had the chance to probe
    // since the first one's return (a probe period, 20 ms here, and the longest probe, 13 call
    // timeouts of 100 ms for a window of two buckets: 1,320 ms), it takes what Redis has room
    // for again.
    for (lease, conn) in &mut processes[1..] {
        lease.refill(conn).await.unwrap();
        assert_eq!(lease.mode(), LeaseMode::Global);
    }
    // 1 ms before the end (its return was at 600 ms; now 1,919 ms): still its share, 100 less
    // the 60 it admitted at 1,000 ms in the window's first bucket.
    clock.advance_millis(919);
    let (first, conn) = &mut processes[0];
    assert_eq!(admit_all(first, conn, 300).await, 40);
    assert!(first.keeps_to_share());
    clock.advance_millis(401);
    assert!(!first.keeps_to_share());
    let (first, conn) = &mut processes[0];
    let alone = admit_all(first, conn, 300).await;
    println!("then alone in a new window {alone}");
    assert!(
        alone > 100,
        "{alone}: back to the shared limit, not the share"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_soon_after_an_empty_restart_keeps_the_fallback_s_share() {
    let mut redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let mut processes = three_then_killed(&mut redis, &clock, "flap").await;
    for (lease, conn) in &mut processes {
        assert!(lease.refill(conn).await.is_err());
    }
    clock.advance_millis(600);
    for (lease, _) in &processes {
        assert_eq!((0..100).filter(|_| lease.try_acquire(1)).count(), 40);
    }
    // Redis comes back empty: the first process back is the only one it counts. Then it fails
    // again at once.
    redis.restart().await;
    let (first, conn) = &mut processes[0];
    *conn = redis.connect().await;
    first.refill(conn).await.unwrap();
    // Redis lost the others' heartbeats and counts it alone; it counts the fleet as before.
    assert_eq!(first.live_processes(), 3);
    redis.kill().await;
    assert!(first.refill(conn).await.is_err());
    assert_eq!(first.mode(), LeaseMode::Fallback);
    // Its fallback still shares the limit among three: 100 less its 40 in the window. Before,
    // among the one Redis counted last: 300 less its 40.
    clock.advance_millis(400);
    let admitted = (0..300).filter(|_| first.try_acquire(1)).count();
    assert_eq!(admitted, 60);
    // And for as long as the outage lasts: 5 s on, in a window of its own, the share of three.
    // (Found by an attack: a strict limit of 100 admitted 100 + 50 + 33 a second through a
    // second outage, each process's share counted among those Redis had counted when it came
    // back.)
    clock.advance_millis(5_000);
    let admitted = (0..300).filter(|_| first.try_acquire(1)).count();
    assert_eq!(admitted, 100);
    // Redis back; the second process is back too, the third never comes. A heartbeat TTL (3 s)
    // on Redis after its return, the first believes Redis's count again: two, whose fallback
    // shares are 150 each.
    redis.restart().await;
    for (lease, conn) in &mut processes[..2] {
        *conn = redis.connect().await;
        lease.refill(conn).await.unwrap();
    }
    let (first, conn) = &mut processes[0];
    clock.advance_millis(2_999);
    first.refill(conn).await.unwrap();
    redis.kill().await;
    assert!(first.refill(conn).await.is_err());
    clock.advance_millis(1_001);
    let admitted = (0..300).filter(|_| first.try_acquire(1)).count();
    assert_eq!(admitted, 100, "3 s on Redis less 1 ms: still among three");
    redis.restart().await;
    *conn = redis.connect().await;
    first.refill(conn).await.unwrap();
    let (second, conn) = &mut processes[1];
    *conn = redis.connect().await;
    second.refill(conn).await.unwrap();
    clock.advance_millis(1_500);
    second.refill(conn).await.unwrap();
    let (first, conn) = &mut processes[0];
    clock.advance_millis(1_500);
    first.refill(conn).await.unwrap();
    assert_eq!(first.live_processes(), 2);
    redis.kill().await;
    assert!(first.refill(conn).await.is_err());
    clock.advance_millis(1_000);
    let admitted = (0..300).filter(|_| first.try_acquire(1)).count();
    assert_eq!(admitted, 150, "a TTL on Redis: two, as Redis counts them");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_that_outlived_a_failure_is_charged_what_the_fallback_admitted() {
    use spillway_redis::{LeasedBucket, SharedBucket};
    let redis = RedisServer::start().await;
    // A Redis that dies: the calls that fail while the bucket's own Redis keeps its state (a
    // network failure, as this process sees it).
    let mut gone = RedisServer::start().await;
    let mut dead = gone.connect().await;
    gone.kill().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let time = Time::Clock(Arc::new(clock.clone()));
    let bucket = || SharedBucket::new("blip", 100.0, 1.0, time.clone()).unwrap();
    let lease = LeasedBucket::with_settings(bucket(), Arc::new(clock.clone()), settings());
    let lease = lease.unwrap();
    let mut conn = redis.connect().await;
    lease.refill(&mut conn).await.unwrap();
    // A second unused: the bucket stores its burst, 100.
    clock.advance_millis(1000);
    assert!(lease.refill(&mut dead).await.is_err());
    assert_eq!(lease.mode(), LeaseMode::Fallback);
    let fallback = (0..150).filter(|_| lease.try_acquire(1)).count();
    assert_eq!(fallback, 100, "the share of one process: 100 a second");
    // Back: the report spends the 100 stored first, so the bucket has nothing left for a
    // strict check. Without it, the 100 stored would pass a second burst.
    lease.refill(&mut conn).await.unwrap();
    assert_eq!(lease.mode(), LeaseMode::Global);
    let check = bucket().try_acquire(&mut conn, 1).await.unwrap();
    assert!(!check.admitted, "the bucket was charged the fallback's 100");
}

/// A leased bucket `name` (100 a second) whose Redis died after a second unused and came back
/// empty, and whose fallback admitted 40, then 40 more 600 ms later (two reports, one per half
/// second it groups them by), 100 ms before the restart; with the bucket's maker and a
/// connection to the restarted Redis.
async fn lost_bucket(
    redis: &mut RedisServer,
    clock: &ManualClock,
    name: &str,
) -> (
    spillway_redis::LeasedBucket,
    impl Fn() -> spillway_redis::SharedBucket,
    redis::aio::ConnectionManager,
) {
    use spillway_redis::{LeasedBucket, SharedBucket};
    let time = Time::Clock(Arc::new(clock.clone()));
    let name = name.to_owned();
    let bucket = move || SharedBucket::new(&name, 100.0, 1.0, time.clone()).unwrap();
    let lease = LeasedBucket::with_settings(bucket(), Arc::new(clock.clone()), settings());
    let lease = lease.unwrap();
    let mut conn = redis.connect().await;
    lease.refill(&mut conn).await.unwrap();
    clock.advance_millis(1000);
    redis.kill().await;
    assert!(lease.refill(&mut conn).await.is_err());
    assert_eq!(lease.mode(), LeaseMode::Fallback);
    assert_eq!((0..40).filter(|_| lease.try_acquire(1)).count(), 40);
    clock.advance_millis(600);
    assert_eq!((0..40).filter(|_| lease.try_acquire(1)).count(), 40);
    clock.advance_millis(100);
    redis.restart().await;
    let conn = redis.connect().await;
    (lease, bucket, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_redis_lost_is_not_charged_what_the_fallback_admitted_before_it_was_made() {
    let mut redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let (lease, bucket, mut conn) = lost_bucket(&mut redis, &clock, "lost").await;
    // Another process's check makes the bucket again before this one's reports reach it.
    clock.advance_millis(10);
    let first = bucket().try_acquire(&mut conn, 1).await.unwrap();
    assert!(first.admitted, "a new bucket is free from its making");
    // Both reports are of passes admitted before the bucket was made: neither is charged.
    // (Before, the first report made the bucket and the second spent 40 permits of it, and
    // the fleet was refused for 400 ms.)
    clock.advance_millis(10);
    lease.refill(&mut conn).await.unwrap();
    assert_eq!(lease.mode(), LeaseMode::Global);
    // The lease took its batch (100 ms of the rate at most): 150 ms on, the bucket is free
    // unless it was charged the 40 (400 ms) or the 80.
    clock.advance_millis(150);
    let check = bucket().try_acquire(&mut conn, 1).await.unwrap();
    assert!(
        check.admitted,
        "the lost bucket was charged the fallback's passes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_s_reports_do_not_make_a_bucket_redis_lost() {
    let mut redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let (lease, bucket, mut conn) = lost_bucket(&mut redis, &clock, "remade").await;
    // This process is the first back: its first report finds no bucket, and makes none, so
    // its second finds none either.
    clock.advance_millis(10);
    lease.refill(&mut conn).await.unwrap();
    assert_eq!(lease.mode(), LeaseMode::Global);
    // 150 ms on, past the lease's batch: free unless the second report was charged (400 ms).
    clock.advance_millis(150);
    let check = bucket().try_acquire(&mut conn, 1).await.unwrap();
    assert!(
        check.admitted,
        "a report made the bucket, and the next was charged to it"
    );
}
