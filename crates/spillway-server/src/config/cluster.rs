//! `[cluster]` and `[[cluster_rule]]`: the Redis that cluster rules share, and the rules.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[cluster]`: the Redis the cluster rules share, and how they treat it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// One Redis: its URL, `redis://host:port[/db]` (or `rediss://` over TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<String>,
    /// Or a Redis Cluster: the URLs of some of its nodes (the others are found from them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Longest one call may take before it counts as a failure (default 100 ms).
    #[serde(default = "default_call_timeout", with = "humantime_serde")]
    pub call_timeout: Duration,
    /// While Redis fails, how often it is tried again (default 500 ms).
    #[serde(default = "default_probe_every", with = "humantime_serde")]
    pub probe_every: Duration,
    /// How long a heartbeat counts this instance as live (default 3 s).
    #[serde(default = "default_heartbeat_ttl", with = "humantime_serde")]
    pub heartbeat_ttl: Duration,
    /// The instances assumed live before a heartbeat has been read (default 1).
    #[serde(default = "default_assumed_instances")]
    pub assumed_instances: u64,
    /// Longest the proxy waits at start (and a request on a new rule) for a rule's first
    /// answer from Redis (default 1 s).
    #[serde(default = "default_startup_wait", with = "humantime_serde")]
    pub startup_wait: Duration,
}

fn default_call_timeout() -> Duration {
    Duration::from_millis(100)
}

fn default_probe_every() -> Duration {
    Duration::from_millis(500)
}

fn default_heartbeat_ttl() -> Duration {
    Duration::from_secs(3)
}

fn default_startup_wait() -> Duration {
    Duration::from_secs(1)
}

fn default_assumed_instances() -> u64 {
    1
}

fn default_max_batch() -> u64 {
    10
}

/// `[[cluster_rule]]`: a limit on a resource, shared by every instance with this rule id and
/// kept in Redis, checked from leased batches: a QPS limit (Sentinel's sliding window), a rate
/// (Guava's token bucket) or a concurrency limit.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterRuleConfig {
    /// Names the rule, and the limit in Redis: instances with the same id share it.
    pub id: String,
    /// The resource it limits.
    pub resource: String,
    /// What it limits (default `qps`).
    #[serde(default)]
    pub kind: ClusterKind,
    /// How it is checked (default `leased`).
    #[serde(default)]
    pub mode: ClusterMode,
    /// Across all the instances: passes a second (`qps`), permits a second (`bucket`), or
    /// requests in flight at once (`concurrency`, a whole number).
    pub limit: f64,
    /// `qps`: the window (default 1 s).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub interval: Option<Duration>,
    /// `qps`: its buckets (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<u32>,
    /// `bucket`: the most permits stored while unused, in seconds of the rate (default 1, as
    /// Guava's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<f64>,
    /// The largest batch an instance leases at once (default 10).
    #[serde(default = "default_max_batch")]
    pub max_batch: u64,
    /// What to admit while Redis fails (default `local_share`).
    #[serde(default)]
    pub fallback: FallbackPolicy,
}

impl ClusterRuleConfig {
    /// `qps`: the window (1 s unless set).
    pub fn interval(&self) -> Duration {
        self.interval.unwrap_or(Duration::from_secs(1))
    }

    /// `qps`: its buckets (2 unless set).
    pub fn buckets(&self) -> u32 {
        self.buckets.unwrap_or(2)
    }

    /// `bucket`: its burst in seconds (1 unless set, as Guava's).
    pub fn burst(&self) -> f64 {
        self.burst.unwrap_or(1.0)
    }
}

/// What a cluster rule limits.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ClusterKind {
    /// Passes a second over a sliding window (Sentinel's).
    #[default]
    Qps,
    /// A rate with bursts (Guava's smooth bursty `RateLimiter`).
    Bucket,
    /// Requests in flight at once.
    Concurrency,
}

impl ClusterKind {
    /// Its name in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Qps => "qps",
            Self::Bucket => "bucket",
            Self::Concurrency => "concurrency",
        }
    }
}

/// How a cluster rule is checked.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ClusterMode {
    /// From batches leased ahead of need: no Redis call on a request's path.
    #[default]
    Leased,
    /// One Redis call per request, awaited before the route's local rules: exact, a round
    /// trip each (`qps` and `bucket` rules).
    Strict,
}

impl ClusterMode {
    /// Its name in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leased => "leased",
            Self::Strict => "strict",
        }
    }
}

/// What a cluster rule admits while Redis fails.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum FallbackPolicy {
    /// The instance's fair share: the limit divided by the live instances.
    #[default]
    LocalShare,
    /// Everything.
    Open,
    /// Nothing.
    Closed,
}

impl From<FallbackPolicy> for spillway_redis::Fallback {
    fn from(policy: FallbackPolicy) -> Self {
        match policy {
            FallbackPolicy::LocalShare => Self::LocalShare,
            FallbackPolicy::Open => Self::Open,
            FallbackPolicy::Closed => Self::Closed,
        }
    }
}
