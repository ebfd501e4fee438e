//! A loaded set of system rules, merged into one threshold per check, and the check itself.

use super::{
    validate_system_rules, CpuStrategy, MinRtEstimate, SystemProbe, SystemRule, SystemRuleError,
};
use crate::intern::{intern_numbered, Interned};
use crate::stats::ResourceNode;
use std::fmt;

/// Which system check fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SystemCheck {
    /// Inbound pass QPS (observed: the QPS before this entry).
    Qps,
    /// Inbound calls in flight.
    Concurrency,
    /// Inbound average RT (observed and threshold in microseconds).
    AvgRt,
    /// The load signal, with the BBR check failing (observed: the load).
    Load,
    /// CPU usage, 0..1 (with the BBR check failing, under [`CpuStrategy::Bbr`]).
    Cpu,
}

impl SystemCheck {
    /// A short lowercase name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            SystemCheck::Qps => "qps",
            SystemCheck::Concurrency => "concurrency",
            SystemCheck::AvgRt => "avg_rt",
            SystemCheck::Load => "load",
            SystemCheck::Cpu => "cpu",
        }
    }
}

impl fmt::Display for SystemCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal by a system check: which check, the rule whose threshold it was, and the observed
/// value against that threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct SystemBlock {
    /// The check that fired.
    pub check: SystemCheck,
    /// The id of the rule that set the threshold.
    pub rule_id: &'static str,
    /// The value observed.
    pub observed: f64,
    /// The threshold.
    pub threshold: f64,
    /// The rule id's interned number, for the block error.
    pub(crate) rule_number: u32,
}

impl SystemBlock {
    pub(crate) fn new(check: SystemCheck, rule: Interned, observed: f64, threshold: f64) -> Self {
        Self {
            check,
            rule_id: rule.name,
            observed,
            threshold,
            rule_number: rule.number,
        }
    }
}

/// One merged threshold: the lowest any rule sets, with that rule.
#[derive(Debug, Clone, Copy)]
struct Threshold<T> {
    value: T,
    rule: Interned,
    min_rt: MinRtEstimate,
}

/// A validated set of system rules, merged as Sentinel merges them: each threshold is the lowest
/// any rule sets (ties: the first rule). Usable on its own against any [`ResourceNode`] and
/// [`SystemProbe`]; a [`Spillway`](crate::Spillway) checks its loaded set on every inbound entry.
///
/// # Examples
///
/// ```
/// use spillway::stats::{NodeConfig, ResourceNode};
/// use spillway::system::{ManualProbe, SystemCheck, SystemRule, SystemRules};
///
/// let rules = SystemRules::new(vec![
///     SystemRule::new("a").with_qps(100.0),
///     SystemRule::new("b").with_qps(2.0).with_highest_system_load(4.0),
/// ])?;
/// let node = ResourceNode::new(NodeConfig::default());
/// let probe = ManualProbe::new();
/// let now = 1_700_000_000_000_000_000;
/// node.add_pass(now, 2);
/// let block = rules.check(&node, &probe, now, 1).unwrap_err();
/// assert_eq!((block.check, block.rule_id), (SystemCheck::Qps, "b"));
/// assert_eq!((block.observed, block.threshold), (2.0, 2.0));
/// # Ok::<(), spillway::system::SystemRuleError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct SystemRules {
    loaded: Vec<SystemRule>,
    qps: Option<Threshold<f64>>,
    concurrency: Option<Threshold<u64>>,
    avg_rt_micros: Option<Threshold<u64>>,
    load: Option<Threshold<f64>>,
    cpu_block: Option<Threshold<f64>>,
    cpu_bbr: Option<Threshold<f64>>,
}

/// Keeps the lower of `slot` and a rule's threshold.
fn lower<T: PartialOrd + Copy>(
    slot: &mut Option<Threshold<T>>,
    value: Option<T>,
    rule: &SystemRule,
) {
    let Some(value) = value else {
        return;
    };
    if slot.is_none_or(|current| value < current.value) {
        *slot = Some(Threshold {
            value,
            rule: intern_numbered(&rule.id),
            min_rt: rule.min_rt,
        });
    }
}

impl SystemRules {
    /// Validates and merges `rules`.
    ///
    /// # Errors
    ///
    /// A [`SystemRuleError`] naming the first bad rule and field.
    pub fn new(rules: Vec<SystemRule>) -> Result<Self, SystemRuleError> {
        validate_system_rules(&rules)?;
        let mut set = Self::default();
        for rule in &rules {
            lower(&mut set.qps, rule.qps, rule);
            lower(&mut set.concurrency, rule.max_concurrency, rule);
            let avg_rt = rule
                .avg_rt
                .map(|rt| u64::try_from(rt.as_micros()).unwrap_or(u64::MAX));
            lower(&mut set.avg_rt_micros, avg_rt, rule);
            lower(&mut set.load, rule.highest_system_load, rule);
            match rule.cpu_strategy {
                CpuStrategy::Block => lower(&mut set.cpu_block, rule.highest_cpu_usage, rule),
                CpuStrategy::Bbr => lower(&mut set.cpu_bbr, rule.highest_cpu_usage, rule),
            }
        }
        set.loaded = rules;
        Ok(set)
    }

