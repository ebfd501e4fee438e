//! Limits shared with other processes (cluster-wide limits): a step of the decision pipeline
//! whose state lives elsewhere.
//!
//! The core does no I/O: a [`SharedLimit`] decides from what its process already holds (the
//! `spillway-redis` crate's leased windows take their passes from Redis in the background), and
//! a [`ClusterRule`] puts one in front of a resource. Cluster rules are checked after the
//! resource's flow rules and before its adaptive limit and breakers, all or nothing with them:
//! an entry a later step refuses gives its shared passes back. A limit on concurrency
//! ([`SharedLimit::held_until_exit`]) gets its passes back when the entry ends, too.
//!
//! # Examples
//!
//! ```
//! use spillway::cluster::{ClusterRule, SharedLimit, SharedRefusal};
//! use spillway::{BlockKind, Spillway};
//! use std::sync::atomic::{AtomicI64, Ordering};
//! use std::sync::Arc;
//!
//! /// Passes this process holds of a fleet-wide limit (refilled elsewhere).
//! #[derive(Debug)]
//! struct Held(AtomicI64);
//!
//! impl SharedLimit for Held {
//!     fn try_take(&self, count: u32) -> Result<(), SharedRefusal> {
//!         let count = i64::from(count);
//!         if self.0.fetch_sub(count, Ordering::AcqRel) >= count {
//!             return Ok(());
//!         }
//!         self.0.fetch_add(count, Ordering::AcqRel);
//!         Err(SharedRefusal::new(0.0, 1000.0))
//!     }
//!     fn give_back(&self, count: u32) {
//!         self.0.fetch_add(i64::from(count), Ordering::AcqRel);
//!     }
//! }
//!
//! let spillway = Spillway::new();
//! let fleet = Arc::new(Held(AtomicI64::new(2)));
//! spillway.load_cluster_rules(vec![ClusterRule::new("api-fleet", "api", fleet)])?;
//! let _a = spillway.entry("api").enter().unwrap();
//! let _b = spillway.entry("api").enter().unwrap();
//! let err = spillway.entry("api").enter().unwrap_err();
//! assert_eq!((err.kind(), err.rule_id()), (BlockKind::Cluster, Some("api-fleet")));
//! # Ok::<(), spillway::cluster::ClusterRuleError>(())
//! ```

mod rule_set;
mod step;

pub(crate) use rule_set::{ClusterRuleSet, ResourceCluster};

use crate::rule_error::RuleError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Most cluster rules on one resource.
pub const MAX_CLUSTER_RULES_PER_RESOURCE: usize = 8;

/// A limit shared with other processes, as one process sees it: it admits from what it holds,
/// without I/O and without waiting.
pub trait SharedLimit: Send + Sync + fmt::Debug + 'static {
    /// Takes `count` passes, or refuses.
    ///
    /// # Errors
    ///
    /// The limit has no room for `count` now, as this process knows it.
    fn try_take(&self, count: u32) -> Result<(), SharedRefusal>;

    /// Gives back `count` passes taken by an entry that a later step refused, or, for a limit
    /// [held until exit](SharedLimit::held_until_exit), by an entry that ended.
    fn give_back(&self, count: u32);

    /// Whether an admitted entry holds its passes until it ends (a concurrency limit: they are
    /// given back when the entry exits), rather than spending them (a rate; by default).
    fn held_until_exit(&self) -> bool {
        false
    }

    /// Whether it admits by a local fallback now, its shared state out of reach (for metrics
    /// and status pages; by default never).
    fn in_fallback(&self) -> bool {
        false
    }

    /// Whether it has not reached its shared state yet (starting up: for metrics and status
    /// pages; by default never).
    fn is_starting(&self) -> bool {
        false
    }

    /// Whether it is just back on its shared state after a failure and keeps to its local
    /// share besides the shared state's answer, until the other processes have had the
    /// chance to be back too (for metrics and status pages; by default never).
    fn keeps_to_share(&self) -> bool {
        false
    }

    /// The processes sharing it, as last known (for metrics; by default unknown).
    fn processes(&self) -> Option<u64> {
        None
    }

    /// While it is [in its fallback](Self::in_fallback): why, the shared state's last error
    /// (for status pages; by default none).
    fn last_error(&self) -> Option<String> {
        None
    }

    /// The calls to its shared state that failed since it was made (for metrics; by default
    /// none).
    fn failures(&self) -> u64 {
        0
    }

    /// Whether `count` passes can be decided now without waiting on the shared state (by
    /// default always). A leased limit says no when it holds fewer and the shared limit is not
    /// known to be full: [`until_ready`](Self::until_ready) then waits for its next refill.
    fn is_ready(&self, count: u32) -> bool {
        let _ = count;
        true
    }

    /// Completes once the passes [`is_ready`](Self::is_ready) lacked may have come, within a
    /// bound of the limit's own (by default at once). It never refuses: the entry decides
    /// afterwards as always. Called by [`Spillway::cluster_ready`](crate::Spillway::cluster_ready).
    fn until_ready(&self, count: u32) -> Ready<'_> {
        let _ = count;
        Box::pin(std::future::ready(()))
    }
}

