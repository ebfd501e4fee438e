//! Half-open probes: several of them, refused by a later rule, abandoned while queued, or lost.

use super::strategies::{setup, Setup, RETRY};
use crate::breaker::{BreakerRule, BreakerState, BreakerStrategy};
use crate::flow::{Behavior, FlowRule};
use crate::{Admission, BlockKind};
use std::time::Duration;

use BreakerState::{Closed, HalfOpen, Open};

fn errors(id: &str, resource: &str) -> BreakerRule {
    BreakerRule::new(
        id,
        resource,
        BreakerStrategy::ErrorCount { threshold: 0 },
        RETRY,
    )
    .with_min_request_amount(1)
}

/// Opens breaker `b` with one failed call, then lets its retry timeout pass.
fn open_then_wait(s: &Setup) {
    assert!(s.call(Duration::ZERO, true));
    assert_eq!(s.state("b"), Open);
    s.clock.advance(RETRY);
}

#[test]
fn every_probe_must_succeed_to_close() {
    let s = setup(vec![errors("b", "api").with_half_open_probes(2)]);
    open_then_wait(&s);
    let first = s.spillway.entry("api").enter().unwrap();
    let mut second = s.spillway.entry("api").enter().unwrap();
    assert_eq!(s.state("b"), HalfOpen);
    let err = s.spillway.entry("api").enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Breaker);
    assert_eq!(
        err.retry_after(),
        Some(RETRY),
        "until the first probe's lease ends"
    );
    drop(first);
    assert_eq!(s.state("b"), HalfOpen, "one of two probes succeeded");
    second.mark_error();
    drop(second);
    assert_eq!(s.state("b"), Open, "the second failed");

    s.clock.advance(RETRY);
    let probes: Vec<_> = (0..2)
        .map(|_| s.spillway.entry("api").enter().unwrap())
        .collect();
    drop(probes);
    assert_eq!(s.state("b"), Closed);
}

#[test]
fn a_call_admitted_before_half_open_does_not_decide() {
    let s = setup(vec![errors("b", "api")]);
    let old = s.spillway.entry("api").enter().unwrap(); // admitted while closed
    assert!(s.call(Duration::ZERO, true));
    s.clock.advance(RETRY);
    let probe = s.spillway.entry("api").enter().unwrap();
    drop(old); // succeeds, but it is no probe (Sentinel would close here)
    assert_eq!(s.state("b"), HalfOpen);
    drop(probe);
    assert_eq!(s.state("b"), Closed);
}

#[test]
fn a_probe_refused_by_a_later_breaker_gives_its_place_back() {
    let s = setup(vec![
        errors("b", "api"),
        BreakerRule::new(
            "later",
            "api",
            BreakerStrategy::ErrorCount { threshold: 0 },
            RETRY * 2,
        )
        .with_min_request_amount(1),
    ]);
    assert!(s.call(Duration::ZERO, true)); // opens both
    s.clock.advance(RETRY);
    // `b` may probe and lends its only place; `later` is still open and refuses.
    let err = s.spillway.entry("api").enter().unwrap_err();
    assert_eq!(
        (err.rule_id(), err.retry_after()),
        (Some("later"), Some(RETRY))
    );
    assert_eq!((s.state("b"), s.state("later")), (HalfOpen, Open));
    s.clock.advance(RETRY);
    // Had `b` kept the place, it would refuse now (or count the lost probe as failed).
    assert!(s.call(Duration::ZERO, false));
    assert_eq!((s.state("b"), s.state("later")), (Closed, Closed));
}

#[test]
fn a_flow_refusal_comes_before_the_breakers_and_takes_no_probe() {
    let s = setup(vec![errors("b", "api")]);
    open_then_wait(&s);
    s.spillway
        .load_flow_rules(vec![FlowRule::qps("none", "api", 0.0)])
        .unwrap();
    let err = s.spillway.entry("api").enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Flow);
    assert_eq!(s.state("b"), Open, "the breaker was not asked");
}

