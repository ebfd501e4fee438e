//! The cluster rules as loaded, grouped per resource in file order.

use super::{validate_cluster_rules, ClusterRule, ClusterRuleError, SharedLimit};
use std::collections::HashMap;
use std::sync::Arc;

/// One rule, as the entry path uses it.
#[derive(Debug)]
pub(crate) struct InstalledCluster {
    /// The rule id's interned number, for blocks.
    pub(crate) id_number: u32,
    pub(crate) limit: Arc<dyn SharedLimit>,
}

/// A resource's cluster rules, in the order loaded.
#[derive(Debug, Default)]
pub(crate) struct ResourceCluster {
    pub(crate) rules: Vec<InstalledCluster>,
    /// The bits (by position) of the rules whose passes are held until an entry ends.
    pub(crate) until_exit: u8,
}

/// The rules as loaded.
#[derive(Debug, Default)]
pub(crate) struct ClusterRuleSet {
    pub(crate) loaded: Vec<ClusterRule>,
    pub(crate) by_resource: HashMap<String, Arc<ResourceCluster>>,
}

impl ClusterRuleSet {
    /// Validates `rules` and groups them per resource.
    pub(crate) fn build(rules: Vec<ClusterRule>) -> Result<Self, ClusterRuleError> {
        validate_cluster_rules(&rules)?;
        let mut grouped: HashMap<String, ResourceCluster> = HashMap::new();
        for rule in &rules {
            let resource = grouped.entry(rule.resource.clone()).or_default();
            if rule.limit.held_until_exit() {
                // At most MAX_CLUSTER_RULES_PER_RESOURCE (8) rules: the bit fits.
                resource.until_exit |= 1 << resource.rules.len();
            }
            resource.rules.push(InstalledCluster {
                id_number: crate::intern::intern_numbered(&rule.id).number,
                limit: Arc::clone(&rule.limit),
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
}
