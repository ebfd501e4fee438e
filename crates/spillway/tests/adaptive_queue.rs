//! An adaptive limit's queue, traced on a manual clock: callers that can wait queue for a place
//! while the limit is full, a finishing call hands its place on in FIFO, LIFO or adaptive
//! order, the queue is bounded, giving up is a counted refusal, and dropping a waiting entry
//! leaves the queue (passing on a place it was handed) and gives back what it held.

mod support;

use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule, AimdConfig, QueueOrder};
use spillway::breaker::{BreakerRule, BreakerStrategy};
use spillway::flow::{Behavior, FlowRule};
use spillway::{Admission, BlockKind, Entry, EntryBuilder, Spillway, Waiting};
use std::time::Duration;
use support::manual;

/// AIMD held at `limit`.
fn fixed(limit: u32) -> AdaptiveAlgorithm {
    AdaptiveAlgorithm::Aimd(AimdConfig {
        initial_limit: limit,
        min_limit: limit,
        max_limit: limit,
        ..AimdConfig::default()
    })
}

fn queue(capacity: u32, order: QueueOrder) -> AdaptiveQueue {
    AdaptiveQueue {
        capacity,
        order,
        timeout: Duration::from_millis(100),
    }
}

/// A spillway whose resource `r` has an adaptive limit of `limit` with `queue`.
fn limited(limit: u32, queue: AdaptiveQueue) -> (Spillway, spillway::ManualClock) {
    let (spillway, clock) = manual();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "r-adaptive",
            "r",
            fixed(limit),
        )
        .with_queue(queue)])
        .unwrap();
    (spillway, clock)
}

fn wait(spillway: &Spillway) -> Waiting<'_> {
    wait_as(spillway.entry("r"))
}

/// Waits as `builder` describes it (a deadline, a criticality).
fn wait_as(builder: EntryBuilder<'_>) -> Waiting<'_> {
    match builder.try_enter() {
        Ok(Admission::Waiting(waiting)) => waiting,
        other => panic!("expected to wait, got {other:?}"),
    }
}

fn ready(admission: Result<Admission<'_>, spillway::BlockError>) -> Entry<'_> {
    match admission {
        Ok(Admission::Ready(entry)) => entry,
        other => panic!("expected an admission, got {other:?}"),
    }
}

#[test]
fn a_freed_place_goes_to_the_caller_that_waited_longest_in_fifo_order() {
    let (spillway, _clock) = limited(1, queue(10, QueueOrder::Fifo));
    let first = ready(spillway.entry("r").try_enter());
    let waiters: Vec<Waiting<'_>> = (0..3).map(|_| wait(&spillway)).collect();
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().waiting, 3);
    drop(first);
    let granted: Vec<bool> = waiters.iter().map(Waiting::is_granted).collect();
    assert_eq!(granted, [true, false, false]);
    let mut waiters = waiters.into_iter();
    let second = ready(waiters.next().unwrap().resume());
    drop(second);
    let granted: Vec<bool> = waiters.as_slice().iter().map(Waiting::is_granted).collect();
    assert_eq!(granted, [true, false]);
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.in_flight, state.waiting), (1, 1));
    assert!(!state.newest_first);
}

#[test]
fn a_freed_place_goes_to_the_newest_caller_in_lifo_order() {
    let (spillway, _clock) = limited(1, queue(10, QueueOrder::Lifo));
    let first = ready(spillway.entry("r").try_enter());
    let waiters: Vec<Waiting<'_>> = (0..3).map(|_| wait(&spillway)).collect();
    drop(first);
    let granted: Vec<bool> = waiters.iter().map(Waiting::is_granted).collect();
    assert_eq!(granted, [false, false, true]);
    assert!(spillway.adaptive_state("r-adaptive").unwrap().newest_first);
}

/// Whether the adaptive order serves the newest first now, as the status and `/metrics` show.
fn newest_first(spillway: &Spillway) -> bool {
    spillway.adaptive_state("r-adaptive").unwrap().newest_first
}

