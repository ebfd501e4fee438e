//! Adaptive limits as rules of the entry path: checked with the other rules, all or nothing,
//! fed by every exit, on one resource or on all inbound traffic, kept across reloads.

mod support;

use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig, EnvoyGradientConfig};
use spillway::breaker::{BreakerRule, BreakerStrategy};
use spillway::flow::{Behavior, FlowRule};
use spillway::{Admission, BlockKind};
use std::time::Duration;
use support::manual;

/// AIMD from `limit`, never moving below it.
fn aimd(limit: u32) -> AdaptiveAlgorithm {
    AdaptiveAlgorithm::Aimd(AimdConfig {
        initial_limit: limit,
        min_limit: limit,
        max_limit: limit + 10,
        ..AimdConfig::default()
    })
}

#[test]
fn a_refusal_names_the_rule_its_limit_and_the_calls_in_flight() {
    let (spillway, clock) = manual();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("r-adaptive", "r", aimd(2))])
        .unwrap();
    let first = spillway.entry("r").enter().unwrap();
    let _second = spillway.entry("r").enter().unwrap();
    let err = spillway.entry("r").enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Adaptive);
    assert_eq!(err.kind().as_str(), "adaptive");
    assert_eq!(
        (err.rule_id(), err.observed(), err.threshold()),
        (Some("r-adaptive"), 2.0, 2.0)
    );
    assert_eq!(err.retry_after(), None, "a place frees when a call ends");
    // The exit is a sample: 30 ms, with the limit in use, so AIMD grows by one.
    clock.advance_millis(30);
    drop(first);
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.samples, state.limit, state.in_flight), (1, 3, 1));
    // Refusals still name no time to retry after, though an RT was measured: the next place
    // frees when a call ends, not after an RT.
    let _third = spillway.entry("r").enter().unwrap();
    let _fourth = spillway.entry("r").enter().unwrap();
    let err = spillway.entry("r").enter().unwrap_err();
    assert_eq!(err.retry_after(), None);
    // The resource's statistics count the refusals.
    assert_eq!(spillway.resource("r").unwrap().stats().total_block, 2);
}

#[test]
fn a_refusal_by_the_adaptive_limit_gives_back_the_flow_rules_places() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::in_flight("r", 2).with_id("r-two")])
        .unwrap();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("r-adaptive", "r", aimd(1))])
        .unwrap();
    let held = spillway.entry("r").enter().unwrap();
    for _ in 0..3 {
        let err = spillway.entry("r").enter().unwrap_err();
        assert_eq!(err.kind(), BlockKind::Adaptive);
    }
    // Had the refused entries kept their concurrency places, the flow rule would refuse now.
    spillway.load_adaptive_rules(Vec::new()).unwrap();
    let second = spillway
        .entry("r")
        .enter()
        .expect("the places were given back");
    drop((held, second));
}

#[test]
fn a_breaker_refusal_after_it_gives_the_adaptive_place_back() {
    let (spillway, _clock) = manual();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("r-adaptive", "r", aimd(1))])
        .unwrap();
    spillway
        .load_breaker_rules(vec![BreakerRule::new(
            "r-breaker",
            "r",
            BreakerStrategy::ErrorCount { threshold: 0 },
            Duration::from_secs(10),
        )
        .with_min_request_amount(1)])
        .unwrap();
    let mut failing = spillway.entry("r").enter().unwrap();
    failing.mark_error();
    drop(failing); // one error, over a threshold of 0: the breaker opens
    for _ in 0..3 {
        assert_eq!(
            spillway.entry("r").enter().unwrap_err().kind(),
            BlockKind::Breaker
        );
    }
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!(state.in_flight, 0, "refused entries hold no adaptive place");
    assert_eq!(state.samples, 1, "only the entry that ran is a sample");
}

#[test]
fn an_inbound_rule_limits_every_inbound_entry_and_no_outbound_one() {
    let (spillway, _clock) = manual();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::inbound("service", aimd(2))])
        .unwrap();
    let _a = spillway.entry("a").inbound().enter().unwrap();
    let _b = spillway.entry("b").inbound().enter().unwrap();
    let err = spillway.entry("c").inbound().enter().unwrap_err();
    assert_eq!(
        (err.kind(), err.rule_id()),
        (BlockKind::Adaptive, Some("service"))
    );
    assert_eq!(err.resource(), "c");
    let _outbound = spillway
        .entry("c")
        .enter()
        .expect("outbound entries are not limited");
    assert_eq!(spillway.adaptive_state("service").unwrap().in_flight, 2);
}

#[test]
fn a_queued_entry_holds_its_adaptive_place_while_it_waits() {
    let (spillway, clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("pace", "r", 10.0)
            .with_behavior(Behavior::throttle(Duration::from_secs(1)))])
        .unwrap();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("r-adaptive", "r", aimd(2))])
        .unwrap();
    let Ok(Admission::Ready(first)) = spillway.entry("r").try_enter() else {
        panic!("the first goes at once");
    };
    let Ok(Admission::Queued(waiting)) = spillway.entry("r").try_enter() else {
        panic!("the second is paced");
    };
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().in_flight, 2);
    assert_eq!(
        spillway.entry("r").try_enter().unwrap_err().kind(),
        BlockKind::Adaptive
    );
    drop(waiting); // given up: its place goes back, with no sample
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.in_flight, state.samples), (1, 0));
    clock.advance_millis(100);
    drop(first);
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().samples, 1);
}

