//! `[[keyed]]`: per-key rules as the file writes them, with where each request's key comes from.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[[keyed]]`: a limit per key of a resource (spillway's `KeyedRule`, Sentinel's
/// `ParamFlowRule`), the key read from each request.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KeyedConfig {
    /// Unique among the per-key rules.
    pub id: String,
    /// The resource it limits.
    pub resource: String,
    /// Where each request's key comes from: `peer_ip` (the client's address, through
    /// `listener.trusted_proxies`), `header:NAME`, `query:NAME`, or `path:NAME` (a `{NAME}`
    /// segment of the route's path).
    pub key: String,
    /// A request without the key: `pass` (not limited by this rule; the default, as Sentinel),
    /// `refuse` (400), or `shared` (all such requests share one key's limit).
    #[serde(default)]
    pub on_missing: OnMissing,
    /// `qps` (default: calls per `duration`) or `concurrency` (in flight) per key.
    #[serde(default)]
    pub grade: spillway::flow::Grade,
    /// The limit per key.
    pub count: f64,
    /// `{ type = "reject" }` (default) or `{ type = "throttle", max_queueing_time = "100ms" }`.
    #[serde(default)]
    pub behavior: spillway::keyed::KeyedBehavior,
    /// Calls beyond `count` a key may make from a full bucket (reject only).
    #[serde(default)]
    pub burst: u64,
    /// The period `count` is per (whole seconds; default 1 s).
    #[serde(default = "default_keyed_duration", with = "humantime_serde")]
    pub duration: Duration,
    /// Keys with limits of their own: `[{ key = "vip", count = 100 }]`.
    #[serde(default)]
    pub exceptions: Vec<spillway::keyed::KeyException>,
    /// Keys with exact state at most (default 4,096; see docs/keyed.md for the memory).
    #[serde(default = "default_keyed_capacity")]
    pub capacity: usize,
}

fn default_keyed_duration() -> Duration {
    Duration::from_secs(1)
}

fn default_keyed_capacity() -> usize {
    spillway::keyed::DEFAULT_CAPACITY
}

impl KeyedConfig {
    /// The core rule, reading the entry's key at `param`.
    pub fn rule(&self, param: usize) -> spillway::keyed::KeyedRule {
        let mut rule = spillway::keyed::KeyedRule::qps(&self.id, &self.resource, self.count)
            .with_param(param)
            .with_behavior(self.behavior)
            .with_burst(self.burst)
            .with_duration(self.duration)
            .with_capacity(self.capacity);
        rule.grade = self.grade;
        rule.exceptions.clone_from(&self.exceptions);
        if self.key.eq_ignore_ascii_case("header:host") {
            // Named as requests' hosts are read, so that `API.Example.com` names the host
            // `api.example.com` is keyed as.
            for exception in &mut rule.exceptions {
                exception.key = spillway_tower::keys::host_key(&exception.key);
            }
        }
        rule
    }
}

/// What a per-key rule does with a request that lacks its key.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnMissing {
    /// Not limited by the rule.
    #[default]
    Pass,
    /// Refused with 400, naming where the key was expected.
    Refuse,
    /// Counted under one key shared by every request without one.
    Shared,
}
