//! What `Spillway::flow_rule_state` reports, on a manual clock through the entry path: a pacer's
//! queue as calls wait and time passes, a warm-up's allowed QPS as it warms, a shadow rule's
//! refusals.

use crate::flow::{Behavior, FlowRule};
use crate::{ManualClock, Spillway};
use std::time::Duration;

fn spillway() -> (ManualClock, Spillway) {
    let clock = ManualClock::new();
    clock.set_nanos(super::at_ms(0));
    (clock.clone(), Spillway::new_with_clock(clock))
}

#[test]
fn a_pacer_reports_its_queue() {
    let (clock, spillway) = spillway();
    let rule = FlowRule::qps("paced", "jobs", 10.0).with_behavior(Behavior::Throttle {
        max_queueing_time: Duration::from_secs(1),
        stat_duration: Duration::from_secs(1),
    });
    spillway.load_flow_rules(vec![rule]).unwrap();
    let wait = || spillway.flow_rule_state("paced").unwrap().queue_wait;
    assert_eq!(wait(), Some(Duration::ZERO));
    // The first passes; the next three queue 100, 200 and 300 ms behind it (held, not waited
    // out: `enter` would wait on the manual clock, moving it).
    let admissions: Vec<_> = (0..4).map(|_| spillway.entry("jobs").try_enter()).collect();
    assert!(admissions.iter().all(Result::is_ok));
    assert_eq!(wait(), Some(Duration::from_millis(300)));
    clock.advance(Duration::from_millis(120));
    assert_eq!(wait(), Some(Duration::from_millis(180)));
    clock.advance(Duration::from_millis(500));
    assert_eq!(wait(), Some(Duration::ZERO));
    assert_eq!(spillway.flow_rule_state("paced").unwrap().allowed_qps, None);
}

#[test]
fn a_warm_up_reports_its_allowed_rate_rising() {
    let (clock, spillway) = spillway();
    let rule = FlowRule::qps("warm", "api", 30.0).with_behavior(Behavior::WarmUp {
        period: Duration::from_secs(10),
        cold_factor: 3,
    });
    spillway.load_flow_rules(vec![rule]).unwrap();
    let allowed = || {
        spillway
            .flow_rule_state("warm")
            .unwrap()
            .allowed_qps
            .unwrap()
    };
    // Cold at its first check: count / cold_factor.
    drop(spillway.entry("api").enter());
    assert!((allowed() - 10.0).abs() < 1e-9, "{}", allowed());
    // Driven at the cold rate, the bucket drains and the allowed rate climbs to the count.
    let mut seen = vec![allowed()];
    for _ in 0..30 {
        for _ in 0..40 {
            drop(spillway.entry("api").enter());
        }
        clock.advance(Duration::from_secs(1));
        seen.push(allowed());
    }
    assert!(seen.windows(2).all(|w| w[1] >= w[0]), "{seen:?}");
    assert!((seen.last().unwrap() - 30.0).abs() < 1e-9, "{seen:?}");
    assert_eq!(spillway.flow_rule_state("warm").unwrap().queue_wait, None);
}

#[test]
fn a_shadow_rule_reports_what_it_did_not_refuse_and_no_rule_reports_nothing() {
    let (_clock, spillway) = spillway();
    let rule = FlowRule::qps("try", "api", 2.0).with_shadow(true);
    spillway.load_flow_rules(vec![rule]).unwrap();
    for _ in 0..5 {
        assert!(spillway.entry("api").enter().is_ok());
    }
    let state = spillway.flow_rule_state("try").unwrap();
    assert_eq!(
        (state.shadow_refusals, state.allowed_qps, state.queue_wait),
        (3, None, None)
    );
    assert!(spillway.flow_rule_state("nope").is_none());
}
