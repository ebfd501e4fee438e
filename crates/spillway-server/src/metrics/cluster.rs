//! The cluster rules' metrics, by rule: starting, in the fallback, and the instances sharing it.

use super::{gauges, rule_labels};
use prometheus_client::encoding::DescriptorEncoder;
use std::fmt;

/// Writes every cluster rule's metrics.
pub(crate) fn encode(
    encoder: &mut DescriptorEncoder<'_>,
    cluster: &crate::cluster::ClusterLimits,
) -> Result<(), fmt::Error> {
    let cluster = cluster.states();
    gauges(
        encoder,
        "spillway_cluster_fallback",
        "Whether a cluster rule admits by its fallback now (1: Redis out of reach) or by the shared limit (0), by rule",
        cluster.iter().map(|rule| {
            let fallback = if rule.fallback { 1.0 } else { 0.0 };
            (rule_labels(&rule.id, &rule.resource), fallback)
        }),
    )?;
    gauges(
        encoder,
        "spillway_cluster_starting",
        "Whether a cluster rule has had no answer from Redis yet (1: starting) or has (0), by rule",
        cluster.iter().map(|rule| {
            let starting = if rule.starting { 1.0 } else { 0.0 };
            (rule_labels(&rule.id, &rule.resource), starting)
        }),
    )?;
    gauges(
        encoder,
        "spillway_cluster_instances",
        "The instances sharing a cluster rule, as its last heartbeat's answer counted them, by rule",
        cluster.iter().filter_map(|rule| {
            let instances = rule.instances?;
            Some((rule_labels(&rule.id, &rule.resource), instances as f64))
        }),
    )?;
    Ok(())
}
