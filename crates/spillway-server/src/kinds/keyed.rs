//! Per-key rules (`[[keyed]]`): limits per client key, with where each request's key is read.

use super::{rules_of, toml_tables, Change, CoreRules, Fault, Problem, RuleKind};
use crate::config::{Check, Config, KeyedConfig};
use crate::metrics::{counters, gauges, rule_labels};
use crate::metrics::{KindMetrics, Sources};
use crate::proxy::{Proxy, StagedKeyed};
use prometheus_client::encoding::DescriptorEncoder;
use serde_json::{json, Value};
use spillway::keyed::KeyedStats;
use std::fmt;

/// Per-key rules, in the file's form (with their key sources).
pub(super) struct Keyed;

impl KindMetrics for Keyed {
    fn label(&self) -> &'static str {
        RuleKind::label(self)
    }

    fn loaded(&self, from: Sources<'_>) -> usize {
        from.spillway.keyed_rules().len()
    }

    fn encode(&self, encoder: &mut DescriptorEncoder<'_>, from: Sources<'_>) -> std::fmt::Result {
        metrics(encoder, from.spillway)
    }
}

impl RuleKind for Keyed {
    fn name(&self) -> &'static str {
        "keyed"
    }

    fn metrics(&self) -> &dyn KindMetrics {
        self
    }

    fn title(&self) -> &'static str {
        "Per-key rules"
    }

    fn template(&self) -> Value {
        json!({ "id": "", "resource": "", "key": "peer_ip", "count": 10 })
    }

    /// Each rule's own fields and key source (every rule at fault), then keys read from a path
    /// segment that a route producing the resource lacks.
    fn check(&self, config: &Config, check: &Check<'_>) {
        check.rules(&config.keyed, self.name(), |rules| {
            crate::keyed::plan(rules).map(|_| ())
        });
        let default = config
            .default
            .as_ref()
            .map_or("unmatched", |default| default.get_ref().resource.as_str());
        for (index, rule) in config.keyed.iter().enumerate() {
            let routes = config
                .routes
                .iter()
                .map(|route| {
                    let route = route.get_ref();
                    (route.resource.as_str(), Some(route.path.as_str()))
                })
                .chain(std::iter::once((default, None)));
            if let Some(problem) = crate::keyed::path_problem(rule.get_ref(), routes) {
                check.problem(rule.span(), format!("keyed[{index}]"), "key", problem);
            }
            let prefixes = config.listener.peer_ip_prefixes();
            let exception = prefixes
                .ok()
                .and_then(|prefixes| crate::keyed::exception_problem(rule.get_ref(), prefixes));
            if let Some((at, problem)) = exception {
                let path = format!("keyed[{index}].exceptions[{at}]");
                check.problem(rule.span(), path, "key", problem);
            }
        }
    }

    fn read(&self, proxy: &Proxy) -> Value {
        json!(proxy.keyed_rules())
    }

    /// Each per-key rule, in load order: what it checked and refused, the checks its sketch
    /// decided, the keys that lost their place, the keys it holds exactly now, and its memory.
    fn states(&self, proxy: &Proxy) -> Option<Value> {
        let spillway = proxy.spillway();
        let states: Vec<Value> = spillway
            .keyed_rules()
            .iter()
            .filter_map(|rule| {
                let (stats, bytes) = spillway.keyed_stats(&rule.id)?;
                Some(json!({
                    "rule": rule.id,
                    "resource": rule.resource,
                    "checks": stats.checks,
                    "refused": stats.refused,
                    "sketched": stats.sketched,
                    "evictions": stats.evictions,
                    "exact_keys": stats.exact_keys,
                    "capacity": rule.capacity,
                    "memory_bytes": bytes,
                }))
            })
            .collect();
        Some(Value::from(states))
    }

    /// The core's rules; the routes' key readers come with the file's routing table.
    fn configured(&self, config: &Config) -> Box<dyn Change> {
        Box::new(CoreRules {
            rules: crate::keyed::rules(config),
            load: |spillway, rules| spillway.load_keyed_rules(rules),
        })
    }

    fn parse(&self, rules: Value) -> Result<Box<dyn Change>, Problem> {
        let rules: Vec<KeyedConfig> = rules_of(rules)?;
        // Their own fields and key sources; against the routes when staged.
        crate::keyed::plan(&rules).map_err(|fault| fault_of(&rules, fault))?;
        Ok(Box::new(KeyedChange {
            rules,
            staged: None,
        }))
    }
}

