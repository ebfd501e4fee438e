//! The shared token bucket against a real `redis-server`: its decisions are those of spillway's
//! Guava `RateLimiter` on the same event trace (to the stored permit), shared by several
//! processes; leases of it stay within their bound; and bad input.

mod common;

use common::RedisServer;
use spillway::{ManualClock, RateLimiter};
use spillway_redis::{Error, LeasedBucket, SharedBucket, Time};
use std::sync::Arc;
use std::time::Duration;

const START_MS: u64 = 1_700_000_000_000;

fn bucket(clock: &ManualClock, name: &str, rate: f64, burst: f64) -> SharedBucket {
    SharedBucket::new(name, rate, burst, Time::Clock(Arc::new(clock.clone()))).unwrap()
}

/// A deterministic stream of numbers in `0..n` (a linear congruential generator).
struct Steps(u64);

impl Steps {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[tokio::test]
async fn its_decisions_are_guavas_on_the_same_trace() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    // Rates whose intervals do not divide a second (3/s: 333,333.33 µs), a burst of none, of
    // one second (Guava's) and of a fraction; some checks take several permits.
    let cases = [
        (3.0, 1.0),
        (7.5, 0.0),
        (1000.0, 1.0),
        (0.5, 2.5),
        (40.0, 0.3),
    ];
    for (case, (rate, burst)) in cases.into_iter().enumerate() {
        let clock = ManualClock::starting_at_millis(START_MS);
        let name = format!("trace-{case}");
        let shared = bucket(&clock, &name, rate, burst);
        let guava = RateLimiter::builder(rate)
            .max_burst(Duration::from_secs_f64(burst))
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut steps = Steps(case as u64 + 1);
        let (mut admitted, mut refused) = (0, 0);
        for step in 0..400 {
            // Gaps from 0 to about 3 intervals, in microseconds; the first check at once, as the
            // shared bucket begins at its first check (docs/exactness.md).
            let interval_micros = (1e6 / rate) as u64;
            if step > 0 {
                clock.advance(Duration::from_micros(steps.next(3 * interval_micros + 1)));
            }
            let permits = 1 + steps.next(3) as u32;
            let ours = shared.try_acquire(&mut conn, permits).await.unwrap();
            let theirs = guava.try_reserve(permits, Duration::ZERO);
            assert_eq!(
                ours.admitted,
                theirs.is_some(),
                "rate {rate}, burst {burst}, step {step}: {ours:?}"
            );
            assert_eq!(
                ours.stored,
                guava.stored_permits().floor() as u64,
                "rate {rate}, burst {burst}, step {step}: stored permits"
            );
            if ours.admitted {
                admitted += 1;
            } else {
                refused += 1;
            }
        }
        assert!(admitted > 50 && refused > 50, "{admitted} / {refused}");
    }
}

#[tokio::test]
async fn a_rate_change_is_guavas_set_rate() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let guava = RateLimiter::builder(10.0)
        .max_burst(Duration::from_secs(2))
        .clock(clock.clone())
        .build()
        .unwrap();
    let before = bucket(&clock, "changed", 10.0, 2.0);
    assert!(before.try_acquire(&mut conn, 1).await.unwrap().admitted);
    guava.try_reserve(1, Duration::ZERO).unwrap();
    // 1.5 s idle stores 14 permits (capped at 20); then the rate doubles: Guava scales the
    // stored permits to the new most (40), 28.
    clock.advance_millis(1500);
    guava.set_rate(20.0).unwrap();
    let after = bucket(&clock, "changed", 20.0, 2.0);
    let ours = after.try_acquire(&mut conn, 1).await.unwrap();
    assert!(guava.try_reserve(1, Duration::ZERO).is_some());
    assert!(ours.admitted);
    assert_eq!(ours.stored, guava.stored_permits().floor() as u64);
    assert_eq!(ours.stored, 27);
}

#[tokio::test]
async fn three_processes_share_one_bucket_as_one_guava_limiter() {
    let redis = RedisServer::start().await;
    let mut processes = [
        redis.connect().await,
        redis.connect().await,
        redis.connect().await,
    ];
    let clock = ManualClock::starting_at_millis(START_MS);
    let shared = bucket(&clock, "fleet", 1000.0, 1.0);
    let guava = RateLimiter::bursty_with_clock(1000.0, clock.clone()).unwrap();
    // 3 requests a millisecond, one from each process (3x the rate), for 10 s.
    let mut admitted = 0u64;
    for _ in 0..10_000 {
        for conn in &mut processes {
            let ours = shared.try_acquire(conn, 1).await.unwrap().admitted;
            assert_eq!(ours, guava.try_reserve(1, Duration::ZERO).is_some());
            admitted += u64::from(ours);
        }
        clock.advance_millis(1);
    }
    // A permit a millisecond, the first free: exactly the rate.
    assert_eq!(admitted, 10_000);
}

