use crate::flow::{validate_flow_rules, Behavior, FlowRule, LimitApp, Strategy};
use std::time::Duration;

fn error_of(rule: FlowRule) -> (String, &'static str) {
    let err = validate_flow_rules(&[FlowRule::qps("fine", "r", 1.0), rule]).unwrap_err();
    assert_eq!(err.index(), 1);
    (err.id().to_string(), err.field())
}

#[test]
fn each_bad_field_is_named() {
    let warm = |period, cold_factor| Behavior::WarmUp {
        period,
        cold_factor,
    };
    let paced = |stat_duration| Behavior::Throttle {
        max_queueing_time: Duration::from_secs(1),
        stat_duration,
    };
    let cases = [
        (FlowRule::qps("", "r", 1.0), "id"),
        (FlowRule::qps("fine", "r", 1.0), "id"),
        (FlowRule::qps("x", "", 1.0), "resource"),
        (FlowRule::qps("x", "r", -1.0), "count"),
        (FlowRule::qps("x", "r", f64::INFINITY), "count"),
        (
            FlowRule::in_flight("r", 1)
                .with_id("x")
                .with_behavior(Behavior::throttle(Duration::ZERO)),
            "behavior",
        ),
        (
            FlowRule::qps("x", "r", 1.0).with_behavior(warm(Duration::ZERO, 3)),
            "behavior.period",
        ),
        (
            FlowRule::qps("x", "r", 1.0).with_behavior(paced(Duration::ZERO)),
            "behavior.stat_duration",
        ),
        (
            FlowRule::qps("x", "r", 1.0).with_behavior(paced(Duration::from_micros(1_500))),
            "behavior.stat_duration",
        ),
        (
            FlowRule::qps("x", "r", 1.0)
                .with_behavior(paced(Duration::from_millis(u64::from(u32::MAX) + 1))),
            "behavior.stat_duration",
        ),
        (
            FlowRule::qps("x", "r", 1.0).with_behavior(warm(Duration::from_secs(1), 1)),
            "behavior.cold_factor",
        ),
        (
            FlowRule::qps("x", "r", 1.0).with_limit_app(LimitApp::Origin(String::new())),
            "limit_app",
        ),
        (
            FlowRule::qps("x", "r", 1.0).with_strategy(Strategy::Relate {
                ref_resource: String::new(),
            }),
            "strategy.ref_resource",
        ),
        (
            FlowRule::qps("x", "r", 1.0).with_strategy(Strategy::Chain {
                entrance: String::new(),
            }),
            "strategy.entrance",
        ),
        (
            FlowRule::qps("x", "r", 1.0).with_occupy_timeout(Duration::from_millis(1_001)),
            "occupy_timeout",
        ),
    ];
    for (rule, field) in cases {
        let id = rule.id.clone();
        assert_eq!(error_of(rule), (id, field));
    }
}

#[test]
fn duplicate_ids_name_the_first() {
    let err = validate_flow_rules(&[FlowRule::qps("a", "r", 1.0), FlowRule::qps("a", "s", 1.0)])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "flow rule #1 (id `a`): `id` is also the id of flow rule #0"
    );
}

#[test]
fn a_good_set_passes() {
    let rules = [
        FlowRule::qps("a", "r", 0.0),
        FlowRule::qps("b", "r", 0.4).with_behavior(Behavior::WarmUpThrottle {
            period: Duration::from_secs(5),
            cold_factor: 2,
            max_queueing_time: Duration::from_millis(500),
        }),
        FlowRule::in_flight("r", 10)
            .with_id("c")
            .with_limit_app(LimitApp::Other),
    ];
    assert_eq!(validate_flow_rules(&rules), Ok(()));
}

#[test]
fn per_resource_caps_are_checked_before_anything_loads() {
    use crate::flow::{MAX_QUEUEING_RULES_PER_RESOURCE, MAX_RULES_PER_RESOURCE};
    let many: Vec<_> = (0..=MAX_RULES_PER_RESOURCE)
        .map(|i| FlowRule::qps(format!("r{i}"), "a", 1.0))
        .collect();
    let err = validate_flow_rules(&many).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("flow rule #{MAX_RULES_PER_RESOURCE} (id `r{MAX_RULES_PER_RESOURCE}`): `resource` has more than {MAX_RULES_PER_RESOURCE} flow rules")
    );
    assert!(validate_flow_rules(&many[..MAX_RULES_PER_RESOURCE]).is_ok());
    let pacing: Vec<_> = (0..=MAX_QUEUEING_RULES_PER_RESOURCE)
        .map(|i| {
            FlowRule::qps(format!("p{i}"), "a", 1.0)
                .with_behavior(Behavior::throttle(Duration::from_secs(1)))
        })
        .collect();
    let err = validate_flow_rules(&pacing).unwrap_err();
    assert_eq!(
        (err.index(), err.field()),
        (MAX_QUEUEING_RULES_PER_RESOURCE, "resource")
    );
    assert!(err.problem().contains("queueing (throttle) flow rules"));
}

#[test]
fn a_throttle_per_whole_milliseconds_is_valid() {
    for millis in [1, 500, 60_000, u64::from(u32::MAX)] {
        let rule = FlowRule::qps("x", "r", 5.0).with_behavior(Behavior::Throttle {
            max_queueing_time: Duration::ZERO,
            stat_duration: Duration::from_millis(millis),
        });
        assert_eq!(validate_flow_rules(&[rule]), Ok(()), "{millis} ms");
    }
}
