//! Flow rules in shadow mode: they decide and count what they would refuse, and admit.

mod support;

use spillway::flow::{Behavior, Decision, FlowRule, Throttle};
use spillway::{Admission, BlockKind, Clock};
use std::time::Duration;
use support::manual;

#[test]
fn a_shadow_qps_rule_admits_and_counts_what_it_would_refuse() {
    let (spillway, clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("try-3", "r", 3.0).with_shadow(true)])
        .unwrap();
    let entries: Vec<_> = (0..10)
        .map(|_| spillway.entry("r").enter().unwrap())
        .collect();
    let flagged: Vec<_> = entries.iter().map(|entry| entry.shadow_rule()).collect();
    assert_eq!(flagged[..3], [None, None, None]);
    assert!(flagged[3..].iter().all(|rule| *rule == Some("try-3")));
    assert_eq!(
        spillway.flow_rule_stats("try-3").unwrap().shadow_refusals,
        7
    );
    // The node counts what happened: ten passes, no block.
    clock.advance_millis(10);
    drop(entries);
    let stats = spillway.resource("r").unwrap().stats();
    assert_eq!((stats.total_pass, stats.total_block), (10, 0));
    // It reads the window like Sentinel's rule: once the passes leave it, it would admit again.
    clock.advance_millis(1_000);
    assert_eq!(spillway.entry("r").enter().unwrap().shadow_rule(), None);
    assert_eq!(spillway.flow_rule_stats("nope"), None);
}

#[test]
fn an_enforced_rule_beside_a_shadow_rule_still_refuses_exactly() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![
            FlowRule::qps("try-2", "r", 2.0).with_shadow(true),
            FlowRule::qps("limit-4", "r", 4.0),
        ])
        .unwrap();
    let outcomes: Vec<_> = (0..6)
        .map(|_| match spillway.entry("r").enter() {
            Ok(entry) => Ok(entry.shadow_rule()),
            Err(err) => Err(err.rule_id().map(str::to_owned)),
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            Ok(None),
            Ok(None),
            Ok(Some("try-2")),
            Ok(Some("try-2")),
            Err(Some("limit-4".to_owned())),
            Err(Some("limit-4".to_owned())),
        ]
    );
    // The shadow rule would have refused all four over its count, the last two included.
    assert_eq!(
        spillway.flow_rule_stats("try-2").unwrap().shadow_refusals,
        4
    );
}

#[test]
fn a_shadow_throttle_never_queues_and_refuses_what_the_throttle_would() {
    let (spillway, clock) = manual();
    let max_queueing_time = Duration::from_millis(500);
    spillway
        .load_flow_rules(vec![FlowRule::qps("pace-10", "r", 10.0)
            .with_behavior(Behavior::throttle(max_queueing_time))
            .with_shadow(true)])
        .unwrap();
    // The same arrivals through a standalone throttle: what it would decide.
    let reference = Throttle::new(10.0, max_queueing_time);
    let mut expected = 0;
    for step in 0..40u64 {
        clock.advance_millis(step % 3 * 20);
        let now = clock.now_nanos();
        let would_refuse = reference.check(now, 1) == Decision::Block;
        expected += u64::from(would_refuse);
        let Admission::Ready(entry) = spillway.entry("r").try_enter().unwrap() else {
            panic!("a shadow throttle queued an entry");
        };
        assert_eq!(
            entry.shadow_rule().is_some(),
            would_refuse,
            "arrival {step}"
        );
    }
    assert!(expected > 0, "the trace overloads the throttle");
    assert_eq!(
        spillway.flow_rule_stats("pace-10").unwrap().shadow_refusals,
        expected
    );
}

#[test]
fn a_shadow_concurrency_rule_takes_no_place() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![
            FlowRule::in_flight("r", 1)
                .with_id("try-1")
                .with_shadow(true),
            FlowRule::in_flight("r", 3).with_id("limit-3"),
        ])
        .unwrap();
    let first = spillway.entry("r").enter().unwrap();
    let second = spillway.entry("r").enter().unwrap();
    let third = spillway.entry("r").enter().unwrap();
    assert_eq!(first.shadow_rule(), None);
    assert_eq!(second.shadow_rule(), Some("try-1"));
    let err = spillway.entry("r").enter().unwrap_err();
    assert_eq!((err.rule_id(), err.observed()), (Some("limit-3"), 3.0));
    drop((first, second, third));
    assert_eq!(spillway.resource("r").unwrap().stats().concurrency, 0);
    assert!(spillway.entry("r").enter().is_ok());
}

#[test]
fn a_prioritized_entry_over_a_shadow_rule_goes_at_once() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("try-1", "r", 1.0).with_shadow(true)])
        .unwrap();
    let _first = spillway.entry("r").enter().unwrap();
    let Admission::Ready(second) = spillway.entry("r").prioritized().try_enter().unwrap() else {
        panic!("a shadow rule made a prioritized entry borrow and wait");
    };
    assert_eq!(second.shadow_rule(), Some("try-1"));
    let stats = spillway.resource("r").unwrap().stats();
    assert_eq!((stats.total_pass, stats.occupied_pass_qps), (2, 0.0));
}

#[test]
fn switching_a_rule_between_shadow_and_force_keeps_its_count() {
    let (spillway, _clock) = manual();
    let rule = FlowRule::qps("r-1", "r", 1.0);
    spillway
        .load_flow_rules(vec![rule.clone().with_shadow(true)])
        .unwrap();
    let _held: Vec<_> = (0..3)
        .map(|_| spillway.entry("r").enter().unwrap())
        .collect();
    assert_eq!(spillway.flow_rule_stats("r-1").unwrap().shadow_refusals, 2);
    spillway.load_flow_rules(vec![rule]).unwrap();
    let err = spillway.entry("r").enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Flow);
    assert_eq!(spillway.flow_rule_stats("r-1").unwrap().shadow_refusals, 2);
}
