//! Loading breaker rules: validation, and state kept across reloads.

use super::strategies::{setup, RETRY};
use crate::breaker::{validate_breaker_rules, BreakerRule, BreakerState, BreakerStrategy};
use std::time::Duration;

fn rule(id: &str) -> BreakerRule {
    BreakerRule::new(
        id,
        "api",
        BreakerStrategy::ErrorCount { threshold: 0 },
        RETRY,
    )
    .with_min_request_amount(1)
}

#[test]
fn an_unchanged_rule_keeps_its_state_and_a_changed_one_starts_closed() {
    let s = setup(vec![rule("a"), rule("b")]);
    assert!(s.call(Duration::ZERO, true));
    assert_eq!(
        (s.state("a"), s.state("b")),
        (BreakerState::Open, BreakerState::Open)
    );
    s.spillway
        .load_breaker_rules(vec![rule("a"), rule("b").with_half_open_probes(2)])
        .unwrap();
    assert_eq!(
        (s.state("a"), s.state("b")),
        (BreakerState::Open, BreakerState::Closed)
    );
    s.spillway.load_breaker_rules(Vec::new()).unwrap();
    assert_eq!(s.spillway.breaker_state("a"), None);
    assert!(s.call(Duration::ZERO, true), "no breaker left");
}

#[test]
fn a_bad_set_names_the_rule_and_field_and_changes_nothing() {
    let s = setup(vec![rule("good")]);
    let slow = |ratio| BreakerStrategy::SlowCallRatio {
        max_rt: Duration::from_millis(1),
        slow_ratio_threshold: ratio,
    };
    let cases = [
        (rule(""), "id"),
        (BreakerRule::new("x", "", slow(0.5), RETRY), "resource"),
        (
            BreakerRule::new("x", "api", slow(1.5), RETRY),
            "strategy.slow_ratio_threshold",
        ),
        (
            BreakerRule::new("x", "api", slow(f64::NAN), RETRY),
            "strategy.slow_ratio_threshold",
        ),
        (
            BreakerRule::new(
                "x",
                "api",
                BreakerStrategy::ErrorRatio { threshold: -0.1 },
                RETRY,
            ),
            "strategy.threshold",
        ),
        (
            BreakerRule::new("x", "api", slow(0.5), Duration::ZERO),
            "retry_timeout",
        ),
        (
            rule("x").with_probe_timeout(Duration::ZERO),
            "probe_timeout",
        ),
        (rule("x").with_half_open_probes(0), "half_open_probes"),
        (
            rule("x").with_stat_window(Duration::from_secs(1), 1),
            "stat_buckets",
        ),
        (
            rule("x").with_stat_window(Duration::from_millis(1), 3),
            "stat_interval",
        ),
    ];
    for (bad, field) in cases {
        let err = s
            .spillway
            .load_breaker_rules(vec![rule("ok"), bad])
            .unwrap_err();
        assert_eq!((err.index(), err.field()), (1, field), "{err}");
        assert_eq!(s.spillway.breaker_rules(), [rule("good")]);
    }
    let nine: Vec<_> = (0..9).map(|i| rule(&format!("r{i}"))).collect();
    let err = validate_breaker_rules(&nine).unwrap_err();
    assert_eq!(
        err.to_string(),
        "breaker rule #8 (id `r8`): `resource` has more than 8 breaker rules"
    );
}

#[cfg(feature = "serde")]
#[test]
fn rules_read_from_json_with_defaults() {
    let rules: Vec<BreakerRule> = serde_json::from_str(
        r#"[{"id": "slow", "resource": "api", "retry_timeout": "10s",
             "strategy": {"type": "slow_call_ratio", "max_rt": "200ms", "slow_ratio_threshold": 0.5}},
            {"id": "errors", "resource": "api", "retry_timeout": "30s", "half_open_probes": 3,
             "probe_timeout": "2s", "stat_interval": "10s", "stat_buckets": 20,
             "strategy": {"type": "error_count", "threshold": 10}}]"#,
    )
    .unwrap();
    assert_eq!(
        rules[0],
        BreakerRule::new(
            "slow",
            "api",
            BreakerStrategy::SlowCallRatio {
                max_rt: Duration::from_millis(200),
                slow_ratio_threshold: 0.5
            },
            Duration::from_secs(10)
        )
    );
    assert_eq!(
        rules[1],
        BreakerRule::new(
            "errors",
            "api",
            BreakerStrategy::ErrorCount { threshold: 10 },
            Duration::from_secs(30)
        )
        .with_half_open_probes(3)
        .with_probe_timeout(Duration::from_secs(2))
        .with_stat_window(Duration::from_secs(10), 20)
    );
    validate_breaker_rules(&rules).unwrap();
    let json = serde_json::to_string(&rules[1]).unwrap();
    assert_eq!(
        serde_json::from_str::<BreakerRule>(&json).unwrap(),
        rules[1]
    );
}