#[tokio::test]
async fn leases_of_a_bucket_stay_within_the_bound() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let (rate, burst, max_batch) = (1000.0, 0.5, 10u64);
    let mut processes = Vec::new();
    for _ in 0..3 {
        let lease = LeasedBucket::new(
            bucket(&clock, "leased", rate, burst),
            Arc::new(clock.clone()),
            max_batch,
        )
        .unwrap();
        processes.push((lease, redis.connect().await));
    }
    // Idle for a second first: the bucket stores its burst (500 permits).
    for (lease, conn) in &mut processes {
        lease.refill(conn).await.unwrap();
    }
    clock.advance_millis(1000);
    let (mut admitted, mut calls) = (0u64, 0u64);
    let mut per_second = vec![0u64; 10];
    for ms in 0..10_000u64 {
        for (lease, conn) in &mut processes {
            if lease.wants_refill() {
                let got = lease.refill(conn).await.unwrap();
                if ms < 30 {
                    println!("{ms}: refill {got}, held {}", lease.held());
                }
                calls += 1;
            }
            if lease.try_acquire(1) {
                admitted += 1;
                per_second[(ms / 1000) as usize] += 1;
                // Never more than Guava grants up to now to leases taken as requests: the rate
                // over the time so far, the burst, and a batch a process paid in advance.
                let bound = (ms + 1) as f64 * rate / 1000.0 + burst * rate + 3.0 * max_batch as f64;
                assert!(admitted as f64 <= bound, "{admitted} admitted by {ms} ms");
            }
        }
        clock.advance_millis(1);
    }
    // The first second spends the burst too; then the rate.
    assert!(per_second[0] >= 1400, "{per_second:?}");
    for &second in &per_second[1..] {
        assert!((900..=1030).contains(&second), "{per_second:?}");
    }
    println!("admitted {admitted} with {calls} calls to Redis: {per_second:?}");
    // What docs/cluster.md quotes, on this manual clock (deterministic): 10,499 admitted,
    // 1,499 of them in the first second, with 3,982 refills, within 2%.
    assert!(admitted.abs_diff(10_499) <= 210, "{admitted}");
    assert!(per_second[0].abs_diff(1_499) <= 30, "{per_second:?}");
    assert!(
        calls.abs_diff(3_982) <= 80,
        "{calls} calls for 30,000 requests"
    );
}

#[tokio::test]
async fn a_flushed_script_is_loaded_again_and_the_bucket_kept() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let shared = bucket(&clock, "flushed", 1.0, 0.0);
    assert!(shared.try_acquire(&mut conn, 1).await.unwrap().admitted);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    // Its next free moment is still a second away.
    let refused = shared.try_acquire(&mut conn, 1).await.unwrap();
    assert!(!refused.admitted);
    assert_eq!(refused.next_free_ms, START_MS + 1000);
    clock.advance_millis(1000);
    assert!(shared.try_acquire(&mut conn, 1).await.unwrap().admitted);
}

#[tokio::test]
async fn a_redis_error_is_an_error_and_changes_nothing() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connect().await;
    let clock = ManualClock::starting_at_millis(START_MS);
    let shared = bucket(&clock, "wrongtype", 1.0, 1.0);
    let _: () = redis::cmd("SET")
        .arg(shared.key())
        .arg("not a hash")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = shared.try_acquire(&mut conn, 1).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let kept: String = redis::cmd("GET")
        .arg(shared.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kept, "not a hash");
}

#[test]
fn settings_that_cannot_work_are_refused_with_why() {
    let cases: [(&str, f64, f64, &str); 6] = [
        ("", 1.0, 1.0, "1 to 200 bytes"),
        ("a{b}", 1.0, 1.0, "braces"),
        ("x", 0.0, 1.0, "rate"),
        ("x", f64::INFINITY, 1.0, "rate"),
        ("x", 1.0, -1.0, "burst"),
        ("x", 1.0, f64::NAN, "burst"),
    ];
    for (name, rate, burst, why) in cases {
        let err = SharedBucket::new(name, rate, burst, Time::Redis).unwrap_err();
        assert!(
            matches!(err, Error::Invalid(_)) && err.to_string().contains(why),
            "{name:?} {rate} {burst}: {err}"
        );
    }
}
