//! The adaptive rules as loaded: one limiter per resource with a rule, and one for all inbound
//! traffic, each kept across reloads while its rule stays the same.

use super::rule::{validate_adaptive_rules, AdaptiveRule, AdaptiveRuleError};
use super::AdaptiveLimiter;
use crate::clock::AnyClock;
use crate::rule_error::RuleError;
use std::collections::HashMap;
use std::sync::Arc;

/// One rule's limiter, as the entry path uses it.
#[derive(Debug)]
pub(crate) struct InstalledAdaptive {
    pub(crate) rule: AdaptiveRule,
    /// The rule id's interned number, for blocks.
    pub(crate) id_number: u32,
    pub(crate) limiter: AdaptiveLimiter,
}

/// The rules as loaded.
#[derive(Debug, Default)]
pub(crate) struct AdaptiveRuleSet {
    pub(crate) loaded: Vec<AdaptiveRule>,
    pub(crate) by_resource: HashMap<String, Arc<InstalledAdaptive>>,
    pub(crate) inbound: Option<Arc<InstalledAdaptive>>,
}

impl AdaptiveRuleSet {
    /// Validates `rules` and builds their limiters on `clock`, keeping the limiter (and so the
    /// limit and the calls in flight) of every rule `previous` holds unchanged.
    pub(crate) fn build(
        rules: Vec<AdaptiveRule>,
        previous: &AdaptiveRuleSet,
        clock: &AnyClock,
    ) -> Result<Self, AdaptiveRuleError> {
        validate_adaptive_rules(&rules)?;
        let kept: Vec<&Arc<InstalledAdaptive>> = previous
            .by_resource
            .values()
            .chain(previous.inbound.iter())
            .collect();
        let mut set = AdaptiveRuleSet {
            loaded: rules.clone(),
            ..AdaptiveRuleSet::default()
        };
        for (index, rule) in rules.into_iter().enumerate() {
            let installed = match kept.iter().find(|old| old.rule == rule) {
                Some(old) => Arc::clone(old),
                None => {
                    let algorithm = rule.algorithm.build(rule.seed).map_err(|err| {
                        RuleError::new("adaptive", index, &rule.id, err.field(), err.to_string())
                    })?;
                    Arc::new(InstalledAdaptive {
                        id_number: crate::intern::intern_numbered(&rule.id).number,
                        limiter: AdaptiveLimiter::with_any_clock(algorithm, clock.clone())
                            .with_queue(rule.queue),
                        rule,
                    })
                }
            };
            match installed.rule.resource.clone() {
                Some(resource) => {
                    set.by_resource.insert(resource, installed);
                }
                None => set.inbound = Some(installed),
            }
        }
        Ok(set)
    }

    /// The installed rule of id `id`.
    pub(crate) fn find(&self, id: &str) -> Option<&Arc<InstalledAdaptive>> {
        self.by_resource
            .values()
            .chain(self.inbound.iter())
            .find(|installed| installed.rule.id == id)
    }
}
