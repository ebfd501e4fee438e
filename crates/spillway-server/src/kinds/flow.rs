//! Flow rules (`[[flow]]`): Sentinel's QPS and concurrency rules, with their controllers.

use super::core_kind::CoreKind;
use serde_json::{json, Value};
use spillway::flow::FlowRule;

/// Flow rules.
pub(super) const FLOW: CoreKind<FlowRule> = CoreKind {
    name: "flow",
    states_key: None,
    tables: |config| &config.flow,
    read: |spillway| spillway.flow_rules(),
    states: Some(states),
    validate: spillway::flow::validate_flow_rules,
    load: |spillway, rules| spillway.load_flow_rules(rules),
    metrics: Some(crate::metrics::flow::encode),
};

/// Each flow rule in load order, with what its controller holds now: a warm-up's allowed QPS,
/// a pacer's queue wait (milliseconds), a shadow rule's refusals not made.
fn states(spillway: &spillway::Spillway) -> Vec<Value> {
    spillway
        .flow_rules()
        .iter()
        .map(|rule| {
            let state = spillway.flow_rule_state(&rule.id).unwrap_or_default();
            json!({
                "rule": rule.id,
                "resource": rule.resource,
                "count": rule.count,
                "shadow": rule.shadow,
                "allowed_qps": state.allowed_qps,
                "queue_wait_ms": state.queue_wait.map(|wait| wait.as_secs_f64() * 1e3),
                "shadow_refusals": state.shadow_refusals,
            })
        })
        .collect()
}
