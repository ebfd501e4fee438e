use crate::flow::{validate_flow_rules, Behavior, FlowRule, Grade, LimitApp, Strategy};
use std::time::Duration;

#[test]
fn rules_read_from_json_with_defaults_and_human_durations() {
    let json = r#"[
        {"id": "a", "resource": "GET /orders", "count": 100},
        {"id": "b", "resource": "GET /orders", "count": 0.5, "grade": "qps",
         "behavior": {"type": "warm_up_throttle", "period": "10s", "max_queueing_time": "500ms"},
         "limit_app": "mobile", "strategy": {"type": "relate", "ref_resource": "db"},
         "occupy_timeout": "200ms"},
        {"id": "c", "resource": "db", "count": 8, "grade": "concurrency", "limit_app": "other"}
    ]"#;
    let rules: Vec<FlowRule> = serde_json::from_str(json).unwrap();
    assert_eq!(rules[0], FlowRule::qps("a", "GET /orders", 100.0));
    assert_eq!(
        rules[1].behavior,
        Behavior::WarmUpThrottle {
            period: Duration::from_secs(10),
            cold_factor: 3,
            max_queueing_time: Duration::from_millis(500),
        }
    );
    assert_eq!(rules[1].limit_app, LimitApp::Origin("mobile".into()));
    assert_eq!(
        rules[1].strategy,
        Strategy::Relate {
            ref_resource: "db".into()
        }
    );
    assert_eq!(rules[1].occupy_timeout, Duration::from_millis(200));
    assert_eq!(
        (rules[2].grade, &rules[2].limit_app),
        (Grade::Concurrency, &LimitApp::Other)
    );
    assert_eq!(validate_flow_rules(&rules), Ok(()));

    let back: Vec<FlowRule> =
        serde_json::from_str(&serde_json::to_string(&rules).unwrap()).unwrap();
    assert_eq!(back, rules);
}

#[test]
fn unknown_fields_are_refused() {
    let json = r#"{"id": "a", "resource": "r", "count": 1, "cuont": 2}"#;
    let err = serde_json::from_str::<FlowRule>(json).unwrap_err();
    assert!(err.to_string().contains("unknown field `cuont`"), "{err}");
}

#[test]
fn a_throttle_is_per_second_unless_its_stat_duration_says_otherwise() {
    let json = r#"[
        {"id": "a", "resource": "r", "count": 5,
         "behavior": {"type": "throttle", "max_queueing_time": "50ms"}},
        {"id": "b", "resource": "r", "count": 5,
         "behavior": {"type": "throttle", "max_queueing_time": "50ms", "stat_duration": "500ms"}}
    ]"#;
    let rules: Vec<FlowRule> = serde_json::from_str(json).unwrap();
    assert_eq!(
        rules[0].behavior,
        Behavior::throttle(Duration::from_millis(50))
    );
    assert_eq!(
        rules[1].behavior,
        Behavior::Throttle {
            max_queueing_time: Duration::from_millis(50),
            stat_duration: Duration::from_millis(500),
        }
    );
    let back: Vec<FlowRule> =
        serde_json::from_str(&serde_json::to_string(&rules).unwrap()).unwrap();
    assert_eq!(back, rules);
}