fn granted(waiters: &[Waiting<'_>]) -> Vec<bool> {
    waiters.iter().map(Waiting::is_granted).collect()
}

#[test]
fn the_adaptive_order_serves_in_order_until_a_caller_times_out_then_the_newest_first() {
    // The queue's timeout is 100 ms; callers join every 30 ms or so, none waits 100 ms.
    let (spillway, clock) = limited(1, queue(10, QueueOrder::Adaptive));
    let first = ready(spillway.entry("r").try_enter());
    let mut waiters: Vec<Waiting<'_>> = vec![wait(&spillway)];
    clock.advance(Duration::from_millis(30));
    waiters.push(wait(&spillway));
    clock.advance(Duration::from_millis(30));
    waiters.push(wait(&spillway));
    // 60 ms in: the oldest goes first.
    drop(first);
    assert_eq!(granted(&waiters), [true, false, false]);
    let second = ready(waiters.remove(0).resume());
    clock.advance(Duration::from_millis(30));
    waiters.push(wait(&spillway));
    clock.advance(Duration::from_millis(10));
    waiters.push(wait(&spillway));
    clock.advance(Duration::from_millis(10));
    // 110 ms in, the queue has stood longer than its timeout, but every caller was served in
    // time: a burst near capacity, still drained in order (the one served waited 80 ms).
    drop(second);
    assert_eq!(granted(&waiters), [true, false, false, false]);
    assert!(!newest_first(&spillway));
    let third = ready(waiters.remove(0).resume());
    // The oldest waiter's time is up before a place came: an overload. The newest goes first
    // from now.
    let err = waiters.remove(0).give_up();
    assert_eq!(err.kind(), BlockKind::Adaptive);
    assert!(newest_first(&spillway));
    drop(third);
    assert_eq!(granted(&waiters), [false, true]);
    let fourth = ready(waiters.pop().unwrap().resume());
    // The last one leaves (its client gave up): the queue is empty, and the next burst is
    // drained in order again.
    drop(waiters.pop());
    assert!(!newest_first(&spillway));
    clock.advance(Duration::from_millis(500));
    let burst: Vec<Waiting<'_>> = (0..2).map(|_| wait(&spillway)).collect();
    clock.advance(Duration::from_millis(10));
    drop(fourth);
    assert_eq!(granted(&burst), [true, false]);
    assert_eq!(
        spillway
            .adaptive_state("r-adaptive")
            .unwrap()
            .queue_timeouts,
        1
    );
}

#[test]
fn in_the_adaptive_order_a_deadline_run_out_counts_and_a_queue_left_empty_starts_in_order() {
    let (spillway, clock) = limited(1, queue(10, QueueOrder::Adaptive));
    let first = ready(spillway.entry("r").try_enter());
    // The only waiter times out and leaves the queue empty: the next to join starts a new
    // burst, in order.
    clock.advance(Duration::from_millis(5));
    let _ = wait(&spillway).give_up();
    clock.advance(Duration::from_millis(5));
    let burst: Vec<Waiting<'_>> = (0..3).map(|_| wait(&spillway)).collect();
    drop(first);
    assert_eq!(granted(&burst), [true, false, false]);
    let mut burst = burst.into_iter();
    let second = ready(burst.next().unwrap().resume());
    let burst: Vec<Waiting<'_>> = burst.collect();
    // A waiter whose deadline, shorter than the queue's timeout, runs out was not served in
    // time either: the newest first from now.
    let hurried = wait_as(spillway.entry("r").deadline(Duration::from_millis(20)));
    clock.advance(Duration::from_millis(20));
    assert_eq!(hurried.give_up().kind(), BlockKind::Deadline);
    drop(second);
    assert_eq!(granted(&burst), [false, true]);
}

#[test]
fn in_the_adaptive_order_a_waiter_refused_at_hand_over_for_its_deadline_was_not_served_in_time() {
    let (spillway, clock) = limited(1, queue(10, QueueOrder::Adaptive));
    let first = ready(spillway.entry("r").try_enter());
    let hurried = wait_as(spillway.entry("r").deadline(Duration::from_millis(20)));
    let others: Vec<Waiting<'_>> = (0..2).map(|_| wait(&spillway)).collect();
    // The place frees after the oldest waiter's deadline: the queue refuses it as it hands the
    // place on, and the place goes to the newest.
    clock.advance(Duration::from_millis(30));
    drop(first);
    assert!(!hurried.is_granted());
    assert_eq!(hurried.give_up().kind(), BlockKind::Deadline);
    assert_eq!(granted(&others), [false, true]);
}

#[test]
fn in_the_adaptive_order_a_waiter_evicted_from_a_full_queue_was_not_served_in_time() {
    let (spillway, _clock) = limited(1, queue(3, QueueOrder::Adaptive));
    let first = ready(spillway.entry("r").try_enter());
    let sheddable = || {
        wait_as(
            spillway
                .entry("r")
                .criticality(spillway::Criticality::Sheddable),
        )
    };
    let mut waiters: Vec<Waiting<'_>> = (0..3).map(|_| sheddable()).collect();
    // A caller of the default criticality finds the queue full and takes the place of the
    // newest sheddable one.
    let default = wait(&spillway);
    assert_eq!(
        waiters.iter().map(Waiting::is_refused).collect::<Vec<_>>(),
        [false, false, true]
    );
    assert_eq!(waiters.pop().unwrap().give_up().kind(), BlockKind::Adaptive);
    // The more critical goes first, whatever the order...
    drop(first);
    assert!(default.is_granted());
    let second = ready(default.resume());
    // ... and the queue failed a caller: of the sheddable ones, the newest goes first.
    drop(second);
    assert_eq!(granted(&waiters), [false, true]);
}

#[test]
fn in_the_adaptive_order_a_client_that_leaves_after_half_the_timeout_was_not_served_in_time() {
    // The queue's timeout is 100 ms.
    let (spillway, clock) = limited(1, queue(10, QueueOrder::Adaptive));
    let first = ready(spillway.entry("r").try_enter());
    let mut waiters: Vec<Waiting<'_>> = (0..5).map(|_| wait(&spillway)).collect();
    // One that leaves at once may just have changed its mind: the order stays.
    drop(waiters.remove(0));
    clock.advance(Duration::from_millis(60));
    drop(first);
    assert_eq!(granted(&waiters), [true, false, false, false]);
    let second = ready(waiters.remove(0).resume());
    // One whose client gave up after 60 ms (a proxy sees the connection close) was not served
    // in time: the newest first from now.
    drop(waiters.remove(0));
    drop(second);
    assert_eq!(granted(&waiters), [false, true]);
}

#[test]
fn in_the_adaptive_order_a_queue_that_serves_everyone_late_for_a_whole_timeout_stands() {
    // The queue's timeout is 100 ms. A caller joins every 40 ms and a place frees every 40
    // ms: each is served after 80 ms, more than half the timeout, and none times out. A
    // client whose own timeout is the queue's gives up as it is served: from 100 ms of that,
    // the queue serves the newest first.
    let (spillway, clock) = limited(1, queue(10, QueueOrder::Adaptive));
    let mut running = ready(spillway.entry("r").try_enter());
    let mut waiting: std::collections::VecDeque<Waiting<'_>> = Default::default();
    waiting.push_back(wait(&spillway));
    clock.advance(Duration::from_millis(40));
    waiting.push_back(wait(&spillway));
    for _ in 0..4 {
        clock.advance(Duration::from_millis(40));
        waiting.push_back(wait(&spillway));
        drop(running);
        // The oldest was served, 80 ms after it joined.
        let oldest = waiting.pop_front().unwrap();
        assert!(waiting.iter().all(|w| !w.is_granted()));
        running = ready(oldest.resume());
    }
    // Served after 80 ms at 80, 120, 160 and 200 ms: late for 120 ms, longer than the timeout.
    clock.advance(Duration::from_millis(40));
    waiting.push_back(wait(&spillway));
    drop(running);
    let granted: Vec<bool> = waiting.iter().map(Waiting::is_granted).collect();
    assert_eq!(granted, [false, false, true]);
}

#[test]
fn a_full_queue_refuses_at_once_and_enter_never_waits() {
    let (spillway, _clock) = limited(1, queue(2, QueueOrder::Fifo));
    let _first = ready(spillway.entry("r").try_enter());
    let _a = wait(&spillway);
    let _b = wait(&spillway);
    let err = spillway.entry("r").try_enter().unwrap_err();
    assert_eq!(
        (err.kind(), err.rule_id(), err.observed(), err.threshold()),
        (BlockKind::Adaptive, Some("r-adaptive"), 1.0, 1.0)
    );
    // `enter` cannot wait: refused, though the queue had room before the two joined.
    let err = spillway.entry("r").enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Adaptive);
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.refusals, state.waiting), (2, 2));
    assert_eq!(spillway.resource("r").unwrap().stats().total_block, 2);
}

