//! A loaded set of flow rules.

use super::admission::RINGS;
use super::compiled::{CompiledRule, Controller, ResourceRules};
use super::{validate_flow_rules, FlowRule, FlowRuleError};
use std::collections::HashMap;
use std::sync::Arc;

/// The rules as loaded, and compiled per resource.
#[derive(Debug, Default)]
pub(crate) struct FlowRuleSet {
    pub(crate) loaded: Vec<FlowRule>,
    pub(crate) by_resource: HashMap<String, Arc<ResourceRules>>,
}

impl FlowRuleSet {
    /// Validates `rules` and compiles them, reusing the controller (and so the state) of every
    /// rule that `previous` holds unchanged. `related` resolves a `relate` rule's resource.
    pub(crate) fn build(
        rules: Vec<FlowRule>,
        previous: &FlowRuleSet,
        mut related: impl FnMut(&str) -> Option<std::sync::Weak<dyn super::RelatedNode>>,
    ) -> Result<Self, FlowRuleError> {
        validate_flow_rules(&rules)?;
        let mut kept: HashMap<&str, &CompiledRule> = HashMap::new();
        for compiled in previous.by_resource.values().flat_map(|r| &r.rules) {
            kept.insert(&compiled.rule.id, compiled);
        }
        let unchanged = |rule: &FlowRule| {
            kept.get(rule.id.as_str())
                .copied()
                .filter(|old| old.rule == *rule)
        };
        // A kept rule keeps its admission ring; new rules take the free ones, in order.
        let mut rings_used: HashMap<&str, u8> = HashMap::new();
        for old in rules.iter().filter_map(unchanged) {
            if let Some(ring) = old.controller.ring() {
                *rings_used.entry(old.rule.resource.as_str()).or_default() |= 1 << ring;
            }
        }
        let mut grouped: HashMap<String, Vec<CompiledRule>> = HashMap::new();
        for rule in &rules {
            let (id, id_number, controller) = match unchanged(rule) {
                Some(old) => (old.id, old.id_number, old.controller.clone()),
                None => {
                    let ring = if Controller::counts_on_ring(rule) {
                        let used = rings_used.entry(rule.resource.as_str()).or_default();
                        let free = (0..RINGS as u8).find(|ring| *used & 1 << ring == 0);
                        if let Some(ring) = free {
                            *used |= 1 << ring;
                        }
                        free
                    } else {
                        None
                    };
                    let id = crate::intern::intern_numbered(&rule.id);
                    (id.name, id.number, Arc::new(Controller::new(rule, ring)))
                }
            };
            let counters = kept
                .get(rule.id.as_str())
                .map_or_else(Default::default, |old| Arc::clone(&old.counters));
            let related = match &rule.strategy {
                super::Strategy::Relate { ref_resource } => related(ref_resource),
                _ => None,
            };
            // validate_flow_rules capped the rules per resource.
            let group = grouped.entry(rule.resource.clone()).or_default();
            group.push(CompiledRule {
                rule: rule.clone(),
                id,
                id_number,
                controller,
                counters,
                related,
            });
        }
        Ok(Self {
            loaded: rules,
            by_resource: grouped
                .into_iter()
                .map(|(resource, rules)| (resource, Arc::new(ResourceRules::new(rules))))
                .collect(),
        })
    }
}
