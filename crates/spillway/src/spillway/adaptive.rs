//! The instance's adaptive rules: loading them, and reading them with each limiter's state.

use super::Spillway;

impl Spillway {
    /// Loads adaptive concurrency rules, replacing all of them atomically: a rule that stays the
    /// same keeps its limiter (its limit, its estimates, the calls it holds); a bad set changes
    /// nothing. See [`AdaptiveRule`](crate::adaptive::AdaptiveRule).
    ///
    /// # Errors
    ///
    /// An [`AdaptiveRuleError`](crate::adaptive::AdaptiveRuleError) naming the first rule and
    /// field at fault.
    pub fn load_adaptive_rules(
        &self,
        rules: Vec<crate::adaptive::AdaptiveRule>,
    ) -> Result<(), crate::adaptive::AdaptiveRuleError> {
        use crate::adaptive::{AdaptiveRuleSet, InstalledAdaptive};
        let core = &self.inner.core;
        self.replace_rules::<InstalledAdaptive, _>(|previous| {
            let set = AdaptiveRuleSet::build(rules, previous, &core.clock)?;
            core.inbound_rules
                .set::<InstalledAdaptive>(set.inbound.clone());
            Ok(set)
        })
    }

    /// The adaptive rules in force, exactly as loaded.
    pub fn adaptive_rules(&self) -> Vec<crate::adaptive::AdaptiveRule> {
        self.inner
            .core
            .sets
            .get::<crate::adaptive::InstalledAdaptive>()
            .loaded
            .clone()
    }

    /// The state of adaptive rule `id`'s limiter (limit, in flight, estimates, the reason of
    /// the last change), if one is loaded.
    pub fn adaptive_state(&self, id: &str) -> Option<crate::adaptive::AdaptiveState> {
        let set = self
            .inner
            .core
            .sets
            .get::<crate::adaptive::InstalledAdaptive>();
        set.find(id).map(|installed| installed.limiter.state())
    }
}
