//! The system rule: thresholds on the whole service's inbound traffic and on the machine.

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How the minimum response time of the BBR check is estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum MinRtEstimate {
    /// Sentinel's: the smallest single response time in the second window (two 500 ms buckets
    /// by default), in microseconds. Reacts at once, when RT drops, but one lucky call (a cache
    /// hit, an error returned early) sets it, so the BBR limit it gives can be far too low.
    #[default]
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::no_fields::deserialize")
    )]
    Exact,
    /// The smallest *bucket average* over the last `window` of the minute window (one-second
    /// buckets): the calmest second's mean RT. One fast call cannot drag it down, and it
    /// remembers the uncongested RT for `window` while queues build. Use it when call costs vary
    /// widely or the service has fast error paths.
    BucketAverage {
        /// How far back to look: at least one bucket, at most the minute window.
        #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
        window: Duration,
    },
}

/// What a CPU usage over `highest_cpu_usage` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum CpuStrategy {
    /// Sentinel's: block every inbound entry while CPU usage is over the threshold.
    #[default]
    Block,
    /// Use high CPU as the trigger of the BBR check (as sentinel-golang and kratos do): block
    /// only entries beyond `max_success_qps x min_rt` while CPU usage is over the threshold.
    Bbr,
}

/// A system rule: Sentinel's `SystemRule`, adaptive protection of the whole service.
///
/// It applies to inbound entries only, against the global inbound node (every inbound entry of
/// the [`Spillway`](crate::Spillway)), before any flow rule. Each threshold is optional; unset
/// means off. When several rules are loaded, each threshold is the lowest any rule sets, as in
/// Sentinel.
///
/// The checks run in Sentinel's order, and the first that fires blocks:
///
/// 1. `qps`: inbound pass QPS + the entry's count `>` `qps`;
/// 2. `avg_rt`: inbound average RT `>` `avg_rt` (compared in microseconds; Sentinel uses ms);
/// 3. `highest_system_load`: the probe's load `>` the threshold **and** the BBR check fails:
///    `concurrency > 1 && concurrency > max_success_qps x min_rt` (min RT in seconds, estimated
///    as [`min_rt`](Self::min_rt) says);
/// 4. `highest_cpu_usage`: the probe's CPU usage (0..1) `>` the threshold, blocking outright or
///    through the BBR check as [`cpu_strategy`](Self::cpu_strategy) says;
/// 5. `max_concurrency`: at most this many inbound entries in flight, exactly. Sentinel checks
///    `curThreadNum > maxThread` second, before the entry is counted, so it lets `max + 1` in
///    (more when threads race); spillway checks it last and takes the entry's place in the same
///    atomic step, so it never lets more than `max` in. (Entries admitted before the rule was
///    loaded hold no place.)
///
/// # Examples
///
/// ```
/// use spillway::system::{CpuStrategy, SystemRule};
/// use std::time::Duration;
///
/// let rule = SystemRule::new("protect")
///     .with_highest_cpu_usage(0.8)
///     .with_cpu_strategy(CpuStrategy::Bbr)
///     .with_avg_rt(Duration::from_millis(200));
/// assert_eq!(rule.highest_cpu_usage, Some(0.8));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
#[non_exhaustive]
pub struct SystemRule {
    /// Unique id, named in errors and blocks.
    pub id: String,
    /// Most inbound passes per second.
    #[cfg_attr(feature = "serde", serde(default))]
    pub qps: Option<f64>,
    /// Most inbound calls in flight (Sentinel's `maxThread`).
    #[cfg_attr(feature = "serde", serde(default))]
    pub max_concurrency: Option<u64>,
    /// Highest inbound average response time.
    #[cfg_attr(feature = "serde", serde(default, with = "humantime_serde::option"))]
    pub avg_rt: Option<Duration>,
    /// The load above which the BBR check runs (see [`SystemProbe::load`](super::SystemProbe::load)).
    #[cfg_attr(feature = "serde", serde(default))]
    pub highest_system_load: Option<f64>,
    /// The CPU usage (0..1) above which entries are blocked, or checked by BBR.
    #[cfg_attr(feature = "serde", serde(default))]
    pub highest_cpu_usage: Option<f64>,
    /// What high CPU usage does (default: block, as Sentinel).
    #[cfg_attr(feature = "serde", serde(default))]
    pub cpu_strategy: CpuStrategy,
    /// How the BBR check estimates the minimum RT (default: Sentinel's exact minimum).
    #[cfg_attr(feature = "serde", serde(default))]
    pub min_rt: MinRtEstimate,
}

impl SystemRule {
    /// A rule with every threshold off.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            qps: None,
            max_concurrency: None,
            avg_rt: None,
            highest_system_load: None,
            highest_cpu_usage: None,
            cpu_strategy: CpuStrategy::Block,
            min_rt: MinRtEstimate::Exact,
        }
    }

    /// Sets the inbound QPS threshold.
    pub fn with_qps(mut self, qps: f64) -> Self {
        self.qps = Some(qps);
        self
    }

    /// Sets the inbound concurrency threshold.
    pub fn with_max_concurrency(mut self, max: u64) -> Self {
        self.max_concurrency = Some(max);
        self
    }

    /// Sets the inbound average RT threshold.
    pub fn with_avg_rt(mut self, avg_rt: Duration) -> Self {
        self.avg_rt = Some(avg_rt);
        self
    }

    /// Sets the load that triggers the BBR check.
    pub fn with_highest_system_load(mut self, load: f64) -> Self {
        self.highest_system_load = Some(load);
        self
    }

    /// Sets the CPU usage threshold (0..1).
    pub fn with_highest_cpu_usage(mut self, usage: f64) -> Self {
        self.highest_cpu_usage = Some(usage);
        self
    }

    /// Sets what high CPU usage does.
    pub fn with_cpu_strategy(mut self, strategy: CpuStrategy) -> Self {
        self.cpu_strategy = strategy;
        self
    }

    /// Sets how the BBR check estimates the minimum RT.
    pub fn with_min_rt(mut self, estimate: MinRtEstimate) -> Self {
        self.min_rt = estimate;
        self
    }
}
