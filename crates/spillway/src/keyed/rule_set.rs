//! The per-key rules as installed: grouped per resource, each with its limiter, and what an
//! entry took from them.

use super::{validate_keyed_rules, KeyedLimiter, KeyedRule, KeyedRuleError, Keys};
use crate::flow::{Decision, Grade};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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
    until_exit: u8,
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

/// What an entry's per-key rules took: the keys, the rules' bits (by position on the
/// resource), the count, which of them hold a call in flight until the entry ends (and the
/// digest of their key), and the longest wait a pacing rule queued the entry for. Given back
/// through the resource's rules as installed then (as cluster passes are).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyedTaken {
    pub(crate) keys: Keys,
    pub(crate) digest: u32,
    pub(crate) rules: u8,
    pub(crate) count: u32,
    pub(crate) until_exit: u8,
    pub(crate) wait: Duration,
}

impl ResourceKeyed {
    /// Checks `count` for `key` against every rule in order; at the first refusal, gives back
    /// what the earlier ones took and returns the refusing rule.
    pub(crate) fn take(
        &self,
        keys: Keys,
        count: u32,
        now: u64,
        taken: &mut KeyedTaken,
    ) -> Result<(), &InstalledKeyed> {
        taken.keys = keys;
        taken.count = count;
        for (bit, installed) in self.rules.iter().enumerate() {
            // A rule whose key the entry does not have does not apply.
            let Some(key) = keys.get(installed.rule.param) else {
                continue;
            };
            if installed.rule.grade == Grade::Concurrency {
                // Validation keeps a resource's concurrency rules on one position.
                taken.digest = super::digest(key);
            }
            match installed.limiter.check(key, count, now) {
                Decision::Block => {
                    self.give_back(*taken);
                    *taken = KeyedTaken::default();
                    return Err(installed);
                }
                decision => {
                    if let Decision::Wait(wait) = decision {
                        taken.wait = taken.wait.max(wait);
                    }
                    taken.rules |= 1 << bit;
                    taken.until_exit = taken.rules & self.until_exit;
                }
            }
        }
        Ok(())
    }

    /// Gives back what `taken` says: a reject rule's tokens, a concurrency rule's call in
    /// flight. (A pacing rule's place in a key's schedule is not given back: the key waits a
    /// little longer next time, never less.)
    pub(crate) fn give_back(&self, taken: KeyedTaken) {
        for (bit, installed) in self.rules.iter().enumerate() {
            if taken.rules & (1 << bit) != 0 {
                if let Some(key) = taken.keys.get(installed.rule.param) {
                    installed.limiter.give_back(key, taken.count);
                }
            }
        }
    }
}

impl ResourceKeyed {
    /// An entry holding calls in flight under the concurrency rules `rules` (bits) for the key
    /// of `digest` ended.
    pub(crate) fn exit(&self, rules: u8, digest: u32) {
        for (bit, installed) in self.rules.iter().enumerate() {
            if rules & (1 << bit) != 0 {
                installed.limiter.exit_digest(digest);
            }
        }
    }
}

/// The block of a refusal by `installed` of the key's `count`.
pub(crate) fn blocked(resource_number: u32, installed: &InstalledKeyed) -> crate::BlockError {
    crate::BlockError::new(
        crate::BlockKind::Keyed,
        resource_number,
        // The key's count is not read again for the error: observed is the limit.
        installed.rule.count.trunc(),
        installed.rule.count.trunc(),
    )
    .with_rule(installed.id_number)
    .with_retry_after(installed.rule.duration)
}
