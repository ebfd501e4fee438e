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
        waits.push(acquire(&limiter, 1).await);
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
    acquire(&limiter, 1).await;
    let abandoned = tokio::time::timeout(Duration::from_millis(50), acquire(&limiter, 1)).await;
    assert!(abandoned.is_err());
    // The abandoned slot (at 200 ms) is free again: 150 ms from now, not 350 ms.
    assert_eq!(acquire(&limiter, 1).await, Duration::from_millis(150));
}

#[tokio::test(start_paused = true)]
async fn queued_entries_wait_in_order_and_count_when_they_enter() {
    let spillway = Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_flow_rules(vec![FlowRule::qps("pace", "r", 4.0)
            .with_behavior(Behavior::throttle(Duration::from_secs(1)))])
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
        .load_flow_rules(vec![FlowRule::qps("pace", "r", 10.0)
            .with_behavior(Behavior::throttle(Duration::from_secs(1)))])
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

#[tokio::test(start_paused = true)]
async fn enter_waits_in_an_adaptive_queue_and_gives_up_after_its_timeout() {
    use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule, AimdConfig};
    use spillway::BlockKind;
    let spillway = Spillway::new_with_clock(TokioClock::new());
    let one = AimdConfig {
        initial_limit: 1,
        min_limit: 1,
        max_limit: 1,
        ..AimdConfig::default()
    };
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "one",
            "r",
            AdaptiveAlgorithm::Aimd(one),
        )
        .with_queue(AdaptiveQueue {
            timeout: Duration::from_millis(80),
            ..AdaptiveQueue::default()
        })])
        .unwrap();
    let start = Instant::now();
    let first = enter(spillway.entry("r")).await.unwrap();
    // Nobody frees the place: the wait ends with the queue's timeout, refused.
    let err = enter(spillway.entry("r")).await.unwrap_err();
    assert_eq!(
        (err.kind(), start.elapsed()),
        (BlockKind::Adaptive, Duration::from_millis(80))
    );
    // The place freed 30 ms into a wait ends it then.
    let (second, ()) = tokio::join!(enter(spillway.entry("r")), async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        drop(first);
    });
    assert!(second.is_ok());
    assert_eq!(start.elapsed(), Duration::from_millis(110));
    let state = spillway.adaptive_state("one").unwrap();
    assert_eq!((state.queue_timeouts, state.in_flight), (1, 1));
}
