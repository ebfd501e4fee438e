//! Cluster rules (`[[cluster_rule]]`): limits shared by a fleet on the `[cluster]` Redis.

use super::{given, rules_of, toml_tables, Change, Fault, Problem, RuleKind};
use crate::config::{Check, ClusterConfig, ClusterRuleConfig, Config};
use crate::metrics::{counters, gauges, rule_labels};
use crate::metrics::{KindMetrics, Sources};
use crate::proxy::Proxy;
use prometheus_client::encoding::DescriptorEncoder;
use serde_json::{json, Value};
use std::fmt;

/// Cluster rules, in the file's form.
pub(super) struct Cluster;

impl KindMetrics for Cluster {
    fn label(&self) -> &'static str {
        RuleKind::label(self)
    }

    fn loaded(&self, from: Sources<'_>) -> usize {
        from.cluster.states().len()
    }

    fn encode(&self, encoder: &mut DescriptorEncoder<'_>, from: Sources<'_>) -> std::fmt::Result {
        metrics(encoder, from.cluster)
    }
}

impl RuleKind for Cluster {
    fn name(&self) -> &'static str {
        "cluster_rule"
    }

    fn label(&self) -> &'static str {
        "cluster"
    }

    fn metrics(&self) -> &dyn KindMetrics {
        self
    }

    fn title(&self) -> &'static str {
        "Cluster rules (shared on Redis)"
    }

    fn template(&self) -> Value {
        json!({ "id": "", "resource": "", "kind": "qps", "limit": 100 })
    }

    /// Each rule's own fields, then `[cluster]`, which the rules need for their Redis.
    fn check(&self, config: &Config, check: &Check<'_>) {
        check.rules(
            &config.cluster_rules,
            self.name(),
            crate::cluster::validate_rules,
        );
        match &config.cluster {
            Some(cluster) => {
                if let Err((key, problem)) = crate::cluster::validate_section(cluster.get_ref()) {
                    check.problem(cluster.span(), "cluster".into(), key, problem);
                }
            }
            None => {
                if let Some(rule) = config.cluster_rules.first() {
                    check.problem(
                        rule.span(),
                        format!("{}[0]", self.name()),
                        "",
                        "cluster rules need a [cluster] section with the `redis` they share",
                    );
                }
            }
        }
    }

    fn read(&self, proxy: &Proxy) -> Value {
        json!(proxy.cluster_limits().configured().1)
    }

    /// Each cluster rule, in file order: its kind, how it is checked (`leased` or `strict`),
    /// its state (`starting` before Redis first answers, `global` while it admits against the
    /// shared limit, `fallback` while Redis is out of reach), whether it is just back on Redis
    /// and keeps to its share until the others are back too (`returning`), the instances it is
    /// shared among (`Leased::live_processes`), why it is in its fallback (`error`: Redis's last error, else null) and the
    /// calls to Redis that failed since its limit was made (`failures`).
    fn states(&self, proxy: &Proxy) -> Option<Value> {
        let states: Vec<Value> = proxy
            .cluster_limits()
            .states()
            .into_iter()
            .map(|rule| {
                let state = match (rule.starting, rule.fallback) {
                    (_, true) => "fallback",
                    (true, false) => "starting",
                    (false, false) => "global",
                };
                json!({
                    "rule": rule.id,
                    "resource": rule.resource,
                    "kind": rule.kind,
                    "check": rule.mode,
                    "state": state,
                    "returning": rule.returning,
                    "instances": rule.instances,
                    "error": rule.error,
                    "failures": rule.failures,
                })
            })
            .collect();
        Some(Value::from(states))
    }

    /// The file's rules under the file's `[cluster]` section.
    fn configured(&self, config: &Config) -> Box<dyn Change> {
        Box::new(ClusterChange {
            section: Some(config.cluster.as_ref().map(|c| c.get_ref().clone())),
            rules: given(&config.cluster_rules),
        })
    }

    fn parse(&self, rules: Value) -> Result<Box<dyn Change>, Problem> {
        let rules: Vec<ClusterRuleConfig> = rules_of(rules)?;
        crate::cluster::validate_rules(&rules).map_err(|fault| fault_of(&rules, fault))?;
        Ok(Box::new(ClusterChange {
            section: None,
            rules,
        }))
    }
}

/// Cluster rule `index` of `rules` at fault.
fn fault_of(rules: &[ClusterRuleConfig], fault: (usize, &'static str, String)) -> Fault {
    Fault::at(rules.iter().map(|rule| rule.id.as_str()), fault)
}

/// Cluster rules given.
struct ClusterChange {
    /// The `[cluster]` section they run under, when given with them (by the file); `None`:
    /// the one in force.
    section: Option<Option<ClusterConfig>>,
    rules: Vec<ClusterRuleConfig>,
}

impl Change for ClusterChange {
    /// Cluster rules share the `[cluster]` section's Redis: there must be one.
    fn stage(&mut self, proxy: &Proxy) -> Result<(), Fault> {
        let section = match &self.section {
            Some(section) => section.is_some(),
            None => proxy.cluster_limits().configured().0.is_some(),
        };
        if !self.rules.is_empty() && !section {
            return Err(fault_of(
                &self.rules,
                (
                    0,
                    "",
                    "cluster rules need a [cluster] section with the `redis` they share, and \
                     the running configuration has none (add it to the file and reload)"
                        .to_owned(),
                ),
            ));
        }
        Ok(())
    }

    fn toml(&self, name: &str) -> Result<String, String> {
        toml_tables(name, &self.rules)
    }

    /// A rule that stays the same keeps its lease and its task; the tasks of rules gone stop.
    fn apply(self: Box<Self>, proxy: &Proxy) -> Result<(), Fault> {
        let limits = proxy.cluster_limits();
        let section = match self.section {
            Some(section) => section,
            None => limits.configured().0,
        };
        let first = self
            .rules
            .first()
            .map_or(String::new(), |rule| rule.id.clone());
        limits
            .replace(proxy.spillway(), section, self.rules)
            .map_err(|problem| Fault {
                index: 0,
                id: first,
                field: String::new(),
                problem,
            })
    }
}

/// The cluster rules' metrics, by rule: starting, in the fallback, and the instances sharing it.
pub(super) fn metrics(
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
        "spillway_cluster_returning",
        "Whether a cluster rule is just back on Redis after a failure and keeps to its fallback's share besides Redis's answer until the other instances are back too (1), or not (0), by rule",
        cluster.iter().map(|rule| {
            let returning = if rule.returning { 1.0 } else { 0.0 };
            (rule_labels(&rule.id, &rule.resource), returning)
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
    counters(
        encoder,
        "spillway_cluster_failures",
        "Calls to Redis (and connections) that failed, by cluster rule, since its limit was made (a reload that keeps the rule keeps the count)",
        cluster
            .iter()
            .map(|rule| (rule_labels(&rule.id, &rule.resource), rule.failures)),
    )?;
    gauges(
        encoder,
        "spillway_cluster_instances",
        "The instances a cluster rule is shared among: as its last heartbeat's answer counted them, or, after a return from a failure until Redis has answered for a heartbeat TTL, as many as its fallback counted if more, by rule",
        cluster.iter().filter_map(|rule| {
            let instances = rule.instances?;
            Some((rule_labels(&rule.id, &rule.resource), instances as f64))
        }),
    )?;
    Ok(())
}
