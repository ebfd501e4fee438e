//! Loading, merging and validating system rules.

use super::checks::{enter, setup};
use crate::system::{
    validate_system_rules, ManualProbe, MinRtEstimate, SystemCheck, SystemRule, SystemRules,
};
use crate::BlockKind;
use std::time::Duration;

#[test]
fn the_lowest_threshold_of_any_rule_applies_and_is_named() {
    let (spillway, _, _) = setup();
    spillway
        .load_system_rules(vec![
            SystemRule::new("loose")
                .with_max_concurrency(10)
                .with_qps(1.0),
            SystemRule::new("tight").with_max_concurrency(1),
        ])
        .unwrap();
    let first = enter(&spillway).unwrap(); // qps: 0 + 1 is not over 1
    let err = enter(&spillway).unwrap_err();
    // qps is checked first: 1 + 1 > 1, from `loose`.
    assert_eq!(err.kind(), BlockKind::System(SystemCheck::Qps));
    assert_eq!(err.rule_id(), Some("loose"));
    drop(first);
    spillway
        .load_system_rules(vec![
            SystemRule::new("loose").with_max_concurrency(10),
            SystemRule::new("tight").with_max_concurrency(1),
        ])
        .unwrap();
    let _held = enter(&spillway).unwrap();
    let err = enter(&spillway).unwrap_err();
    assert_eq!(
        (err.kind(), err.rule_id()),
        (BlockKind::System(SystemCheck::Concurrency), Some("tight"))
    );
}

#[test]
fn concurrency_is_checked_before_rt_and_load() {
    let rules = SystemRules::new(vec![
        SystemRule::new("a").with_highest_system_load(0.0),
        SystemRule::new("b").with_max_concurrency(0),
    ])
    .unwrap();
    let node = crate::stats::ResourceNode::new(crate::stats::NodeConfig::default());
    let probe = ManualProbe::new();
    probe.set_load(10.0);
    node.increase_concurrency();
    let block = rules.check(&node, &probe, 1 << 60, 1).unwrap_err();
    assert_eq!(
        (block.check, block.rule_id),
        (SystemCheck::Concurrency, "b")
    );
}

#[test]
fn a_bad_set_names_the_rule_and_field_and_changes_nothing() {
    let (spillway, _, _) = setup();
    let good = vec![SystemRule::new("guard").with_max_concurrency(5)];
    spillway.load_system_rules(good.clone()).unwrap();
    let cases = [
        (SystemRule::new(""), "id"),
        (SystemRule::new("empty"), "id"),
        (SystemRule::new("q").with_qps(f64::NAN), "qps"),
        (SystemRule::new("q").with_qps(-1.0), "qps"),
        (
            SystemRule::new("l").with_highest_system_load(f64::INFINITY),
            "highest_system_load",
        ),
        (
            SystemRule::new("c").with_highest_cpu_usage(-0.1),
            "highest_cpu_usage",
        ),
        (
            SystemRule::new("m")
                .with_qps(1.0)
                .with_min_rt(MinRtEstimate::BucketAverage {
                    window: Duration::from_millis(500),
                }),
            "min_rt.window",
        ),
        (
            SystemRule::new("m")
                .with_qps(1.0)
                .with_min_rt(MinRtEstimate::BucketAverage {
                    window: Duration::from_secs(61),
                }),
            "min_rt.window",
        ),
    ];
    for (rule, field) in cases {
        let err = spillway
            .load_system_rules(vec![SystemRule::new("ok").with_qps(1.0), rule])
            .unwrap_err();
        assert_eq!((err.index(), err.field()), (1, field), "{err}");
        assert_eq!(spillway.system_rules(), good, "the old rules stay in force");
    }
    let duplicate = [
        SystemRule::new("x").with_qps(1.0),
        SystemRule::new("x").with_qps(2.0),
    ];
    let err = validate_system_rules(&duplicate).unwrap_err();
    assert_eq!(
        err.to_string(),
        "system rule #1 (id `x`): `id` is also the id of system rule #0"
    );
}

#[test]
fn an_empty_set_turns_protection_off() {
    let (spillway, _, probe) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("cpu").with_highest_cpu_usage(0.5)])
        .unwrap();
    probe.set_cpu_usage(0.9);
    assert!(enter(&spillway).is_err());
    spillway.load_system_rules(Vec::new()).unwrap();
    assert!(enter(&spillway).is_ok());
}

#[test]
fn a_system_block_comes_before_flow_rules() {
    let (spillway, _, probe) = setup();
    spillway
        .load_flow_rules(vec![crate::flow::FlowRule::qps("flow", "api", 0.0)])
        .unwrap();
    spillway
        .load_system_rules(vec![SystemRule::new("cpu").with_highest_cpu_usage(0.5)])
        .unwrap();
    probe.set_cpu_usage(0.9);
    assert_eq!(
        enter(&spillway).unwrap_err().kind(),
        BlockKind::System(SystemCheck::Cpu)
    );
    probe.set_cpu_usage(0.1);
    assert_eq!(enter(&spillway).unwrap_err().kind(), BlockKind::Flow);
}

#[cfg(feature = "serde")]
#[test]
fn rules_read_from_json_with_defaults() {
    use crate::system::CpuStrategy;
    let rules: Vec<SystemRule> = serde_json::from_str(
        r#"[
            {"id": "host", "highest_system_load": 8.0, "avg_rt": "250ms"},
            {"id": "cpu", "highest_cpu_usage": 0.8, "cpu_strategy": "bbr",
             "min_rt": {"type": "bucket_average", "window": "10s"}}
        ]"#,
    )
    .unwrap();
    assert_eq!(
        rules,
        [
            SystemRule::new("host")
                .with_highest_system_load(8.0)
                .with_avg_rt(Duration::from_millis(250)),
            SystemRule::new("cpu")
                .with_highest_cpu_usage(0.8)
                .with_cpu_strategy(CpuStrategy::Bbr)
                .with_min_rt(MinRtEstimate::BucketAverage {
                    window: Duration::from_secs(10)
                }),
        ]
    );
    let json = serde_json::to_string(&rules[1]).unwrap();
    assert_eq!(serde_json::from_str::<SystemRule>(&json).unwrap(), rules[1]);
    let unknown = serde_json::from_str::<SystemRule>(r#"{"id": "x", "qsp": 1}"#);
    assert!(unknown.unwrap_err().to_string().contains("qsp"));
}
