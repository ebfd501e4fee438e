//! Cluster rules from the file: checked with the rest of it, and run as leases (of a window, a
//! bucket or a concurrency limit) on the `[cluster]` Redis or Redis Cluster, each refilled by a
//! task of its own. A reload keeps the lease (and its
//! task) of every rule that stays the same.

mod checks;
mod strict;

pub(crate) use checks::{validate_rules, validate_section};
pub(crate) use strict::StrictRule;

#[cfg(test)]
use crate::config::Config;
use crate::config::{ClusterConfig, ClusterKind, ClusterMode, ClusterRuleConfig};
use arc_swap::ArcSwap;
use spillway::cluster::{ClusterRule, SharedLimit};
use spillway_redis::redis::cluster::ClusterClient;
use spillway_redis::redis::Client;
use spillway_redis::{
    LeaseSettings, LeasedBucket, LeasedConcurrency, LeasedWindow, SharedBucket, SharedConcurrency,
    SharedWindow, Target, Time,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where `section` says the rules' Redis is: one Redis, or a Redis Cluster (each call within
/// the call timeout). None if a URL is bad (a checked file has none).
fn target(section: &ClusterConfig) -> Option<Target> {
    let timeout = section.call_timeout;
    if let Some(url) = &section.redis {
        return Client::open(url.as_str()).ok().map(Target::from);
    }
    let client = ClusterClient::builder(section.nodes.iter().map(String::as_str))
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(1)
        .build()
        .ok()?;
    Some(Target::from(client))
}

/// The running cluster rules: a lease (or a strict check) and its task per rule.
#[derive(Debug)]
pub struct ClusterLimits {
    running: Mutex<Vec<Running>>,
    /// The `[cluster]` section in force (by the file; the rules running say theirs).
    section: Mutex<Option<ClusterConfig>>,
    /// The strict rules by resource, for the proxy to await before a request's entry.
    strict: ArcSwap<HashMap<String, Arc<[StrictRule]>>>,
}

impl Default for ClusterLimits {
    fn default() -> Self {
        Self {
            running: Mutex::default(),
            section: Mutex::default(),
            strict: ArcSwap::from_pointee(HashMap::new()),
        }
    }
}

#[derive(Debug)]
struct Running {
    /// What it was built from: the rule and the `[cluster]` section.
    built_from: (ClusterRuleConfig, ClusterConfig),
    check: Check,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// The instances its limit is shared among, as it knows them now.
    fn processes(&self) -> u64 {
        match &self.check {
            Check::Leased(lease) => lease.processes().unwrap_or(1),
            Check::Strict(check) => check.instances(),
        }
    }
}

/// How a rule is checked.
#[derive(Debug, Clone)]
enum Check {
    /// In the decision pipeline, from a lease.
    Leased(Arc<dyn SharedLimit>),
    /// Awaited by the proxy, one call per request.
    Strict(StrictRule),
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A cluster rule's state, for the metrics and the admin API.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RuleState {
    pub(crate) id: String,
    pub(crate) resource: String,
    pub(crate) kind: &'static str,
    pub(crate) mode: &'static str,
    /// No answer from Redis yet.
    pub(crate) starting: bool,
    pub(crate) fallback: bool,
    /// Just back on Redis, keeping to its share until the others are back too.
    pub(crate) returning: bool,
    pub(crate) instances: Option<u64>,
    /// In the fallback: Redis's last error.
    pub(crate) error: Option<String>,
    /// The calls to Redis that failed since the rule's limit was made.
    pub(crate) failures: u64,
}

impl ClusterLimits {
    /// The core's rules for `config`, as a reload gives them.
    #[cfg(test)]
    fn rules_for(&self, config: &Config) -> Vec<ClusterRule> {
        let section = config.cluster.as_ref().map(|c| c.get_ref().clone());
        let rules: Vec<_> = config
            .cluster_rules
            .iter()
            .map(|r| r.get_ref().clone())
            .collect();
        self.rebuild(&mut lock(&self.running), section.as_ref(), &rules)
    }

    /// The `[cluster]` section and the rules in force, as given.
    pub(crate) fn configured(&self) -> (Option<ClusterConfig>, Vec<ClusterRuleConfig>) {
        let running = lock(&self.running);
        let rules = running.iter().map(|rule| rule.built_from.0.clone());
        (lock(&self.section).clone(), rules.collect())
    }

    /// Replaces the cluster rules with `given` (checked) under `section`, and loads the leased
    /// ones into `spillway`, in one step under this limits' lock, so that two replacements (a
    /// reload and an admin API write) never interleave. The strict ones are kept for the proxy
    /// to await. A rule that stays the same, under the same `[cluster]`, keeps its lease;
    /// others get a new one and a task to refill it (or keep a strict check's connection); the
    /// tasks of rules gone stop. Call it inside the runtime.
    ///
    /// # Errors
    ///
    /// Rules given without a `[cluster]` section (nothing changes), or a rule the core refuses
    /// (checked rules are not).
    pub(crate) fn replace(
        &self,
        spillway: &spillway::Spillway,
        section: Option<ClusterConfig>,
        given: Vec<ClusterRuleConfig>,
    ) -> Result<(), String> {
        let mut running = lock(&self.running);
        if section.is_none() && !given.is_empty() {
            return Err(
                "cluster rules need a [cluster] section with the `redis` they share".to_owned(),
            );
        }
        let rules = self.rebuild(&mut running, section.as_ref(), &given);
        *lock(&self.section) = section;
        spillway
            .load_cluster_rules(rules)
            .map_err(|err| err.to_string())
    }

    /// The running rules made `given` under `section` (a rule that cannot start is left out: a
    /// checked one always starts): the core's leased rules.
    fn rebuild(
        &self,
        running: &mut Vec<Running>,
        section: Option<&ClusterConfig>,
        given: &[ClusterRuleConfig],
    ) -> Vec<ClusterRule> {
        let Some(section) = section else {
            running.clear();
            self.strict.store(Arc::default());
            return Vec::new();
        };
        let mut next = Vec::new();
        let mut rules = Vec::new();
        let mut strict: HashMap<String, Vec<StrictRule>> = HashMap::new();
        for rule in given {
            let built_from = (rule.clone(), section.clone());
            let kept = running
                .iter()
                .position(|old| old.built_from == built_from)
                .map(|at| running.swap_remove(at));
            // A changed rule on the same Redis (whatever else of `[cluster]` changed) starts
            // from the fleet its predecessor knew: a new one assumes `assumed_instances` until
            // Redis answers, and during an outage that gave this instance the whole limit
            // (found by an attack: a limit changed by a reload during an outage admitted the
            // new limit plus two shares of the old).
            let same_redis =
                |old: &ClusterConfig| (&old.redis, &old.nodes) == (&section.redis, &section.nodes);
            let known = running
                .iter()
                .find(|old| old.built_from.0.id == rule.id && same_redis(&old.built_from.1))
                .map(Running::processes);
            let Some(entry) = kept.or_else(|| start(rule, section, known)) else {
                continue;
            };
            match &entry.check {
                Check::Leased(lease) => {
                    rules.push(ClusterRule::new(&rule.id, &rule.resource, lease.clone()));
                }
                Check::Strict(check) => {
                    strict
                        .entry(rule.resource.clone())
                        .or_default()
                        .push(check.clone());
                }
            }
            next.push(entry);
        }
        // What is left in `running` is gone from the file: dropped, its task stopped.
        *running = next;
        let strict = strict
            .into_iter()
            .map(|(resource, checks)| (resource, Arc::from(checks)))
            .collect();
        self.strict.store(Arc::new(strict));
        rules
    }

    /// Waits until every rule has had its first answer from Redis (or found it failing), at
    /// most `within`, and logs how it went: called at start, before the proxy serves, so that
    /// its first requests are decided against the fleet's state.
    pub async fn until_started(&self, within: std::time::Duration) {
        let clock = spillway::SystemClock::new();
        let began = spillway::Clock::now_millis(&clock);
        let deadline = tokio::time::Instant::now() + within;
        let starting = || self.states().iter().filter(|rule| rule.starting).count();
        let total = self.states().len();
        if total == 0 {
            return;
        }
        while starting() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let waited_ms = spillway::Clock::now_millis(&clock) - began;
        let states = self.states();
        let unanswered = states.iter().filter(|rule| rule.starting).count();
        let failing = states.iter().filter(|rule| rule.fallback).count();
        if unanswered > 0 {
            tracing::warn!(rules = total, unanswered, waited_ms, "cluster rules: no answer from Redis within startup_wait; their requests wait for it or are refused until it answers");
        } else if failing > 0 {
            tracing::warn!(rules = total, failing, waited_ms, "cluster rules: Redis out of reach at start; their fallback decides until it answers");
        } else {
            tracing::info!(
                rules = total,
                waited_ms,
                "cluster rules: Redis reached, every rule on its global limit"
            );
        }
    }

    /// The strict rules of `resource`, in file order; None if it has none.
    pub(crate) fn strict_for(&self, resource: &str) -> Option<Arc<[StrictRule]>> {
        let strict = self.strict.load();
        if strict.is_empty() {
            return None;
        }
        strict.get(resource).cloned()
    }

    /// Every rule's state, in file order.
    pub(crate) fn states(&self) -> Vec<RuleState> {
        let running = lock(&self.running);
        running
            .iter()
            .map(|entry| {
                let rule = &entry.built_from.0;
                let (starting, fallback, returning, instances, (error, failures)) =
                    match &entry.check {
                        Check::Leased(lease) => (
                            lease.is_starting(),
                            lease.in_fallback(),
                            lease.keeps_to_share(),
                            lease.processes(),
                            (lease.last_error(), lease.failures()),
                        ),
                        Check::Strict(check) => {
                            let (starting, fallback, returning) = check.state();
                            let instances = Some(check.instances());
                            (starting, fallback, returning, instances, check.failure())
                        }
                    };
                RuleState {
                    id: rule.id.clone(),
                    resource: rule.resource.clone(),
                    kind: rule.kind.as_str(),
                    mode: rule.mode.as_str(),
                    starting,
                    fallback,
                    returning,
                    // Unknown before the first answer.
                    instances: instances.filter(|_| !starting),
                    error,
                    failures,
                }
            })
            .collect()
    }
}

/// A `qps` rule's window in Redis (None if it cannot be built: a checked file has none).
fn window(rule: &ClusterRuleConfig) -> Option<SharedWindow> {
    let (interval, buckets) = (rule.interval(), rule.buckets());
    SharedWindow::new(&rule.id, rule.limit, interval, buckets, Time::Redis).ok()
}

/// A `bucket` rule's bucket in Redis (likewise).
fn bucket(rule: &ClusterRuleConfig) -> Option<SharedBucket> {
    SharedBucket::new(&rule.id, rule.limit, rule.burst(), Time::Redis).ok()
}

/// A new lease for `rule` on `section`'s Redis, with the task that connects and refills it,
/// assuming the instances `known` (a changed rule's predecessor's) if more than the section's
/// `assumed_instances` until Redis answers. None if the rule cannot be built (a checked file
/// has no such rule).
fn start(rule: &ClusterRuleConfig, section: &ClusterConfig, known: Option<u64>) -> Option<Running> {
    let settings = LeaseSettings {
        max_batch: rule.max_batch,
        call_timeout: section.call_timeout,
        probe_every: section.probe_every,
        heartbeat_ttl: section.heartbeat_ttl,
        fallback: rule.fallback.into(),
        assumed_processes: section.assumed_instances.max(known.unwrap_or(0)),
        startup_wait: section.startup_wait,
        member: None,
    };
    let clock: Arc<dyn spillway::Clock> = Arc::new(spillway::SystemClock::new());
    let target = target(section)?;
    if rule.mode == ClusterMode::Strict {
        let (check, task) = StrictRule::start(rule, target, settings, clock)?;
        return Some(Running {
            built_from: (rule.clone(), section.clone()),
            check: Check::Strict(check),
            task,
        });
    }
    let id = rule.id.clone();
    let on_refill = move |outcome: Result<u64, &spillway_redis::Error>| {
        if let Err(err) = outcome {
            tracing::debug!(rule = %id, %err, "cluster rule: refill failed");
        }
    };
    // Each kind's lease, and a task driving it.
    macro_rules! run {
        ($lease:expr) => {{
            let lease = Arc::new($lease.ok()?);
            let driven = lease.clone();
            let task = tokio::spawn(async move {
                driven.connect_and_drive(target, on_refill).await;
            });
            let limit: Arc<dyn SharedLimit> = lease;
            (limit, task)
        }};
    }
    let (lease, task) = match rule.kind {
        ClusterKind::Qps => run!(LeasedWindow::with_settings(window(rule)?, clock, settings)),
        ClusterKind::Bucket => run!(LeasedBucket::with_settings(bucket(rule)?, clock, settings)),
        ClusterKind::Concurrency => {
            let member = spillway_redis::default_member(clock.as_ref());
            let shared = SharedConcurrency::new(
                &rule.id,
                rule.limit as u64,
                &member,
                section.heartbeat_ttl,
                Time::Redis,
            )
            .ok()?;
            run!(LeasedConcurrency::new(shared, clock, settings))
        }
    };
    Some(Running {
        built_from: (rule.clone(), section.clone()),
        check: Check::Leased(lease),
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checked::parse;

    fn config(rules: &str) -> Config {
        // A port nothing listens on: the leases stay in their fallback, which is all this needs.
        let text = format!("[cluster]\nredis = \"redis://127.0.0.1:1\"\n\n{rules}");
        parse(&text, "test.toml").unwrap()
    }

    const A: &str = "[[cluster_rule]]\nid = \"a\"\nresource = \"api\"\nlimit = 10\n";
    const B: &str = "[[cluster_rule]]\nid = \"b\"\nresource = \"api\"\nlimit = 20\n";

    fn leases(limits: &ClusterLimits) -> HashMap<String, Arc<dyn SharedLimit>> {
        let running = limits.running.lock().unwrap();
        running
            .iter()
            .filter_map(|entry| match &entry.check {
                Check::Leased(lease) => Some((entry.built_from.0.id.clone(), lease.clone())),
                Check::Strict(_) => None,
            })
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

#[cfg(test)]
mod strict_tests {
    use super::*;
    use crate::checked::parse;

    fn config(rules: &str) -> Config {
        // A port nothing listens on: the checks stay in their fallback, which is all this needs.
        let text = format!("[cluster]\nredis = \"redis://127.0.0.1:1\"\n\n{rules}");
        parse(&text, "test.toml").unwrap()
    }

    const STRICT: &str =
        "[[cluster_rule]]\nid = \"s\"\nresource = \"api\"\nmode = \"strict\"\nlimit = 10\n";
    const LEASED: &str = "[[cluster_rule]]\nid = \"l\"\nresource = \"api\"\nlimit = 10\n";

    #[tokio::test]
    async fn strict_rules_are_the_proxys_and_leased_ones_the_cores_across_reloads() {
        let limits = ClusterLimits::default();
        let core = limits.rules_for(&config(&format!("{STRICT}\n{LEASED}")));
        assert_eq!(core.len(), 1, "only the leased rule is in the pipeline");
        assert_eq!(core[0].id, "l");
        let strict = limits.strict_for("api").expect("the strict rule");
        assert_eq!(strict.len(), 1);
        assert!(limits.strict_for("other").is_none());
        let states = limits.states();
        let modes: Vec<_> = states.iter().map(|s| (s.id.as_str(), s.mode)).collect();
        assert_eq!(modes, [("s", "strict"), ("l", "leased")]);
        // A strict check is starting until Redis first answers (here, until it fails).
        assert!(states[0].starting || states[0].fallback);

        // The strict rule made leased: it leaves the proxy's list for the pipeline.
        let leased = STRICT.replace("mode = \"strict\"\n", "");
        let core = limits.rules_for(&config(&format!("{leased}\n{LEASED}")));
        assert_eq!(core.len(), 2);
        assert!(limits.strict_for("api").is_none());
        // No [cluster]: nothing.
        limits.rules_for(&parse("", "test.toml").unwrap());
        assert!(limits.states().is_empty() && limits.strict_for("api").is_none());
    }
}

/// A lock that a panic elsewhere did not make unusable (what it guards is replaced whole).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
