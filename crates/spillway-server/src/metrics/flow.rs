//! The flow rules' metrics: what each rule in shadow mode would have refused.

use super::{counters, rule_labels};
use prometheus_client::encoding::DescriptorEncoder;
use std::fmt;

/// Writes every shadow flow rule's refusals not made.
pub(crate) fn encode(
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
