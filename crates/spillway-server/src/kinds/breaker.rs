//! Circuit breakers (`[[breaker]]`): Sentinel's degrade rules.

use super::core_kind::CoreKind;
use serde_json::{json, Value};
use spillway::breaker::BreakerRule;

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
    metrics: Some(crate::metrics::breaker::encode),
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
