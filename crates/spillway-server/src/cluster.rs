//! Cluster rules from the file: checked with the rest of it, and run as leased windows on the
//! `[cluster]` Redis, each refilled by a task of its own. A reload keeps the lease (and its
//! task) of every rule that stays the same.

use crate::config::{ClusterConfig, ClusterRuleConfig, Config};
use spillway::cluster::ClusterRule;
use spillway_redis::{LeaseSettings, LeasedWindow, SharedWindow, Time};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Checks cluster rules with the core's and the crate's own checks: the first rule at fault,
/// its field and why (as the core's validators answer, for the file's checker).
pub(crate) fn validate_rules(
    rules: &[ClusterRuleConfig],
) -> Result<(), (usize, &'static str, String)> {
    let ids: Vec<(&str, &str)> = rules
        .iter()
        .map(|rule| (rule.id.as_str(), rule.resource.as_str()))
        .collect();
    spillway::cluster::validate_cluster_rule_ids(&ids)
        .map_err(|err| (err.index(), err.field(), err.problem().to_owned()))?;
    for (index, rule) in rules.iter().enumerate() {
        // The id names the limit in Redis.
        spillway_redis::check_name(&rule.id).map_err(|err| (index, "id", err.to_string()))?;
        spillway_redis::check_settings(rule.limit, rule.interval, rule.buckets)
            .map_err(|(field, problem)| (index, field, problem))?;
        if rule.max_batch == 0 {
            return Err((index, "max_batch", "must be at least 1".to_owned()));
        }
    }
    Ok(())
}

/// Checks `[cluster]`: the field at fault and why.
pub(crate) fn validate_section(cluster: &ClusterConfig) -> Result<(), (&'static str, String)> {
    if let Err(err) = spillway_redis::redis::Client::open(cluster.redis.as_str()) {
        return Err(("redis", format!("is not a Redis URL: {err}")));
    }
    if cluster.call_timeout.is_zero() {
        return Err(("call_timeout", "must be positive".to_owned()));
    }
    if cluster.probe_every.is_zero() {
        return Err(("probe_every", "must be positive".to_owned()));
    }
    if cluster.heartbeat_ttl.as_millis() < 3 {
        return Err(("heartbeat_ttl", "must be at least 3 ms".to_owned()));
    }
    if cluster.assumed_instances == 0 {
        return Err(("assumed_instances", "must be at least 1".to_owned()));
    }
    Ok(())
}

/// The running cluster rules: a lease and its refilling task per rule.
#[derive(Debug, Default)]
pub struct ClusterLimits {
    running: Mutex<HashMap<String, Running>>,
}

#[derive(Debug)]
struct Running {
    /// What it was built from: the rule and the `[cluster]` section.
    built_from: (ClusterRuleConfig, ClusterConfig),
    lease: Arc<LeasedWindow>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ClusterLimits {
    /// The core's cluster rules for `config` (checked): a rule that stays the same, under the
    /// same `[cluster]`, keeps its lease; others get a new one and a task to refill it; the
    /// tasks of rules gone stop. Call it inside the runtime.
    pub fn rules_for(&self, config: &Config) -> Vec<ClusterRule> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let Some(section) = config.cluster.as_ref().map(|c| c.get_ref()) else {
            running.clear();
            return Vec::new();
        };
        let mut next = HashMap::new();
        let mut rules = Vec::new();
        for rule in config.cluster_rules.iter().map(|r| r.get_ref()) {
            let built_from = (rule.clone(), section.clone());
            let kept = running
                .remove(&rule.id)
                .filter(|old| old.built_from == built_from);
            let Some(entry) = kept.or_else(|| start(rule, section)) else {
                continue;
            };
            rules.push(ClusterRule::new(
                &rule.id,
                &rule.resource,
                entry.lease.clone(),
            ));
            next.insert(rule.id.clone(), entry);
        }
        // What is left in `running` is gone from the file: dropped, its task stopped.
        *running = next;
        rules
    }
}

/// A new lease for `rule` on `section`'s Redis, with the task that connects and refills it.
/// None if the rule cannot be built (a checked file has no such rule).
fn start(rule: &ClusterRuleConfig, section: &ClusterConfig) -> Option<Running> {
    let window = SharedWindow::new(
        &rule.id,
        rule.limit,
        rule.interval,
        rule.buckets,
        Time::Redis,
    )
    .ok()?;
    let settings = LeaseSettings {
        max_batch: rule.max_batch,
        call_timeout: section.call_timeout,
        probe_every: section.probe_every,
        heartbeat_ttl: section.heartbeat_ttl,
        fallback: rule.fallback.into(),
        assumed_processes: section.assumed_instances,
        member: None,
    };
    let clock = Arc::new(spillway::SystemClock::new());
    let lease = Arc::new(LeasedWindow::with_settings(window, clock, settings).ok()?);
    let client = spillway_redis::redis::Client::open(section.redis.as_str()).ok()?;
    let driven = lease.clone();
    let id = rule.id.clone();
    let task = tokio::spawn(async move {
        driven
            .connect_and_drive(client, |outcome| {
                if let Err(err) = outcome {
                    tracing::debug!(rule = %id, %err, "cluster rule: refill failed");
                }
            })
            .await;
    });
    Some(Running {
        built_from: (rule.clone(), section.clone()),
        lease,
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    fn config(rules: &str) -> Config {
        // A port nothing listens on: the leases stay in their fallback, which is all this needs.
        let text = format!("[cluster]\nredis = \"redis://127.0.0.1:1\"\n\n{rules}");
        parse(&text, "test.toml").unwrap()
    }

    const A: &str = "[[cluster_rule]]\nid = \"a\"\nresource = \"api\"\nlimit = 10\n";
    const B: &str = "[[cluster_rule]]\nid = \"b\"\nresource = \"api\"\nlimit = 20\n";

    fn leases(limits: &ClusterLimits) -> HashMap<String, Arc<LeasedWindow>> {
        let running = limits.running.lock().unwrap();
        running
            .iter()
            .map(|(id, entry)| (id.clone(), entry.lease.clone()))
            .collect()
    }

    #[tokio::test]
    async fn a_reload_keeps_the_lease_of_an_unchanged_rule_and_only_that() {
        let limits = ClusterLimits::default();
        assert_eq!(limits.rules_for(&config(&format!("{A}\n{B}"))).len(), 2);
        let before = leases(&limits);
        // `a` unchanged, `b` changed: `a` keeps its lease, `b` gets a new one.
        let changed = B.replace("limit = 20", "limit = 30");
        limits.rules_for(&config(&format!("{A}\n{changed}")));
        let after = leases(&limits);
        assert!(Arc::ptr_eq(&before["a"], &after["a"]));
        assert!(!Arc::ptr_eq(&before["b"], &after["b"]));
        // A rule gone from the file: its lease and task are dropped.
        limits.rules_for(&config(A));
        assert_eq!(leases(&limits).len(), 1);
        // Its task, aborted, lets go of the lease when the runtime next runs it.
        for _ in 0..100 {
            if Arc::strong_count(&after["b"]) == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(
            Arc::strong_count(&after["b"]),
            1,
            "only this test still holds it"
        );
        // No [cluster]: no rules.
        let plain = parse("", "test.toml").unwrap();
        assert!(limits.rules_for(&plain).is_empty());
        assert!(leases(&limits).is_empty());
    }
}
