//! Strict cluster rules: one Redis call per request, awaited by the proxy before the route's
//! local rules (the decision pipeline cannot await), as the Dubbo limits are.

use crate::config::{ClusterKind, ClusterRuleConfig};
use spillway::{BlockError, BlockKind};
use spillway_redis::{LeaseMode, LeaseSettings, SharedBucket, SharedWindow, Strict, Target};
use std::sync::Arc;

/// A strict cluster rule, as the proxy checks it.
#[derive(Debug, Clone)]
pub(crate) struct StrictRule {
    id: Arc<str>,
    check: StrictCheck,
}

#[derive(Debug, Clone)]
enum StrictCheck {
    Window(Arc<Strict<SharedWindow>>),
    Bucket(Arc<Strict<SharedBucket>>),
}

impl StrictRule {
    /// The rule for `rule` (a `qps` or `bucket` rule), with the task that keeps its connection
    /// to `target`. None if it cannot be built (a checked file has no such rule).
    pub(crate) fn start(
        rule: &ClusterRuleConfig,
        target: Target,
        settings: LeaseSettings,
        clock: Arc<dyn spillway::Clock>,
    ) -> Option<(Self, tokio::task::JoinHandle<()>)> {
        // Its connection's task.
        fn keep<S: spillway_redis::Shared>(
            strict: &Arc<Strict<S>>,
            target: Target,
        ) -> tokio::task::JoinHandle<()> {
            let connector = strict.clone();
            tokio::spawn(async move { connector.connect(target).await })
        }
        let (check, task) = match rule.kind {
            ClusterKind::Qps => {
                let strict = Arc::new(Strict::new(super::window(rule)?, clock, settings).ok()?);
                let task = keep(&strict, target);
                (StrictCheck::Window(strict), task)
            }
            ClusterKind::Bucket => {
                let strict = Arc::new(Strict::new(super::bucket(rule)?, clock, settings).ok()?);
                let task = keep(&strict, target);
                (StrictCheck::Bucket(strict), task)
            }
            // Refused by the file's checks: a leased concurrency limit is exact already.
            ClusterKind::Concurrency => return None,
        };
        let id = Arc::from(rule.id.as_str());
        Some((Self { id, check }, task))
    }

    /// Counts the request and decides (one call to Redis, or the fallback with none): a
    /// refusal is a cluster block of `resource` naming the rule.
    pub(crate) async fn check(&self, resource: &str) -> Result<(), BlockError> {
        let checked = match &self.check {
            StrictCheck::Window(strict) => strict.check(1).await,
            StrictCheck::Bucket(strict) => strict.check(1).await,
        };
        checked.map_err(|refusal| {
            let err = BlockError::custom(
                BlockKind::Cluster,
                resource,
                refusal.observed(),
                refusal.threshold(),
            )
            .with_rule_id(&self.id);
            match refusal.retry_after() {
                Some(after) => err.with_retry_after(after),
                None => err,
            }
        })
    }

    /// Whether it has no answer from Redis yet, whether it decides by its fallback now, and
    /// whether it keeps to its share just back on Redis.
    pub(crate) fn state(&self) -> (bool, bool, bool) {
        let (mode, keeps) = match &self.check {
            StrictCheck::Window(strict) => (strict.mode(), strict.keeps_to_share()),
            StrictCheck::Bucket(strict) => (strict.mode(), strict.keeps_to_share()),
        };
        (
            mode == LeaseMode::Starting,
            mode == LeaseMode::Fallback,
            keeps,
        )
    }

    /// While it decides by its fallback: Redis's last error; and the calls that failed in all.
    pub(crate) fn failure(&self) -> (Option<String>, u64) {
        match &self.check {
            StrictCheck::Window(strict) => (strict.last_error(), strict.failures()),
            StrictCheck::Bucket(strict) => (strict.last_error(), strict.failures()),
        }
    }

    /// The instances it is shared among (see `Strict::live_processes`).
    pub(crate) fn instances(&self) -> u64 {
        match &self.check {
            StrictCheck::Window(strict) => strict.live_processes(),
            StrictCheck::Bucket(strict) => strict.live_processes(),
        }
    }
}
