//! The instance's per-key rules: loading them, and reading them with what each counted.

use super::Spillway;
use crate::keyed::{KeyedRuleSet, ResourceKeyed};

impl Spillway {
    /// Loads per-key rules, replacing all of them atomically; a bad set changes nothing. A rule
    /// loaded again unchanged (same id, same settings) keeps every key's state. Entries pass
    /// their key with [`EntryBuilder::key`](crate::EntryBuilder::key); an entry without a key
    /// is not limited by per-key rules (as Sentinel passes a call without the parameter).
    ///
    /// # Errors
    ///
    /// A [`KeyedRuleError`](crate::keyed::KeyedRuleError) naming the first rule and field at
    /// fault.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::keyed::KeyedRule;
    /// use spillway::{BlockKind, ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// spillway.load_keyed_rules(vec![KeyedRule::qps("per-user", "search", 2.0)])?;
    /// for _ in 0..2 {
    ///     spillway.entry("search").key("alice").enter()?;
    /// }
    /// let err = spillway.entry("search").key("alice").enter().unwrap_err();
    /// assert_eq!((err.kind(), err.rule_id()), (BlockKind::Keyed, Some("per-user")));
    /// assert!(spillway.entry("search").key("bob").enter().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load_keyed_rules(
        &self,
        rules: Vec<crate::keyed::KeyedRule>,
    ) -> Result<(), crate::keyed::KeyedRuleError> {
        self.replace_rules::<ResourceKeyed, _>(|previous| KeyedRuleSet::build(rules, previous))
    }

    /// The per-key rules in force, exactly as loaded.
    pub fn keyed_rules(&self) -> Vec<crate::keyed::KeyedRule> {
        self.inner.core.sets.get::<ResourceKeyed>().loaded.clone()
    }

    /// What the per-key rule `id` counted (checks decided exactly and by its sketch, keys that
    /// lost their place) and the bytes it holds, if one is loaded.
    pub fn keyed_stats(&self, id: &str) -> Option<(crate::keyed::KeyedStats, usize)> {
        let set = self.inner.core.sets.get::<ResourceKeyed>();
        set.find(id)
            .map(|installed| (installed.limiter.stats(), installed.limiter.heap_bytes()))
    }
}
