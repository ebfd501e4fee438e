//! The instance's adaptive rules: loading them, and reading them with each limiter's state.

use super::Spillway;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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
        use crate::adaptive::AdaptiveRuleSet;
        let core = &self.inner.core;
        let registry = &self.inner.registry;
        let _lock = core.rules_lock.lock().unwrap_or_else(|e| e.into_inner());
        let previous = core.adaptive.load_full();
        let set = AdaptiveRuleSet::build(rules, &previous, &core.clock)?;
        core.adaptive.store(Arc::new(set));
        let set = core.adaptive.load();
        // Flag first when adding, after when removing, as for a resource's rules.
        match set.inbound.clone() {
            Some(inbound) => {
                core.inbound_adaptive.store(Some(inbound));
                core.has_inbound_adaptive.store(true, Ordering::Release);
            }
            None => {
                core.has_inbound_adaptive.store(false, Ordering::Release);
                core.inbound_adaptive.store(None);
            }
        }
        for resource in registry.iter().chain(std::iter::once(registry.overflow())) {
            resource
                .inner
                .set_adaptive(set.by_resource.get(resource.name()).cloned());
        }
        Ok(())
    }

    /// The adaptive rules in force, exactly as loaded.
    pub fn adaptive_rules(&self) -> Vec<crate::adaptive::AdaptiveRule> {
        self.inner.core.adaptive.load().loaded.clone()
    }

    /// The state of adaptive rule `id`'s limiter (limit, in flight, estimates, the reason of
    /// the last change), if one is loaded.
    pub fn adaptive_state(&self, id: &str) -> Option<crate::adaptive::AdaptiveState> {
        let set = self.inner.core.adaptive.load();
        set.find(id).map(|installed| installed.limiter.state())
    }
}
