//! A call its caller paced (it waited on its caller for much of its time: a slow upload, a
//! slow reader) counts in the statistics with its whole time, and teaches neither the
//! adaptive limits nor the slow-call breakers anything: its time is its caller's as much as
//! the service's, whether the caller made it longer or timed its bytes to make it look
//! shorter.

mod support;

use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
use spillway::breaker::{BreakerRule, BreakerState, BreakerStrategy};
use spillway::{BlockKind, Clock, TrafficType};
use std::time::Duration;
use support::manual;

fn aimd() -> AdaptiveAlgorithm {
    AdaptiveAlgorithm::Aimd(AimdConfig {
        initial_limit: 10,
        min_limit: 2,
        max_limit: 20,
        timeout: Duration::from_secs(5),
        ..AimdConfig::default()
    })
}

fn slow_calls(max_rt_ms: u64) -> BreakerStrategy {
    BreakerStrategy::SlowCallRatio {
        max_rt: Duration::from_millis(max_rt_ms),
        slow_ratio_threshold: 0.5,
    }
}

#[test]
fn a_paced_call_is_no_adaptive_sample_and_a_call_that_is_not_is_one_whole() {
    let (spillway, clock) = manual();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("a", "r", aimd())])
        .unwrap();
    // 6 s, past AIMD's 5 s timeout: 4 s of a slow upload, 2 s of a slow reader.
    let mut call = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(4_000);
    call.add_caller_wait(Duration::from_millis(4_000));
    clock.advance_millis(20);
    call.set_waiting_on_caller(true);
    clock.advance_millis(2_000);
    call.set_waiting_on_caller(false);
    clock.advance_millis(10);
    call.set_waiting_on_caller(true);
    assert_eq!(call.caller_wait(), Duration::from_millis(6_000));
    clock.advance_millis(500);
    drop(call);
    let state = spillway.adaptive_state("a").unwrap();
    assert_eq!(
        (state.samples, state.limit, state.paced),
        (0, 10, 1),
        "no sample, no backoff; counted as paced"
    );
    assert_eq!(state.in_flight, 0, "its place came back");
    // The statistics have it, whole (at most Sentinel's 5 s, as any RT).
    let stats = spillway.resource("r").unwrap().stats();
    assert_eq!((stats.avg_rt_micros, stats.success_qps), (5_000_000.0, 1.0));

    // A client that times its bytes against the service's work: it waited on the client for
    // 99 of its 100 ms, which would have been a 1 ms sample; it is none.
    let mut timed = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(100);
    timed.add_caller_wait(Duration::from_millis(99));
    drop(timed);
    let state = spillway.adaptive_state("a").unwrap();
    assert_eq!((state.samples, state.paced), (0, 2));

    // A quarter of its time on its client: not paced, a sample of its whole time.
    let mut call = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(7_000);
    call.add_caller_wait(Duration::from_millis(1_750));
    drop(call);
    let state = spillway.adaptive_state("a").unwrap();
    assert_eq!((state.samples, state.paced), (1, 2));
    assert_eq!(state.estimates.latest, Some(Duration::from_millis(7_000)));
    assert_eq!((state.limit, state.last_change.as_str()), (9, "dropped"));
}

#[test]
fn a_paced_drop_is_still_a_drop() {
    let (spillway, clock) = manual();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("a", "r", aimd())])
        .unwrap();
    let mut call = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(1_000);
    call.add_caller_wait(Duration::from_millis(900));
    call.mark_dropped();
    drop(call);
    let state = spillway.adaptive_state("a").unwrap();
    assert_eq!((state.limit, state.last_change.as_str()), (9, "dropped"));
    assert_eq!(state.paced, 0, "a drop is a sample, not a paced call");
}

#[test]
fn a_slow_call_breaker_takes_a_paced_call_as_no_verdict_and_an_error_breaker_counts_its_error() {
    let (spillway, clock) = manual();
    let breaker = |id: &str, strategy| {
        BreakerRule::new(id, "r", strategy, Duration::from_secs(1))
            .with_min_request_amount(5)
            .with_stat_window(Duration::from_secs(60), 10)
    };
    spillway
        .load_breaker_rules(vec![
            breaker("slow", slow_calls(100)),
            breaker("errors", BreakerStrategy::ErrorCount { threshold: 4 }),
        ])
        .unwrap();
    // Ten calls of 3 s, each paced by a slow reader, within the minute's window: slow ones
    // would open it.
    for _ in 0..10 {
        let mut call = spillway.entry("r").enter_owned().unwrap();
        clock.advance_millis(20);
        call.set_waiting_on_caller(true);
        clock.advance_millis(3_000);
    }
    assert_eq!(spillway.breaker_state("slow"), Some(BreakerState::Closed));
    // Five paced calls that failed: errors all the same (more than 4 open it).
    for _ in 0..5 {
        let mut call = spillway.entry("r").enter_owned().unwrap();
        call.set_waiting_on_caller(true);
        clock.advance_millis(1_000);
        call.mark_error();
    }
    assert_eq!(spillway.breaker_state("errors"), Some(BreakerState::Open));
    assert_eq!(spillway.breaker_state("slow"), Some(BreakerState::Closed));
}

#[test]
fn a_paced_probe_gives_its_place_to_the_next_call() {
    let (spillway, clock) = manual();
    spillway
        .load_breaker_rules(vec![BreakerRule::new(
            "b",
            "r",
            slow_calls(100),
            Duration::from_secs(1),
        )
        .with_min_request_amount(1)])
        .unwrap();
    let slow = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(200);
    drop(slow);
    assert_eq!(spillway.breaker_state("b"), Some(BreakerState::Open));
    clock.advance_millis(1_000);
    // Half-open: the probe's reader is slow, which says nothing of the service.
    let mut probe = spillway.entry("r").enter_owned().unwrap();
    let refused = spillway.entry("r").enter_owned().unwrap_err();
    assert_eq!(refused.kind(), BlockKind::Breaker, "one probe at a time");
    clock.advance_millis(10);
    probe.set_waiting_on_caller(true);
    clock.advance_millis(500);
    drop(probe);
    assert_eq!(spillway.breaker_state("b"), Some(BreakerState::HalfOpen));
    // The next call probes, and its 10 ms close the breaker.
    let probe = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(10);
    drop(probe);
    assert_eq!(spillway.breaker_state("b"), Some(BreakerState::Closed));
}

#[test]
fn an_inbound_paced_call_counts_whole_on_the_inbound_node() {
    let (spillway, clock) = manual();
    let mut call = spillway
        .entry("r")
        .traffic(TrafficType::Inbound)
        .enter_owned()
        .unwrap();
    clock.advance_millis(1_000);
    call.add_caller_wait(Duration::from_millis(960));
    drop(call);
    let inbound = spillway.inbound_node().stats(clock.now_nanos());
    assert_eq!(
        (inbound.avg_rt_micros, inbound.concurrency),
        (1_000_000.0, 0)
    );
}

#[test]
fn a_paced_call_of_a_rule_replaced_while_it_ran_is_not_counted_by_the_new_one() {
    let (spillway, clock) = manual();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("a", "r", aimd())])
        .unwrap();
    let mut call = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(1_000);
    call.add_caller_wait(Duration::from_millis(900));
    // The rule changes while the call runs: the new limiter holds no place of its.
    let wider = AdaptiveAlgorithm::Aimd(AimdConfig {
        max_limit: 30,
        ..AimdConfig::default()
    });
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("a", "r", wider)])
        .unwrap();
    drop(call);
    let state = spillway.adaptive_state("a").unwrap();
    assert_eq!((state.paced, state.in_flight), (0, 0));
}