#[test]
fn a_probe_abandoned_while_queued_gives_its_place_back() {
    let s = setup(vec![errors("b", "api").with_half_open_probes(2)]);
    s.spillway
        .load_flow_rules(vec![FlowRule::qps("pace", "api", 10.0)
            .with_behavior(Behavior::throttle(Duration::from_secs(1)))])
        .unwrap();
    open_then_wait(&s);
    let Ok(Admission::Ready(first)) = s.spillway.entry("api").try_enter() else {
        panic!("the schedule is free: the first probe passes at once")
    };
    let Ok(Admission::Queued(queued)) = s.spillway.entry("api").try_enter() else {
        panic!("the second probe waits its 100 ms turn")
    };
    drop(queued); // abandoned: its probe place goes back
    drop(first); // one success of two
    assert_eq!(s.state("b"), HalfOpen);
    // A new caller takes the returned place (blocking enter: a manual clock advances).
    drop(
        s.spillway
            .entry("api")
            .enter()
            .expect("a probe place is free"),
    );
    assert_eq!(s.state("b"), Closed);
}

#[test]
fn a_lost_probe_counts_as_failed_when_its_lease_ends() {
    let s = setup(vec![
        errors("b", "api").with_probe_timeout(Duration::from_secs(2))
    ]);
    open_then_wait(&s);
    let lost = s.spillway.entry("api").enter_owned().unwrap(); // never completes in time
    assert_eq!(s.state("b"), HalfOpen);
    s.clock
        .advance(Duration::from_secs(2) - Duration::from_nanos(1));
    assert!(
        !s.call(Duration::ZERO, false),
        "the probe's place is still taken"
    );
    s.clock.advance(Duration::from_nanos(1));
    // The lease ended: the probe failed at its deadline, and the breaker reopened then.
    assert!(!s.call(Duration::ZERO, false));
    assert_eq!(s.state("b"), Open);
    s.clock.advance(RETRY);
    drop(lost); // completing late decides nothing
    assert_eq!(s.state("b"), Open);
    assert!(s.call(Duration::ZERO, false), "a new probe, not wedged");
    assert_eq!(s.state("b"), Closed);
}

/// A slow-call breaker on `resource`: calls over 100 ms are slow, one call enough.
fn slow_calls(id: &str, resource: &str) -> BreakerRule {
    BreakerRule::new(
        id,
        resource,
        BreakerStrategy::SlowCallRatio {
            max_rt: Duration::from_millis(100),
            slow_ratio_threshold: 0.5,
        },
        RETRY,
    )
    .with_min_request_amount(1)
}

#[test]
fn a_long_probe_that_answered_well_closes_the_breaker_when_it_answers() {
    let s = setup(vec![
        errors("b", "api").with_probe_timeout(Duration::from_secs(2))
    ]);
    open_then_wait(&s);
    // A stream whose head came at once, then lasted a minute: decided by its head.
    let stream = s.spillway.entry("api").enter_owned().unwrap();
    s.clock.advance(Duration::from_millis(10));
    stream.answered();
    assert_eq!(s.state("b"), Closed);
    assert!(s.call(Duration::ZERO, false), "the others pass at once");
    s.clock.advance(Duration::from_secs(60));
    drop(stream);
    assert_eq!(
        s.state("b"),
        Closed,
        "its end, past the lease, decides nothing"
    );
    // Without the answer, the same stream outlasts its lease and counts as failed.
    assert!(s.call(Duration::ZERO, true));
    s.clock.advance(RETRY);
    let unanswered = s.spillway.entry("api").enter_owned().unwrap();
    s.clock.advance(Duration::from_secs(2));
    assert!(!s.call(Duration::ZERO, false));
    assert_eq!(s.state("b"), Open);
    drop(unanswered);
}