/// What [`SharedLimit::until_ready`] returns: a future that waits on the limit (a lease's
/// refill).
pub type Ready<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;

/// Why a [`SharedLimit`] refused: the value it saw against its threshold, and when to retry
/// if it knows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedRefusal {
    observed: f64,
    threshold: f64,
    retry_after: Option<Duration>,
}

impl SharedRefusal {
    /// A refusal with `observed` against `threshold`.
    pub fn new(observed: f64, threshold: f64) -> Self {
        Self {
            observed,
            threshold,
            retry_after: None,
        }
    }

    /// With a hint of when to retry.
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The value the limit saw.
    pub fn observed(&self) -> f64 {
        self.observed
    }

    /// The threshold it saw it against.
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// When to retry, if the limit knows.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

/// A [`SharedLimit`] in front of a resource.
#[derive(Clone)]
pub struct ClusterRule {
    /// Names the rule in blocks and in errors.
    pub id: String,
    /// The resource it limits.
    pub resource: String,
    /// The limit, shared with the other processes.
    pub limit: Arc<dyn SharedLimit>,
}

impl ClusterRule {
    /// Rule `id` puts `limit` in front of `resource`.
    pub fn new(
        id: impl Into<String>,
        resource: impl Into<String>,
        limit: Arc<dyn SharedLimit>,
    ) -> Self {
        Self {
            id: id.into(),
            resource: resource.into(),
            limit,
        }
    }
}

impl fmt::Debug for ClusterRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterRule")
            .field("id", &self.id)
            .field("resource", &self.resource)
            .field("limit", &self.limit)
            .finish()
    }
}

impl PartialEq for ClusterRule {
    /// The same id and resource, and the very same limit.
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.resource == other.resource
            && std::ptr::addr_eq(Arc::as_ptr(&self.limit), Arc::as_ptr(&other.limit))
    }
}

/// A cluster rule that cannot be used ([`RuleError`] of kind `"cluster"`).
pub type ClusterRuleError = RuleError;

/// Checks `rules`: ids present and distinct, resources named, at most
/// [`MAX_CLUSTER_RULES_PER_RESOURCE`] per resource.
///
/// # Errors
///
/// A [`ClusterRuleError`] naming the first rule and field at fault.
pub fn validate_cluster_rules(rules: &[ClusterRule]) -> Result<(), ClusterRuleError> {
    let ids: Vec<(&str, &str)> = rules
        .iter()
        .map(|rule| (rule.id.as_str(), rule.resource.as_str()))
        .collect();
    validate_cluster_rule_ids(&ids)
}

/// [`validate_cluster_rules`] for rules not built yet, given as `(id, resource)` pairs (a
/// configuration file's, say).
///
/// # Errors
///
/// As [`validate_cluster_rules`].
///
/// ```
/// use spillway::cluster::validate_cluster_rule_ids;
///
/// let err = validate_cluster_rule_ids(&[("a", "api"), ("a", "search")]).unwrap_err();
/// assert_eq!((err.index(), err.field()), (1, "id"));
/// ```
pub fn validate_cluster_rule_ids(rules: &[(&str, &str)]) -> Result<(), ClusterRuleError> {
    let mut per_resource = std::collections::HashMap::<&str, usize>::new();
    for (index, &(id, resource)) in rules.iter().enumerate() {
        let fault =
            |field, problem: String| Err(RuleError::new("cluster", index, id, field, problem));
        if id.is_empty() {
            return fault("id", "`id` must not be empty".to_owned());
        }
        if rules[..index].iter().any(|&(earlier, _)| earlier == id) {
            return fault("id", format!("`id` {id:?} is used by an earlier rule"));
        }
        if resource.is_empty() {
            return fault("resource", "`resource` must not be empty".to_owned());
        }
        let on_resource = per_resource.entry(resource).or_default();
        *on_resource += 1;
        if *on_resource > MAX_CLUSTER_RULES_PER_RESOURCE {
            return fault(
                "resource",
                format!(
                    "at most {MAX_CLUSTER_RULES_PER_RESOURCE} cluster rules per resource; `{resource}` has more"
                ),
            );
        }
    }
    Ok(())
}