#[test]
fn while_callers_wait_a_newcomer_queues_behind_them() {
    let (spillway, _clock) = limited(2, queue(10, QueueOrder::Fifo));
    let first = ready(spillway.entry("r").try_enter());
    let _second = ready(spillway.entry("r").try_enter());
    let waiting = wait(&spillway);
    drop(first);
    assert!(waiting.is_granted());
    // The place is the waiter's: a newcomer neither takes it nor finds another.
    let behind = wait(&spillway);
    assert!(!behind.is_granted());
    assert!(spillway.entry("r").enter().is_err());
    let _resumed = ready(waiting.resume());
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().in_flight, 2);
}

#[test]
fn giving_up_is_a_counted_refusal_and_leaves_the_queue() {
    let (spillway, clock) = limited(1, queue(10, QueueOrder::Fifo));
    let first = ready(spillway.entry("r").try_enter());
    let waiting = wait(&spillway);
    assert_eq!(waiting.timeout(), Duration::from_millis(100));
    clock.advance_millis(100);
    let err = waiting.give_up();
    assert_eq!(
        (err.kind(), err.rule_id()),
        (BlockKind::Adaptive, Some("r-adaptive"))
    );
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!(
        (state.waiting, state.queue_timeouts, state.refusals),
        (0, 1, 1)
    );
    assert_eq!(spillway.resource("r").unwrap().stats().total_block, 1);
    // The place the first frees goes to no one: nobody waits.
    drop(first);
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().in_flight, 0);
}

