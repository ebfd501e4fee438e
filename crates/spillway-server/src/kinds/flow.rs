//! Flow rules (`[[flow]]`): Sentinel's QPS and concurrency rules, with their controllers.

use super::core_kind::CoreKind;
use crate::metrics::{counters, rule_labels};
use prometheus_client::encoding::DescriptorEncoder;
use serde_json::{json, Value};
use spillway::flow::FlowRule;
use std::fmt;

/// Flow rules.
pub(super) const FLOW: CoreKind<FlowRule> = CoreKind {
    name: "flow",
    states_key: None,
    tables: |config| &config.flow,
    read: |spillway| spillway.flow_rules(),
    states: Some(states),
    validate: spillway::flow::validate_flow_rules,
    load: |spillway, rules| spillway.load_flow_rules(rules),
    title: "Flow rules",
    template: || json!({ "id": "", "resource": "", "count": 100 }),
    metrics: Some(metrics),
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

/// The flow rules' metrics: what each rule in shadow mode would have refused.
pub(super) fn metrics(
    encoder: &mut DescriptorEncoder<'_>,
    spillway: &spillway::Spillway,
) -> Result<(), fmt::Error> {
    let flow_rules = spillway.flow_rules();
    let shadow = flow_rules
        .iter()
        .filter(|rule| rule.shadow)
        .filter_map(|rule| {
            let stats = spillway.flow_rule_stats(&rule.id)?;
            Some((rule_labels(&rule.id, &rule.resource), stats.shadow_refusals))
        });
    counters(
        encoder,
        "spillway_flow_rule_shadow_refusals",
        "Requests a flow rule in shadow mode would have refused (it admitted them), by rule",
        shadow,
    )
}
