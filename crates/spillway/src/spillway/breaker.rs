//! The instance's circuit breaker rules: loading them, reading their states, and hearing of
//! their changes.

use super::Spillway;
use crate::breaker::{
    BreakerEvent, BreakerRule, BreakerRuleError, BreakerRuleSet, BreakerState, ResourceBreakers,
};
use std::sync::Arc;

impl Spillway {
    /// Validates `rules` and, if every one is good, replaces the breaker rules with them at once.
    ///
    /// A rule that is unchanged (same id, same fields) keeps its breaker: its state, its
    /// statistics and its probes. See [`breaker`](crate::breaker) for the rules.
    ///
    /// # Errors
    ///
    /// A [`BreakerRuleError`] naming the first bad rule and field; the rules in force do not
    /// change.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::breaker::{BreakerRule, BreakerState, BreakerStrategy};
    /// use spillway::{BlockKind, ManualClock, Spillway};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// spillway.load_breaker_rules(vec![BreakerRule::new(
    ///     "payments-errors",
    ///     "payments",
    ///     BreakerStrategy::ErrorRatio { threshold: 0.5 },
    ///     Duration::from_secs(10),
    /// )])?;
    /// for _ in 0..5 {
    ///     let mut entry = spillway.entry("payments").enter().unwrap();
    ///     entry.mark_error(); // the dependency is down
    /// }
    /// let blocked = spillway.entry("payments").enter().unwrap_err();
    /// assert_eq!(blocked.kind(), BlockKind::Breaker);
    /// assert_eq!(blocked.retry_after(), Some(Duration::from_secs(10)));
    /// assert_eq!(spillway.breaker_state("payments-errors"), Some(BreakerState::Open));
    /// # Ok::<(), spillway::breaker::BreakerRuleError>(())
    /// ```
    pub fn load_breaker_rules(&self, rules: Vec<BreakerRule>) -> Result<(), BreakerRuleError> {
        let listeners = &self.inner.core.breaker_listeners;
        self.replace_rules::<ResourceBreakers, _>(|previous| {
            BreakerRuleSet::build(rules, previous, listeners)
        })
    }

    /// The breaker rules in force, exactly as loaded.
    pub fn breaker_rules(&self) -> Vec<BreakerRule> {
        self.inner
            .core
            .sets
            .get::<ResourceBreakers>()
            .loaded
            .clone()
    }

    /// The state of the breaker of rule `rule_id`, if such a rule is loaded.
    pub fn breaker_state(&self, rule_id: &str) -> Option<BreakerState> {
        self.inner
            .core
            .sets
            .get::<ResourceBreakers>()
            .by_resource
            .values()
            .flat_map(|r| &r.breakers)
            .find(|breaker| breaker.rule().id == rule_id)
            .map(|breaker| breaker.state())
    }

    /// Calls `listener` on every state change of every breaker of this spillway, after the
    /// change. Listeners run on the thread that caused the change; keep them short.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::Spillway;
    ///
    /// let spillway = Spillway::new();
    /// spillway.on_breaker_state_change(|event| {
    ///     println!("{} {}: {} -> {}", event.resource, event.rule_id, event.from, event.to);
    /// });
    /// ```
    pub fn on_breaker_state_change(
        &self,
        listener: impl Fn(&BreakerEvent) + Send + Sync + 'static,
    ) {
        self.inner.core.breaker_listeners.add(Arc::new(listener));
    }
}
