//! What is read from spillway at each scrape: each resource's in-flight count and rates, and each
//! kind of rule's state (breakers, adaptive limits, per-key rules, cluster rules, shadow rules).

use super::{adaptive, cluster, counters, gauges, keyed, rule_labels};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use spillway::breaker::BreakerState;
use std::fmt;

/// Gauges read from spillway at each scrape: concurrency and QPS per resource, breaker states,
/// rules loaded.
#[derive(Debug)]
pub(super) struct Live {
    pub(super) spillway: spillway::Spillway,
    /// The cluster rules, leased and strict.
    pub(super) cluster: std::sync::Arc<crate::cluster::ClusterLimits>,
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let snapshot = self.spillway.snapshot();
        gauges(
            &mut encoder,
            "spillway_concurrency",
            "Requests in flight, by resource",
            snapshot.resources.iter().map(|r| {
                (
                    vec![("resource", r.name.to_string())],
                    r.stats.concurrency as f64,
                )
            }),
        )?;
        gauges(
            &mut encoder,
            "spillway_pass_qps",
            "Admitted per second over the sliding second window, by resource",
            snapshot
                .resources
                .iter()
                .map(|r| (vec![("resource", r.name.to_string())], r.stats.pass_qps)),
        )?;
        gauges(
            &mut encoder,
            "spillway_block_qps",
            "Refused per second over the sliding second window, by resource",
            snapshot
                .resources
                .iter()
                .map(|r| (vec![("resource", r.name.to_string())], r.stats.block_qps)),
        )?;
        let breakers: Vec<_> = self
            .spillway
            .breaker_rules()
            .into_iter()
            .map(|rule| {
                let state = self.spillway.breaker_state(&rule.id);
                let value = match state {
                    Some(BreakerState::Closed) | None => 0.0,
                    Some(BreakerState::Open) => 1.0,
                    Some(BreakerState::HalfOpen) => 2.0,
                };
                (rule_labels(&rule.id, &rule.resource), value)
            })
            .collect();
        gauges(
            &mut encoder,
            "spillway_breaker_state",
            "Circuit breaker state: 0 closed, 1 open, 2 half-open",
            breakers,
        )?;
        adaptive::encode(&mut encoder, &self.spillway)?;
        keyed::encode(&mut encoder, &self.spillway)?;
        cluster::encode(&mut encoder, &self.cluster)?;
        let flow_rules = self.spillway.flow_rules();
        let shadow = flow_rules
            .iter()
            .filter(|rule| rule.shadow)
            .filter_map(|rule| {
                let stats = self.spillway.flow_rule_stats(&rule.id)?;
                Some((rule_labels(&rule.id, &rule.resource), stats.shadow_refusals))
            });
        counters(
            &mut encoder,
            "spillway_flow_rule_shadow_refusals",
            "Requests a flow rule in shadow mode would have refused (it admitted them), by rule",
            shadow,
        )?;
        let rules = [
            ("flow", flow_rules.len()),
            ("system", self.spillway.system_rules().len()),
            ("breaker", self.spillway.breaker_rules().len()),
            ("adaptive", self.spillway.adaptive_rules().len()),
            ("keyed", self.spillway.keyed_rules().len()),
            ("cluster", self.cluster.states().len()),
        ];
        gauges(
            &mut encoder,
            "spillway_rules",
            "Rules loaded, by kind",
            rules
                .into_iter()
                .map(|(kind, n)| (vec![("kind", kind.to_owned())], n as f64)),
        )?;
        Ok(())
    }
}
