//! The instance's cluster rules: loading them, reading them, and waiting for a leased one's
//! passes before an entry.

use super::Spillway;
use crate::cluster::{ClusterRuleSet, ResourceCluster};
use std::sync::Arc;

impl Spillway {
    /// Waits until every cluster rule on `resource` can decide `count` passes without waiting
    /// on its shared state: a leased rule whose process holds fewer (a quiet route, or the
    /// first request after start) asks its lease for a refill and waits for it, within a bound
    /// of the lease's own (twice its call timeout). Then the entry decides as always, from the
    /// lease the wait brought. At once when the resource has no cluster rule (no lookup of the
    /// resource when no rule is loaded at all), or its leases hold enough.
    ///
    /// Call it before [`entry`](Self::entry) on a resource with leased cluster rules, so that
    /// a process never refuses for want of a lease while the fleet is under its limit; the
    /// `spillway` binary and the tower layer do.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn run() -> Result<(), spillway::BlockError> {
    /// let spillway = spillway::Spillway::new();
    /// spillway.cluster_ready("api", 1).await; // no cluster rule: at once
    /// let entry = spillway.entry("api").enter()?;
    /// # drop(entry);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn cluster_ready(&self, resource: &str, count: u32) {
        let Some(rules) = self.cluster_rules_of(resource) else {
            return;
        };
        for rule in &rules.rules {
            if !rule.limit.is_ready(count) {
                rule.limit.until_ready(count).await;
            }
        }
    }

    /// Loads cluster rules, replacing all of them atomically; a bad set changes nothing. See
    /// [`cluster`](crate::cluster) for an example.
    ///
    /// # Errors
    ///
    /// A [`ClusterRuleError`](crate::cluster::ClusterRuleError) naming the first rule and field
    /// at fault.
    pub fn load_cluster_rules(
        &self,
        rules: Vec<crate::cluster::ClusterRule>,
    ) -> Result<(), crate::cluster::ClusterRuleError> {
        self.replace_rules::<ResourceCluster, _>(|_| ClusterRuleSet::build(rules))
    }

    /// Whether [`cluster_ready`](Self::cluster_ready) would complete at once: every cluster
    /// rule on `resource` can decide `count` passes now. For a caller that awaits only when it
    /// must (the tower layer).
    ///
    /// ```
    /// let spillway = spillway::Spillway::new();
    /// assert!(spillway.cluster_is_ready("api", 1)); // no cluster rule
    /// ```
    pub fn cluster_is_ready(&self, resource: &str, count: u32) -> bool {
        self.cluster_rules_of(resource)
            .is_none_or(|rules| rules.rules.iter().all(|rule| rule.limit.is_ready(count)))
    }

    /// Whether any cluster rule is loaded: one atomic load, for a caller that would otherwise
    /// work out a resource's name only to learn that there is none (the tower layer).
    ///
    /// ```
    /// assert!(!spillway::Spillway::new().has_cluster_rules());
    /// ```
    pub fn has_cluster_rules(&self) -> bool {
        !self
            .inner
            .core
            .sets
            .get::<ResourceCluster>()
            .by_resource
            .is_empty()
    }

    /// The cluster rules on `resource`, if any (no lookup when no rule is loaded at all).
    fn cluster_rules_of(&self, resource: &str) -> Option<Arc<ResourceCluster>> {
        if !self.has_cluster_rules() {
            return None;
        }
        self.resource(resource)
            .ok()?
            .inner
            .slots
            .load_full::<ResourceCluster>()
    }

    /// The cluster rules in force, exactly as loaded.
    pub fn cluster_rules(&self) -> Vec<crate::cluster::ClusterRule> {
        self.inner.core.sets.get::<ResourceCluster>().loaded.clone()
    }
}