    /// The rules, exactly as given.
    pub fn rules(&self) -> &[SystemRule] {
        &self.loaded
    }

    /// Whether no rule is loaded.
    pub fn is_empty(&self) -> bool {
        self.loaded.is_empty()
    }

    /// Checks an inbound entry of `count` against `node` (the global inbound node) and `probe`,
    /// in Sentinel's order; see [`SystemRule`] for each check.
    ///
    /// This check only reads: its concurrency check compares the node's concurrency with the
    /// threshold, as Sentinel does. A [`Spillway`](crate::Spillway) makes that check exact
    /// instead: it takes the entry's place in the same step as the check, after the other checks.
    ///
    /// # Errors
    ///
    /// The first check that fires, as a [`SystemBlock`].
    pub fn check(
        &self,
        node: &ResourceNode,
        probe: &dyn SystemProbe,
        now: u64,
        count: u32,
    ) -> Result<(), SystemBlock> {
        self.check_reads(node, probe, now, count, true)
    }

    /// The concurrency threshold, with its rule, if one is set.
    pub(crate) fn max_concurrency(&self) -> Option<(u64, Interned)> {
        self.concurrency.map(|t| (t.value, t.rule))
    }

    /// [`check`](Self::check), with or without its read of the concurrency.
    pub(crate) fn check_reads(
        &self,
        node: &ResourceNode,
        probe: &dyn SystemProbe,
        now: u64,
        count: u32,
        read_concurrency: bool,
    ) -> Result<(), SystemBlock> {
        let block = SystemBlock::new;
        if let Some(t) = self.qps {
            let qps = node.pass_qps(now);
            if qps + f64::from(count) > t.value {
                return Err(block(SystemCheck::Qps, t.rule, qps, t.value));
            }
        }
        let concurrency = node.concurrency();
        if let Some(t) = self.concurrency.filter(|_| read_concurrency) {
            if concurrency > i64::try_from(t.value).unwrap_or(i64::MAX) {
                return Err(block(
                    SystemCheck::Concurrency,
                    t.rule,
                    concurrency as f64,
                    t.value as f64,
                ));
            }
        }
        if let Some(t) = self.avg_rt_micros {
            let rt = node.avg_rt_micros(now);
            if rt > t.value as f64 {
                return Err(block(SystemCheck::AvgRt, t.rule, rt, t.value as f64));
            }
        }
        if let Some(t) = self.load {
            let load = probe.load();
            if load > t.value && bbr_blocks(node, now, concurrency, t.min_rt) {
                return Err(block(SystemCheck::Load, t.rule, load, t.value));
            }
        }
        if self.cpu_block.is_some() || self.cpu_bbr.is_some() {
            let cpu = probe.cpu_usage();
            if let Some(t) = self.cpu_block {
                if cpu > t.value {
                    return Err(block(SystemCheck::Cpu, t.rule, cpu, t.value));
                }
            }
            if let Some(t) = self.cpu_bbr {
                if cpu > t.value && bbr_blocks(node, now, concurrency, t.min_rt) {
                    return Err(block(SystemCheck::Cpu, t.rule, cpu, t.value));
                }
            }
        }
        Ok(())
    }
}

/// Sentinel's `checkBbr`, failed: more than one call in flight, and more than the pipe holds at
/// its best (see [`bbr_limit`]).
fn bbr_blocks(node: &ResourceNode, now: u64, concurrency: i64, estimate: MinRtEstimate) -> bool {
    if concurrency <= 1 {
        return false;
    }
    concurrency as f64 > bbr_limit(node, now, estimate)
}

/// The BBR check's limit on inbound calls in flight: what the pipe holds at its best,
/// `max_success_qps x min_rt` (min RT in seconds, estimated as `estimate` says), read from the
/// global inbound `node` at `now`. The check refuses an entry when more than one call and more
/// than this limit are in flight. Read it for metrics and dashboards.
///
/// # Examples
///
/// ```
/// use spillway::stats::{NodeConfig, ResourceNode};
/// use spillway::system::{bbr_limit, MinRtEstimate};
///
/// let node = ResourceNode::new(NodeConfig::default());
/// let now = 1_700_000_000_000_000_000;
/// for _ in 0..100 {
///     node.add_completion(now, 20_000, 1, false); // 100 calls of 20 ms
/// }
/// // 200 a second at most (100 in a 500 ms bucket), 20 ms at least: 4 in flight.
/// assert_eq!(bbr_limit(&node, now, MinRtEstimate::Exact), 4.0);
/// ```
pub fn bbr_limit(node: &ResourceNode, now: u64, estimate: MinRtEstimate) -> f64 {
    let min_rt_micros = match estimate {
        MinRtEstimate::Exact => node.min_rt_micros(now),
        MinRtEstimate::BucketAverage { window } => {
            let minute = node.minute_window();
            let bucket = u128::from(minute.bucket_nanos().max(1));
            let buckets = window.as_nanos().div_ceil(bucket);
            let buckets = usize::try_from(buckets).unwrap_or(usize::MAX);
            minute
                .min_bucket_avg_rt_micros(now, buckets)
                .unwrap_or_else(|| minute.max_rt_micros())
        }
    };
    node.max_success_qps(now) * min_rt_micros as f64 / 1e6
}