#[test]
fn a_waiting_entry_dropped_leaves_the_queue_and_passes_on_a_place_it_was_handed() {
    let (spillway, _clock) = limited(1, queue(10, QueueOrder::Fifo));
    let first = ready(spillway.entry("r").try_enter());
    let a = wait(&spillway);
    let b = wait(&spillway);
    let c = wait(&spillway);
    drop(b); // cancelled before any place: out of the queue, nothing counted
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().waiting, 2);
    drop(first);
    assert!(a.is_granted());
    drop(a); // handed a place, then cancelled: the place goes on to c
    assert!(c.is_granted());
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.in_flight, state.waiting, state.refusals), (1, 0, 0));
    drop(c);
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!(state.in_flight, 0);
    let stats = spillway.resource("r").unwrap().stats();
    assert_eq!((stats.total_pass, stats.total_block), (1, 0));
}

#[test]
fn an_entry_that_waited_counts_one_pass_and_its_rt_from_its_start() {
    let (spillway, clock) = limited(1, queue(10, QueueOrder::Fifo));
    let first = ready(spillway.entry("r").try_enter());
    let waiting = wait(&spillway);
    clock.advance_millis(40);
    drop(first);
    let second = ready(waiting.resume());
    assert_eq!(second.started_at_nanos(), spillway.clock().now_nanos());
    clock.advance_millis(10);
    drop(second);
    let stats = spillway.resource("r").unwrap().stats();
    assert_eq!((stats.total_pass, stats.total_block), (2, 0));
    // Its sample is its own 10 ms, not the 40 ms it waited.
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!(state.samples, 2);
    assert_eq!(state.estimates.latest, Some(Duration::from_millis(10)));
    // A refusal says nothing of when to retry: a place frees when a call ends.
    let _third = ready(spillway.entry("r").try_enter());
    let err = spillway.entry("r").enter().unwrap_err();
    assert_eq!(err.retry_after(), None);
}

#[test]
fn resumed_the_entry_meets_the_breakers_and_a_refusal_gives_its_place_back() {
    let (spillway, _clock) = limited(1, queue(10, QueueOrder::Fifo));
    spillway
        .load_breaker_rules(vec![BreakerRule::new(
            "r-breaker",
            "r",
            BreakerStrategy::ErrorCount { threshold: 0 },
            Duration::from_secs(10),
        )
        .with_min_request_amount(1)])
        .unwrap();
    let mut failing = ready(spillway.entry("r").try_enter());
    let waiting = wait(&spillway);
    failing.mark_error();
    drop(failing); // the breaker opens, and the place goes to the waiting entry
    assert!(waiting.is_granted());
    let err = waiting.resume().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Breaker);
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.in_flight, state.waiting), (0, 0));
}

