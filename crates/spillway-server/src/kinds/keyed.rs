//! Per-key rules (`[[keyed]]`): limits per client key, with where each request's key is read.

use super::{rules_of, toml_tables, Change, CoreRules, Fault, Problem, RuleKind};
use crate::config::{Config, KeyedConfig};
use crate::metrics::{KindMetrics, Sources};
use crate::proxy::{Proxy, StagedKeyed};
use prometheus_client::encoding::DescriptorEncoder;
use serde_json::{json, Value};

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
        crate::metrics::keyed::encode(encoder, from.spillway)
    }
}

impl RuleKind for Keyed {
    fn name(&self) -> &'static str {
        "keyed"
    }

    fn metrics(&self) -> &dyn KindMetrics {
        self
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