/// Per-key rule `index` of `rules` at fault, as the proxy's checks name it.
fn fault_of(rules: &[KeyedConfig], fault: (usize, &'static str, String)) -> Fault {
    Fault::at(rules.iter().map(|rule| rule.id.as_str()), fault)
}

/// Per-key rules given, and, once staged, checked against the running routes.
struct KeyedChange {
    rules: Vec<KeyedConfig>,
    staged: Option<StagedKeyed>,
}

impl Change for KeyedChange {
    /// Per-key rules read keys on the running routes: checked against them.
    fn stage(&mut self, proxy: &Proxy) -> Result<(), Fault> {
        let staged = proxy
            .stage_keyed(self.rules.clone())
            .map_err(|fault| fault_of(&self.rules, fault))?;
        self.staged = Some(staged);
        Ok(())
    }

    fn toml(&self, name: &str) -> Result<String, String> {
        toml_tables(name, &self.rules)
    }

    /// The core's rules (a rule that stays the same keeps every key's state) and the routes'
    /// key readers, together.
    fn apply(mut self: Box<Self>, proxy: &Proxy) -> Result<(), Fault> {
        let staged = match self.staged.take() {
            Some(staged) => staged,
            None => proxy
                .stage_keyed(self.rules.clone())
                .map_err(|fault| fault_of(&self.rules, fault))?,
        };
        proxy.install_keyed(staged).map_err(Fault::from)
    }
}

/// The per-key rules' metrics: by rule, what each checked and refused, how many checks its sketch
/// decided, the keys that lost their place, the keys it holds exactly and its memory.
pub(super) fn metrics(
    encoder: &mut DescriptorEncoder<'_>,
    spillway: &spillway::Spillway,
) -> Result<(), fmt::Error> {
    let rules: Vec<(String, String, KeyedStats, usize)> = spillway
        .keyed_rules()
        .into_iter()
        .filter_map(|rule| {
            let (stats, bytes) = spillway.keyed_stats(&rule.id)?;
            Some((rule.id, rule.resource, stats, bytes))
        })
        .collect();
    type Read = fn(&KeyedStats) -> u64;
    let totals: [(&str, &str, Read); 4] = [
        (
            "spillway_keyed_checks",
            "Requests a per-key rule checked (each with its key), by rule",
            |stats| stats.checks,
        ),
        (
            "spillway_keyed_refusals",
            "Requests a per-key rule refused, by rule",
            |stats| stats.refused,
        ),
        (
            "spillway_keyed_sketched",
            "Checks a per-key rule decided by its sketch (keys without a place of their own), by rule",
            |stats| stats.sketched,
        ),
        (
            "spillway_keyed_evictions",
            "Keys that lost their place in a per-key rule's table to a busier key, by rule",
            |stats| stats.evictions,
        ),
    ];
    for (name, help, read) in totals {
        let rows = rules
            .iter()
            .map(|(id, resource, stats, _)| (rule_labels(id, resource), read(stats)));
        counters(encoder, name, help, rows)?;
    }
    gauges(
        encoder,
        "spillway_keyed_exact_keys",
        "Keys a per-key rule holds exactly now (at most its capacity), by rule",
        rules
            .iter()
            .map(|(id, resource, stats, _)| (rule_labels(id, resource), stats.exact_keys as f64)),
    )?;
    gauges(
        encoder,
        "spillway_keyed_memory_bytes",
        "Bytes a per-key rule holds (its table, sketches and counters: fixed by its capacity), by rule",
        rules
            .iter()
            .map(|(id, resource, _, bytes)| (rule_labels(id, resource), *bytes as f64)),
    )?;
    gauges(
        encoder,
        "spillway_keyed_sketch_bytes",
        "Bytes of a per-key rule's sketches (part of its memory), by rule",
        rules
            .iter()
            .map(|(id, resource, stats, _)| (rule_labels(id, resource), stats.sketch_bytes as f64)),
    )
}
