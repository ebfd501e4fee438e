//! Circuit breakers (`[[breaker]]`): Sentinel's degrade rules.

use super::core_kind::CoreKind;
use crate::metrics::{gauges, rule_labels};
use prometheus_client::encoding::DescriptorEncoder;
use serde_json::{json, Value};
use spillway::breaker::BreakerRule;
use spillway::breaker::BreakerState;
use std::fmt;

/// Circuit breaker rules; their states under `breakers` in the status, the key it has had
/// since it began (the dashboard reads it).
pub(super) const BREAKER: CoreKind<BreakerRule> = CoreKind {
    name: "breaker",
    states_key: Some("breakers"),
    tables: |config| &config.breakers,
    read: |spillway| spillway.breaker_rules(),
    states: Some(states),
    validate: spillway::breaker::validate_breaker_rules,
    load: |spillway, rules| spillway.load_breaker_rules(rules),
    title: "Circuit breaker rules",
    template: || {
        json!({ "id": "", "resource": "",
            "strategy": { "type": "error_ratio", "threshold": 0.5 }, "retry_timeout": "5s" })
    },
    metrics: Some(metrics),
};

/// Each breaker's rule, resource and state (`closed`, `open`, `half_open`).
fn states(spillway: &spillway::Spillway) -> Vec<Value> {
    spillway
        .breaker_rules()
        .iter()
        .map(|rule| {
            let state = spillway.breaker_state(&rule.id).map(|s| s.as_str());
            json!({ "rule": rule.id, "resource": rule.resource, "state": state })
        })
        .collect()
}

/// The breakers' metrics: each rule's state.
pub(super) fn metrics(
    encoder: &mut DescriptorEncoder<'_>,
    spillway: &spillway::Spillway,
) -> Result<(), fmt::Error> {
    let breakers: Vec<_> = spillway
        .breaker_rules()
        .into_iter()
        .map(|rule| {
            let value = match spillway.breaker_state(&rule.id) {
                Some(BreakerState::Closed) | None => 0.0,
                Some(BreakerState::Open) => 1.0,
                Some(BreakerState::HalfOpen) => 2.0,
            };
            (rule_labels(&rule.id, &rule.resource), value)
        })
        .collect();
    gauges(
        encoder,
        "spillway_breaker_state",
        "Circuit breaker state: 0 closed, 1 open, 2 half-open",
        breakers,
    )
}
