//! The per-key rules as installed: grouped per resource, each with its limiter.

use super::{validate_keyed_rules, KeyedLimiter, KeyedRule, KeyedRuleError};
use crate::flow::Grade;
use std::collections::HashMap;
use std::sync::Arc;

/// Most per-key rules on one resource (an entry notes which it passed in a byte).
pub const MAX_KEYED_RULES_PER_RESOURCE: usize = 8;

/// Every per-key rule, as loaded and per resource.
#[derive(Debug, Default)]
pub(crate) struct KeyedRuleSet {
    pub(crate) loaded: Vec<KeyedRule>,
    pub(crate) by_resource: HashMap<String, Arc<ResourceKeyed>>,
}

/// One resource's per-key rules, in load order.
#[derive(Debug, Default)]
pub(crate) struct ResourceKeyed {
    pub(crate) rules: Vec<InstalledKeyed>,
    /// The bits of the concurrency rules, whose passes are held until the entry ends.
    pub(super) until_exit: u8,
}

/// A rule and its state.
#[derive(Debug)]
pub(crate) struct InstalledKeyed {
    pub(crate) rule: KeyedRule,
    pub(crate) id_number: u32,
    pub(crate) limiter: Arc<KeyedLimiter>,
}

impl KeyedRuleSet {
    /// Validates `rules` and groups them per resource; a rule the same as one of `previous`
    /// (same id, same settings) keeps its limiter, so a reload forgets no key's state.
    pub(crate) fn build(rules: Vec<KeyedRule>, previous: &Self) -> Result<Self, KeyedRuleError> {
        validate_keyed_rules(&rules)?;
        let kept: HashMap<&str, &InstalledKeyed> = previous
            .by_resource
            .values()
            .flat_map(|resource| &resource.rules)
            .map(|installed| (installed.rule.id.as_str(), installed))
            .collect();
        let mut grouped: HashMap<String, ResourceKeyed> = HashMap::new();
        for (index, rule) in rules.iter().enumerate() {
            let resource = grouped.entry(rule.resource.clone()).or_default();
            if resource.rules.len() == MAX_KEYED_RULES_PER_RESOURCE {
                return Err(KeyedRuleError::new(
                    "keyed",
                    index,
                    &rule.id,
                    "resource",
                    format!("has more than {MAX_KEYED_RULES_PER_RESOURCE} keyed rules"),
                ));
            }
            if rule.grade == Grade::Concurrency {
                // An entry keeps one key's digest for its concurrency rules until it ends.
                let other = resource
                    .rules
                    .iter()
                    .find(|earlier| earlier.rule.grade == Grade::Concurrency);
                if let Some(earlier) = other.filter(|earlier| earlier.rule.param != rule.param) {
                    return Err(KeyedRuleError::new(
                        "keyed",
                        index,
                        &rule.id,
                        "param",
                        format!(
                            "must be {} like the resource's other concurrency rule `{}`",
                            earlier.rule.param, earlier.rule.id
                        ),
                    ));
                }
                resource.until_exit |= 1 << resource.rules.len();
            }
            let limiter = match kept.get(rule.id.as_str()) {
                Some(old) if old.rule == *rule => Arc::clone(&old.limiter),
                _ => Arc::new(KeyedLimiter::new(rule)),
            };
            resource.rules.push(InstalledKeyed {
                rule: rule.clone(),
                id_number: crate::intern::intern_numbered(&rule.id).number,
                limiter,
            });
        }
        Ok(Self {
            loaded: rules,
            by_resource: grouped
                .into_iter()
                .map(|(resource, rules)| (resource, Arc::new(rules)))
                .collect(),
        })
    }

    /// The installed rule of id `id`.
    pub(crate) fn find(&self, id: &str) -> Option<&InstalledKeyed> {
        self.by_resource
            .values()
            .flat_map(|resource| &resource.rules)
            .find(|installed| installed.rule.id == id)
    }
}
