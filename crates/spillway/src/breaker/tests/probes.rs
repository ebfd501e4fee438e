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
