//! Time a call waited on its caller, left out of its response time: the statistics, the
//! breakers and the adaptive limits see the service's time alone.

mod support;

use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
use spillway::breaker::{BreakerRule, BreakerState, BreakerStrategy};
use spillway::{Clock, TrafficType};
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

#[test]
fn a_slow_upload_and_a_slow_reader_are_left_out_of_the_adaptive_sample() {
    let (spillway, clock) = manual();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("a", "r", aimd())])
        .unwrap();
    // 6 s at its caller's pace (past AIMD's 5 s timeout), 30 ms at the service's.
    let mut call = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(4_000); // the body came slowly
    call.leave_out(Duration::from_millis(4_000));
    clock.advance_millis(20); // the service's work to its head
    call.set_waiting_on_caller(true);
    clock.advance_millis(2_000); // the client read slowly
    call.set_waiting_on_caller(false);
    clock.advance_millis(10); // the service's last bytes
    call.set_waiting_on_caller(true);
    assert_eq!(call.left_out(), Duration::from_millis(6_000));
    clock.advance_millis(500); // read, then the end
    drop(call);
    let state = spillway.adaptive_state("a").unwrap();
    assert_eq!(state.samples, 1);
    assert_eq!(state.estimates.latest, Some(Duration::from_millis(30)));
    assert_eq!(state.limit, 10, "no backoff: the service took 30 ms");
    let stats = spillway.resource("r").unwrap().stats();
    assert_eq!((stats.avg_rt_micros, stats.success_qps), (30_000.0, 1.0));

    // The same call with nothing left out is past the timeout: a backoff.
    let call = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(6_530);
    drop(call);
    let state = spillway.adaptive_state("a").unwrap();
    assert_eq!((state.limit, state.last_change.as_str()), (9, "dropped"));
}

#[test]
fn more_left_out_than_the_call_lasted_is_a_response_time_of_zero() {
    let (spillway, clock) = manual();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("a", "r", aimd())])
        .unwrap();
    let mut call = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(10);
    call.leave_out(Duration::MAX);
    drop(call);
    let state = spillway.adaptive_state("a").unwrap();
    assert_eq!(state.estimates.latest, Some(Duration::ZERO));
    assert_eq!(spillway.resource("r").unwrap().stats().avg_rt_micros, 0.0);
}

#[test]
fn a_slow_reader_does_not_make_a_call_slow_to_a_breaker() {
    let (spillway, clock) = manual();
    let slow = BreakerStrategy::SlowCallRatio {
        max_rt: Duration::from_millis(100),
        slow_ratio_threshold: 0.5,
    };
    spillway
        .load_breaker_rules(vec![BreakerRule::new(
            "b",
            "r",
            slow,
            Duration::from_secs(1),
        )
        .with_min_request_amount(5)])
        .unwrap();
    for _ in 0..10 {
        let mut call = spillway.entry("r").enter_owned().unwrap();
        clock.advance_millis(20);
        call.set_waiting_on_caller(true);
        clock.advance_millis(3_000);
    }
    assert_eq!(spillway.breaker_state("b"), Some(BreakerState::Closed));
    // Five calls that are slow at the service open it.
    clock.advance_millis(2_000);
    for _ in 0..5 {
        let call = spillway.entry("r").enter_owned().unwrap();
        clock.advance_millis(200);
        drop(call);
    }
    assert_eq!(spillway.breaker_state("b"), Some(BreakerState::Open));
    // Half-open: a probe that waited on its reader (within the probe's lease) is still the
    // probe, and fast.
    clock.advance_millis(1_000);
    let mut probe = spillway.entry("r").enter_owned().unwrap();
    clock.advance_millis(10);
    probe.set_waiting_on_caller(true);
    clock.advance_millis(500);
    drop(probe);
    assert_eq!(spillway.breaker_state("b"), Some(BreakerState::Closed));
}

#[test]
fn an_inbound_call_s_left_out_time_is_left_out_of_the_inbound_node() {
    let (spillway, clock) = manual();
    let mut call = spillway
        .entry("r")
        .traffic(TrafficType::Inbound)
        .enter_owned()
        .unwrap();
    clock.advance_millis(1_000);
    call.leave_out(Duration::from_millis(960));
    drop(call);
    assert_eq!(
        spillway
            .inbound_node()
            .stats(clock.now_nanos())
            .avg_rt_micros,
        40_000.0
    );
    assert_eq!(
        spillway.resource("r").unwrap().stats().avg_rt_micros,
        40_000.0
    );
    assert_eq!(spillway.resource("r").unwrap().stats().concurrency, 0);
}
