//! Async waits on tokio's paused clock: statistics and timers move together, nothing sleeps.

use spillway::flow::{Behavior, FlowRule};
use spillway::{RateLimiter, Spillway};
use spillway_tower::{acquire, enter, TokioClock};
use std::time::Duration;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn acquire_waits_on_the_timer() {
    let limiter = RateLimiter::bursty_with_clock(5.0, TokioClock::new()).unwrap();
    let start = Instant::now();
    let mut waits = Vec::new();
    for _ in 0..3 {
        waits.push(acquire(&limiter, 1).await.unwrap());
    }
    assert_eq!(
        waits,
        [
            Duration::ZERO,
            Duration::from_millis(200),
            Duration::from_millis(200)
        ]
    );
    assert_eq!(start.elapsed(), Duration::from_millis(400));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_acquire_gives_its_slot_back() {
    let limiter = RateLimiter::bursty_with_clock(5.0, TokioClock::new()).unwrap();
    acquire(&limiter, 1).await.unwrap();
    let abandoned = tokio::time::timeout(Duration::from_millis(50), acquire(&limiter, 1)).await;
    assert!(abandoned.is_err());
    // The abandoned slot (at 200 ms) is free again: 150 ms from now, not 350 ms.
    assert_eq!(
        acquire(&limiter, 1).await.unwrap(),
        Duration::from_millis(150)
    );
}

#[tokio::test(start_paused = true)]
async fn queued_entries_wait_in_order_and_count_when_they_enter() {
    let spillway = Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_flow_rules(vec![FlowRule::qps("pace", "r", 4.0).with_behavior(
            Behavior::Throttle {
                max_queueing_time: Duration::from_secs(1),
            },
        )])
        .unwrap();
    let start = Instant::now();
    for expected_ms in [0, 250, 500] {
        let entry = enter(spillway.entry("r")).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(expected_ms));
        drop(entry);
    }
    assert_eq!(spillway.resource("r").unwrap().stats().total_pass, 3);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_queued_entry_gives_its_slot_back() {
    let spillway = Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_flow_rules(vec![FlowRule::qps("pace", "r", 10.0).with_behavior(
            Behavior::Throttle {
                max_queueing_time: Duration::from_secs(1),
            },
        )])
        .unwrap();
    drop(enter(spillway.entry("r")).await.unwrap());
    let abandoned =
        tokio::time::timeout(Duration::from_millis(30), enter(spillway.entry("r"))).await;
    assert!(abandoned.is_err());
    let start = Instant::now();
    drop(enter(spillway.entry("r")).await.unwrap());
    // The slot at 100 ms was given back: this entry takes it, 70 ms after now.
    assert_eq!(start.elapsed(), Duration::from_millis(70));
    assert_eq!(spillway.resource("r").unwrap().stats().total_pass, 2);
}