#[test]
fn a_reload_keeps_an_unchanged_rule_s_limiter_and_a_bad_one_changes_nothing() {
    let (spillway, clock) = manual();
    let rule = AdaptiveRule::resource("r-adaptive", "r", aimd(1));
    spillway.load_adaptive_rules(vec![rule.clone()]).unwrap();
    let entry = spillway.entry("r").enter().unwrap();
    clock.advance_millis(5);
    drop(entry);
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().limit, 2);
    // The same rule again: its limit (and its samples) stay.
    spillway.load_adaptive_rules(vec![rule.clone()]).unwrap();
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.limit, state.samples), (2, 1));
    // A bad set is refused whole, naming the rule and the field.
    let bad = AdaptiveRule::resource(
        "broken",
        "s",
        AdaptiveAlgorithm::EnvoyGradient(EnvoyGradientConfig {
            min_concurrency: 0,
            ..EnvoyGradientConfig::default()
        }),
    );
    let err = spillway.load_adaptive_rules(vec![rule, bad]).unwrap_err();
    assert_eq!(
        (err.kind(), err.index(), err.id()),
        ("adaptive", 1, "broken")
    );
    assert_eq!(err.field(), "algorithm.min_concurrency");
    assert_eq!(spillway.adaptive_rules().len(), 1);
    assert_eq!(spillway.adaptive_state("r-adaptive").unwrap().limit, 2);
    // Two rules for one resource are refused too.
    let twice = vec![
        AdaptiveRule::resource("one", "r", aimd(1)),
        AdaptiveRule::resource("two", "r", aimd(1)),
    ];
    let err = spillway.load_adaptive_rules(twice).unwrap_err();
    assert_eq!((err.index(), err.field()), (1, "resource"));
    // A changed rule starts over.
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("r-adaptive", "r", aimd(4))])
        .unwrap();
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.limit, state.samples), (4, 0));
}

#[test]
fn a_dropped_entry_is_a_drop_to_its_adaptive_limit() {
    let (spillway, clock) = manual();
    let aimd = AdaptiveAlgorithm::Aimd(AimdConfig {
        initial_limit: 10,
        min_limit: 1,
        ..AimdConfig::default()
    });
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("r-aimd", "r", aimd)])
        .unwrap();
    let mut entry = spillway.entry("r").enter().unwrap();
    clock.advance_millis(5); // fast, but it timed out for its caller
    entry.mark_dropped();
    drop(entry);
    let state = spillway.adaptive_state("r-aimd").unwrap();
    assert_eq!((state.limit, state.last_change.as_str()), (9, "dropped"));
    // A drop is not an error.
    assert_eq!(spillway.resource("r").unwrap().stats().total_error, 0);
}

#[test]
fn an_abandoned_call_frees_its_places_and_teaches_no_breaker_or_adaptive_limit() {
    let (spillway, clock) = manual();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("r-adaptive", "r", aimd(1))])
        .unwrap();
    spillway
        .load_breaker_rules(vec![BreakerRule::new(
            "r-breaker",
            "r",
            BreakerStrategy::ErrorCount { threshold: 0 },
            Duration::from_secs(10),
        )
        .with_min_request_amount(1)])
        .unwrap();
    // Ten calls abandoned after a long wait, each marked as an error too: none counts.
    for _ in 0..10 {
        let mut call = spillway.entry("r").enter().unwrap();
        clock.advance_millis(900);
        call.mark_error();
        call.mark_abandoned();
        drop(call);
    }
    let state = spillway.adaptive_state("r-adaptive").unwrap();
    assert_eq!((state.in_flight, state.samples), (0, 0));
    assert_eq!(
        spillway.breaker_state("r-breaker"),
        Some(spillway::breaker::BreakerState::Closed)
    );
    let stats = spillway.resource("r").unwrap().stats();
    assert_eq!(stats.concurrency, 0);
    assert_eq!(
        (stats.total_pass, stats.total_success, stats.total_error),
        (10, 0, 0)
    );
    // A call that ran and failed still opens the breaker.
    let mut failing = spillway.entry("r").enter().unwrap();
    failing.mark_error();
    drop(failing);
    assert_eq!(
        spillway.entry("r").enter().unwrap_err().kind(),
        BlockKind::Breaker
    );
}

#[test]
fn an_abandoned_probe_gives_its_place_to_the_next_call() {
    let (spillway, clock) = manual();
    spillway
        .load_breaker_rules(vec![BreakerRule::new(
            "b",
            "r",
            BreakerStrategy::ErrorCount { threshold: 0 },
            Duration::from_secs(1),
        )
        .with_min_request_amount(1)])
        .unwrap();
    let mut failing = spillway.entry("r").enter().unwrap();
    failing.mark_error();
    drop(failing);
    clock.advance_millis(1_000);
    // Half-open: the probe is abandoned; the next call probes at once, and closes it.
    let mut probe = spillway.entry("r").enter().unwrap();
    probe.mark_abandoned();
    drop(probe);
    let probe = spillway
        .entry("r")
        .enter()
        .expect("the probe place came back");
    drop(probe);
    assert_eq!(
        spillway.breaker_state("b"),
        Some(spillway::breaker::BreakerState::Closed)
    );
}
