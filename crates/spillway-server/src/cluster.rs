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