#[test]
fn a_waiting_entry_holds_the_flow_rules_places_and_a_drop_gives_them_back() {
    let (spillway, _clock) = limited(1, queue(10, QueueOrder::Fifo));
    spillway
        .load_flow_rules(vec![FlowRule::in_flight("r", 2).with_id("r-two")])
        .unwrap();
    let _first = ready(spillway.entry("r").try_enter());
    let waiting = wait(&spillway);
    // The flow rule counts the waiting entry: a third is refused by it.
    let err = spillway.entry("r").try_enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Flow);
    drop(waiting);
    let again = wait(&spillway);
    drop(again);
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().waiting, 0);
}

#[test]
fn a_paced_entry_that_waited_for_its_place_waits_only_what_is_left_of_its_pacing() {
    let (spillway, clock) = limited(1, queue(10, QueueOrder::Fifo));
    spillway
        .load_flow_rules(vec![FlowRule::qps("r-pace", "r", 10.0)
            .with_behavior(Behavior::throttle(Duration::from_secs(1)))])
        .unwrap();
    let first = ready(spillway.entry("r").try_enter());
    // Paced 100 ms after the first, and over the adaptive limit: it waits for a place first.
    let waiting = wait(&spillway);
    clock.advance_millis(30);
    drop(first);
    let Ok(Admission::Queued(pending)) = waiting.resume() else {
        panic!("the pacing wait follows");
    };
    assert_eq!(pending.wait(), Duration::from_millis(70));
}

#[test]
fn an_entry_waits_for_the_resource_s_limit_then_for_the_inbound_one() {
    let (spillway, _clock) = manual();
    let q = queue(10, QueueOrder::Fifo);
    spillway
        .load_adaptive_rules(vec![
            AdaptiveRule::resource("r-adaptive", "r", fixed(1)).with_queue(q),
            AdaptiveRule::inbound("all", fixed(1)).with_queue(q),
        ])
        .unwrap();
    let on_r = ready(spillway.entry("r").inbound().try_enter());
    let elsewhere_waits = match spillway.entry("other").inbound().try_enter() {
        Ok(Admission::Waiting(waiting)) => waiting,
        other => panic!("the inbound limit is full: {other:?}"),
    };
    let Ok(Admission::Waiting(on_r_waits)) = spillway.entry("r").inbound().try_enter() else {
        panic!("the resource's limit is full");
    };
    drop(on_r);
    // Both limits free a place: `other` gets the inbound one; the second on `r` gets its
    // resource's, then waits for the inbound one behind `other`.
    assert!(elsewhere_waits.is_granted() && on_r_waits.is_granted());
    let Ok(Admission::Waiting(then_inbound)) = on_r_waits.resume() else {
        panic!("waits again, for the inbound limit");
    };
    let other = ready(elsewhere_waits.resume());
    drop(other);
    assert!(then_inbound.is_granted());
    let _second_on_r = ready(then_inbound.resume());
    assert_eq!(spillway.adaptive_state("all").unwrap().in_flight, 1);
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().in_flight, 1);
}

#[test]
fn bad_queues_are_errors_naming_the_field_and_change_nothing() {
    let (spillway, _clock) = limited(1, queue(10, QueueOrder::Fifo));
    for (bad, field) in [
        (
            AdaptiveQueue {
                capacity: 0,
                ..AdaptiveQueue::default()
            },
            "queue.capacity",
        ),
        (
            AdaptiveQueue {
                timeout: Duration::ZERO,
                ..AdaptiveQueue::default()
            },
            "queue.timeout",
        ),
        (
            AdaptiveQueue {
                timeout: Duration::from_secs(3600),
                ..AdaptiveQueue::default()
            },
            "queue.timeout",
        ),
    ] {
        let err = spillway
            .load_adaptive_rules(vec![
                AdaptiveRule::resource("r-adaptive", "r", fixed(5)).with_queue(bad)
            ])
            .unwrap_err();
        assert_eq!(err.field(), field, "{err}");
    }
    let rules = spillway.adaptive_rules();
    assert_eq!(rules[0].queue, Some(queue(10, QueueOrder::Fifo)));
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().limit, 1);
}
