//! A loaded set of flow rules.

use super::compiled::{CompiledRule, Controller, ResourceRules};
use super::{validate_flow_rules, FlowRule, FlowRuleError};
use std::collections::HashMap;
use std::sync::Arc;

/// Most flow rules one resource may have.
pub const MAX_RULES_PER_RESOURCE: usize = 64;

/// Most queueing (throttle, warm-up + throttle) rules one resource may have: an entry carries
/// its queue slots inline, so that it never allocates.
pub const MAX_QUEUEING_RULES_PER_RESOURCE: usize = crate::entry::MAX_QUEUED;

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
        mut related: impl FnMut(&str) -> Option<std::sync::Weak<crate::resource::ResourceInner>>,
    ) -> Result<Self, FlowRuleError> {
        validate_flow_rules(&rules)?;
        let mut kept: HashMap<&str, &CompiledRule> = HashMap::new();
        for compiled in previous.by_resource.values().flat_map(|r| &r.rules) {
            kept.insert(&compiled.rule.id, compiled);
        }
        let mut grouped: HashMap<String, Vec<CompiledRule>> = HashMap::new();
        for rule in &rules {
            let (id, controller) = match kept.get(rule.id.as_str()) {
                Some(old) if old.rule == *rule => (old.id, old.controller.clone()),
                _ => (
                    crate::intern::intern(&rule.id),
                    Arc::new(Controller::new(rule)),
                ),
            };
            let related = match &rule.strategy {
                super::Strategy::Relate { ref_resource } => related(ref_resource),
                _ => None,
            };
            // validate_flow_rules capped the rules per resource.
            let group = grouped.entry(rule.resource.clone()).or_default();
            group.push(CompiledRule {
                rule: rule.clone(),
                id,
                controller,
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