#[test]
fn a_probe_that_answered_with_an_error_reopens_the_breaker_when_it_answers() {
    let s = setup(vec![errors("b", "api")]);
    open_then_wait(&s);
    let mut probe = s.spillway.entry("api").enter_owned().unwrap();
    probe.mark_error();
    probe.answered();
    assert_eq!(s.state("b"), Open);
    // Saying it again, or its end, decides nothing more.
    probe.answered();
    s.clock.advance(RETRY);
    drop(probe);
    assert_eq!(s.state("b"), Open);
    assert!(s.call(Duration::ZERO, false), "the next probe");
    assert_eq!(s.state("b"), Closed);
}

#[test]
fn a_slow_call_probe_is_decided_by_its_time_to_its_answer() {
    let s = setup(vec![slow_calls("b", "api")]);
    assert!(s.call(Duration::from_millis(200), false));
    assert_eq!(s.state("b"), Open);
    s.clock.advance(RETRY);
    // Answered in 50 ms: good, closed at once, so that a client that takes the probe and reads
    // its answer slowly holds the breaker half-open no longer (its lease running out had
    // reopened it; found by an attack). Its whole time (250 ms) still counts in the window at
    // its end, and here, one slow call of one, opens the breaker again.
    let probe = s.spillway.entry("api").enter_owned().unwrap();
    s.clock.advance(Duration::from_millis(50));
    probe.answered();
    assert_eq!(s.state("b"), Closed);
    s.clock.advance(Duration::from_millis(200));
    drop(probe);
    assert_eq!(s.state("b"), Open);
    // Answered after 150 ms: slow already, reopened at once.
    s.clock.advance(RETRY);
    let probe = s.spillway.entry("api").enter_owned().unwrap();
    s.clock.advance(Duration::from_millis(150));
    probe.answered();
    assert_eq!(s.state("b"), Open);
    drop(probe);
}

#[test]
fn an_abandoned_probe_decides_nothing_when_it_answers() {
    let s = setup(vec![errors("b", "api")]);
    open_then_wait(&s);
    let mut probe = s.spillway.entry("api").enter_owned().unwrap();
    probe.mark_abandoned();
    probe.answered();
    assert_eq!(s.state("b"), HalfOpen);
    drop(probe);
    assert!(s.call(Duration::ZERO, false), "its place went to the next");
    assert_eq!(s.state("b"), Closed);
}

#[test]
fn a_call_admitted_before_half_open_decides_nothing_when_it_answers() {
    let s = setup(vec![errors("b", "api")]);
    let old = s.spillway.entry("api").enter_owned().unwrap(); // admitted while closed
    assert!(s.call(Duration::ZERO, true));
    s.clock.advance(RETRY);
    let probe = s.spillway.entry("api").enter_owned().unwrap();
    assert_eq!(s.state("b"), HalfOpen);
    old.answered();
    assert_eq!(s.state("b"), HalfOpen);
    probe.answered();
    assert_eq!(s.state("b"), Closed);
    drop((old, probe));
}

#[test]
fn a_probe_its_caller_paced_is_no_verdict_for_a_slow_call_breaker_when_it_answers() {
    let s = setup(vec![slow_calls("b", "api")]);
    assert!(s.call(Duration::from_millis(200), false));
    s.clock.advance(RETRY);
    // A drip upload: its head comes after 2 s, 1.9 s of which it waited on its client.
    let mut probe = s.spillway.entry("api").enter_owned().unwrap();
    s.clock.advance(Duration::from_secs(2));
    probe.add_caller_wait(Duration::from_millis(1_900));
    probe.answered();
    assert_eq!(
        s.state("b"),
        HalfOpen,
        "no verdict: its time was its client's"
    );
    // Its place goes to the next call at once, not at its end: its client could read its
    // answer slowly past `probe_timeout`, whose running out would reopen the breaker.
    assert!(s.call(Duration::ZERO, false), "its place went to the next");
    assert_eq!(s.state("b"), Closed);
    drop(probe);
}
