//! The protections the lab compares, each built from spillway's public rules.

use crate::params::{LabError, LabParams};
use spillway::adaptive::{
    AdaptiveAlgorithm, AdaptiveRule, AimdConfig, Gradient2Config, RttEstimates, VegasConfig,
};
use spillway::flow::FlowRule;
use spillway::system::{bbr_limit, ManualProbe, MinRtEstimate, SystemRule};
use spillway::{ManualClock, Resource, Spillway};
use std::fmt;
use std::time::Duration;

/// The resource every simulated request enters.
pub const RESOURCE: &str = "GET /work";

/// Sentinel's documented starting point for `highestSystemLoad`: 2.5 per CPU core.
pub const SENTINEL_LOAD_PER_CORE: f64 = 2.5;

/// The id of an adaptive strategy's rule.
pub(crate) const ADAPTIVE_RULE: &str = "adaptive";

/// How far back [`Strategy::BbrBucketAverage`] looks for its calmest second.
const BUCKET_AVERAGE_WINDOW: Duration = Duration::from_secs(10);

/// A protection in front of the simulated service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Strategy {
    /// Every request is admitted.
    None,
    /// A QPS flow rule (reject beyond) at the service's capacity.
    StaticQps,
    /// A concurrency flow rule ([`LabParams::static_limit`]: by default twice the workers, the
    /// workers' calls plus as many queued).
    StaticConcurrency,
    /// Sentinel's system rule as Sentinel ships it: the BBR check
    /// (`in flight > max_success_qps x min_rt`), switched on once load1 passes 2.5 per core.
    /// Load1 is Linux's: an exponential average of the runnable threads (every request in the
    /// service is one), updated every 5 s, read once a second.
    SentinelSystem,
    /// The same BBR check with no load gate: checked on every inbound entry.
    Bbr,
    /// BBR with no load gate and spillway's sturdier minimum RT
    /// ([`MinRtEstimate::BucketAverage`] over 10 s: the calmest second's mean RT) in place of
    /// Sentinel's fastest single call.
    BbrBucketAverage,
    /// An adaptive concurrency limit (a rule on all inbound traffic): Netflix's Gradient2 with
    /// its defaults but a floor of 1 (Netflix's 20 is above a small service's concurrency).
    Gradient2,
    /// An adaptive concurrency limit, Netflix's Vegas with its defaults.
    Vegas,
    /// An adaptive concurrency limit, AIMD with Netflix's defaults but a floor of 1 and the
    /// clients' timeout: a call slower than that counts as a drop.
    Aimd,
    /// An adaptive concurrency limit, Envoy's gradient controller with its defaults.
    EnvoyGradient,
    /// An adaptive concurrency limit, spillway's probing BBR ([`spillway::adaptive::Bbr`])
    /// with its defaults: the BBR check's `max rate x RT`, with a robust RT and BBR's gain
    /// cycle.
    BbrProbe,
    /// The recommended adaptive limit (Envoy's gradient controller) with the parameters' queue
    /// (else [`AdaptiveQueue::default`](spillway::adaptive::AdaptiveQueue): 100 places, 100 ms,
    /// oldest first) that ignores what requests claim: spillway before criticality.
    NoClasses,
    /// Netflix's partitioned limiter with fixed shares ([`Strategy::split_shares`]) on the
    /// recommended adaptive limit, no queue: below the limit any request is admitted; at it, a
    /// request is admitted while its group holds fewer than `max(1, ceil(limit x share))`
    /// places, over the limit. (Netflix's limiter gives the algorithm those calls' samples too;
    /// the lab's do not reach it.)
    StaticSplit,
    /// The recommended adaptive limit with the same queue, reading each request's criticality,
    /// tenant and deadline: the most critical first, tenants in turn, deadlines kept.
    Classes,
}

impl Strategy {
    /// Every strategy, in the order the tables list them.
    pub const ALL: [Strategy; 11] = [
        Strategy::None,
        Strategy::StaticQps,
        Strategy::StaticConcurrency,
        Strategy::SentinelSystem,
        Strategy::Bbr,
        Strategy::BbrBucketAverage,
        Strategy::BbrProbe,
        Strategy::Gradient2,
        Strategy::Vegas,
        Strategy::Aimd,
        Strategy::EnvoyGradient,
    ];

    /// The adaptive concurrency limits, in the order the tables list them: the strategies
    /// that need no capacity number and that the shape matrix compares.
    pub const ADAPTIVE: [Strategy; 5] = [
        Strategy::BbrProbe,
        Strategy::Gradient2,
        Strategy::Vegas,
        Strategy::Aimd,
        Strategy::EnvoyGradient,
    ];

    /// The strategies the scenarios with claims compare ([`Mix`](crate::mix::Mix)).
    pub const CLASSES: [Strategy; 3] = [
        Strategy::NoClasses,
        Strategy::StaticSplit,
        Strategy::Classes,
    ];

    /// The fixed share of the limit each group of `mix` keeps under [`Strategy::StaticSplit`],
    /// in [`Mix::shares`](crate::mix::Mix::shares)' order: by class 0.5 (critical plus), 0.4
    /// (critical), 0.1 (sheddable); a tenth to each tenant; the whole to one group.
    pub fn split_shares(mix: crate::mix::Mix) -> Vec<f64> {
        match mix {
            crate::mix::Mix::Criticality => vec![0.5, 0.4, 0.1],
            crate::mix::Mix::NoisyTenant => {
                vec![1.0 / f64::from(crate::mix::NOISY_TENANTS); crate::mix::NOISY_TENANTS.into()]
            }
            crate::mix::Mix::Deadlines => vec![1.0],
        }
    }

    /// Whether the `spillway` binary's configuration file can express this strategy (the
    /// loopback lab runs only those): every one but the static split.
    pub fn in_binary(&self) -> bool {
        *self != Strategy::StaticSplit
    }

    /// Whether this is an adaptive concurrency limit ([`spillway::adaptive`]).
    pub fn is_adaptive(&self) -> bool {
        matches!(
            self,
            Strategy::Gradient2
                | Strategy::Vegas
                | Strategy::Aimd
                | Strategy::EnvoyGradient
                | Strategy::BbrProbe
                | Strategy::NoClasses
                | Strategy::StaticSplit
                | Strategy::Classes
        )
    }

    /// This strategy's adaptive rule (on all inbound traffic) for `params`, if it is one. Its
    /// jitter is seeded, so that runs repeat exactly.
    pub fn adaptive_rule(&self, params: &LabParams) -> Option<AdaptiveRule> {
        let algorithm = match self {
            Strategy::Gradient2 => AdaptiveAlgorithm::Gradient2(Gradient2Config {
                min_limit: 1,
                ..Gradient2Config::default()
            }),
            Strategy::Vegas => AdaptiveAlgorithm::Vegas(VegasConfig::default()),
            Strategy::Aimd => AdaptiveAlgorithm::Aimd(AimdConfig {
                min_limit: 1,
                // A call slower than its client's timeout is a drop.
                timeout: params.client_timeout,
                ..AimdConfig::default()
            }),
            Strategy::EnvoyGradient => AdaptiveAlgorithm::EnvoyGradient(params.envoy),
            Strategy::BbrProbe => AdaptiveAlgorithm::Bbr(params.bbr),
            Strategy::NoClasses | Strategy::Classes => {
                let algorithm = recommended(params);
                let rule = AdaptiveRule::inbound(ADAPTIVE_RULE, algorithm).with_seed(1);
                return Some(rule.with_queue(params.adaptive_queue.unwrap_or_default()));
            }
            Strategy::StaticSplit => {
                let algorithm = recommended(params);
                return Some(AdaptiveRule::inbound(ADAPTIVE_RULE, algorithm).with_seed(1));
            }
            _ => return None,
        };
        let rule = AdaptiveRule::inbound(ADAPTIVE_RULE, algorithm).with_seed(1);
        Some(match params.adaptive_queue {
            Some(queue) => rule.with_queue(queue),
            None => rule,
        })
    }

    /// The name in tables and JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::StaticQps => "static_qps",
            Strategy::StaticConcurrency => "static_concurrency",
            Strategy::SentinelSystem => "sentinel_system",
            Strategy::Bbr => "bbr",
            Strategy::BbrBucketAverage => "bbr_bucket_average",
            Strategy::Gradient2 => "gradient2",
            Strategy::Vegas => "vegas",
            Strategy::Aimd => "aimd",
            Strategy::EnvoyGradient => "envoy_gradient",
            Strategy::BbrProbe => "bbr_probe",
            Strategy::NoClasses => "no_classes",
            Strategy::StaticSplit => "static_split",
            Strategy::Classes => "classes",
        }
    }

    /// Parses a [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        (Self::ALL.into_iter().chain(Self::CLASSES)).find(|s| s.name() == name)
    }

    /// What it is, with its settings for `params`, in a few words.
    pub fn describe(&self, params: &LabParams) -> String {
        match self {
            Strategy::None => "no protection".into(),
            Strategy::StaticQps => format!("QPS flow rule at capacity ({})", params.capacity()),
            Strategy::StaticConcurrency => match params.static_concurrency_limit {
                None => format!(
                    "concurrency flow rule at 2 x workers ({})",
                    params.static_limit()
                ),
                Some(limit) => format!("concurrency flow rule at {limit}"),
            },
            Strategy::SentinelSystem => format!(
                "system rule: BBR once load1 > {} (2.5 per core)",
                SENTINEL_LOAD_PER_CORE * f64::from(params.workers)
            ),
            Strategy::Bbr => "system rule: BBR on every entry (no load gate)".into(),
            Strategy::Gradient2 => "adaptive: Netflix Gradient2, floor 1".into(),
            Strategy::Vegas => "adaptive: Netflix Vegas".into(),
            Strategy::Aimd => format!(
                "adaptive: AIMD, floor 1, calls over the client timeout ({:?}) as drops",
                params.client_timeout
            ),
            Strategy::EnvoyGradient => "adaptive: Envoy's gradient controller".into(),
            Strategy::BbrProbe => {
                "adaptive: BBR with a robust RT (calmest round's mean) and BBR's gain cycle".into()
            }
            Strategy::BbrBucketAverage => {
                "system rule: BBR on every entry, min RT as the calmest second's mean over 10 s"
                    .into()
            }
            Strategy::NoClasses => {
                "adaptive: Envoy's gradient controller and a queue, claims ignored".into()
            }
            Strategy::StaticSplit => {
                "adaptive: Envoy's gradient controller split in fixed shares (Netflix's partitions)"
                    .into()
            }
            Strategy::Classes => {
                "adaptive: Envoy's gradient controller and a queue by criticality, tenant and \
                 deadline"
                    .into()
            }
        }
    }

    /// The concurrency this strategy admits now, where it has one: the static concurrency limit,
    /// or the BBR check's limit ([`bbr_limit`]) while BBR is checked (for Sentinel's system rule,
    /// while its load gate is open).
    pub fn admitted_limit(
        &self,
        params: &LabParams,
        spillway: &Spillway,
        gate_open: bool,
    ) -> Option<f64> {
        let bbr = |estimate| {
            let now = spillway.clock().now_nanos();
            bbr_limit(spillway.inbound_node(), now, estimate)
        };
        match self {
            Strategy::StaticConcurrency => Some(f64::from(params.static_limit())),
            Strategy::Bbr => Some(bbr(MinRtEstimate::Exact)),
            Strategy::BbrBucketAverage => Some(bbr(MinRtEstimate::BucketAverage {
                window: BUCKET_AVERAGE_WINDOW,
            })),
            Strategy::SentinelSystem => gate_open.then(|| bbr(MinRtEstimate::Exact)),
            Strategy::None | Strategy::StaticQps => None,
            _ if self.is_adaptive() => spillway
                .adaptive_state(ADAPTIVE_RULE)
                .map(|state| f64::from(state.limit)),
            _ => None,
        }
    }

    /// What this strategy's adaptive limit believes about latency now (its baseline and latest
    /// RTT), if it is an adaptive limit: the default (nothing measured) otherwise.
    pub fn rtt_estimates(&self, spillway: &Spillway) -> RttEstimates {
        if !self.is_adaptive() {
            return RttEstimates::default();
        }
        spillway
            .adaptive_state(ADAPTIVE_RULE)
            .map(|state| state.estimates)
            .unwrap_or_default()
    }

    /// Builds the protection on `clock`.
    ///
    /// # Errors
    ///
    /// If spillway refuses the rules for these parameters.
    pub(crate) fn build(
        &self,
        params: &LabParams,
        clock: &ManualClock,
    ) -> Result<Protection, LabError> {
        let probe = ManualProbe::new();
        let spillway = Spillway::builder()
            .clock(clock.clone())
            .system_probe(probe.clone())
            .build();
        let workers = f64::from(params.workers);
        let loaded = match self {
            Strategy::None => Ok(()),
            Strategy::StaticQps => spillway
                .load_flow_rules(vec![FlowRule::qps(
                    "capacity-qps",
                    RESOURCE,
                    params.capacity(),
                )])
                .map_err(|e| e.to_string()),
            Strategy::StaticConcurrency => spillway
                .load_flow_rules(vec![FlowRule::in_flight(RESOURCE, params.static_limit())
                    .with_id("static-concurrency")])
                .map_err(|e| e.to_string()),
            Strategy::SentinelSystem => spillway
                .load_system_rules(vec![SystemRule::new("sentinel-load")
                    .with_highest_system_load(SENTINEL_LOAD_PER_CORE * workers)])
                .map_err(|e| e.to_string()),
            Strategy::Bbr | Strategy::BbrBucketAverage => {
                // No gate: any load above 0 switches BBR on, and the probe always reads 1.
                probe.set_load(1.0);
                let rule = SystemRule::new("bbr").with_highest_system_load(0.0);
                let rule = match self {
                    Strategy::BbrBucketAverage => rule.with_min_rt(MinRtEstimate::BucketAverage {
                        window: BUCKET_AVERAGE_WINDOW,
                    }),
                    _ => rule,
                };
                spillway
                    .load_system_rules(vec![rule])
                    .map_err(|e| e.to_string())
            }
            // The adaptive strategies.
            _ => spillway
                .load_adaptive_rules(self.adaptive_rule(params).into_iter().collect())
                .map_err(|e| e.to_string()),
        };
        loaded.map_err(|err| LabError::new("strategy", err))?;
        let resource = spillway
            .resource(RESOURCE)
            .map_err(|err| LabError::new("strategy", err.to_string()))?;
        Ok(Protection {
            reads_load: *self == Strategy::SentinelSystem,
            spillway,
            resource,
            probe,
        })
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A built protection: the instance, its resource and the probe the simulation feeds.
#[derive(Debug)]
pub(crate) struct Protection {
    pub(crate) spillway: Spillway,
    pub(crate) resource: Resource,
    pub(crate) probe: ManualProbe,
    /// Whether the probe's load is the simulated load1 (else it is left as built).
    pub(crate) reads_load: bool,
}

/// The recommended rule's algorithm (Envoy's gradient controller), with `params`'s settings.
fn recommended(params: &LabParams) -> AdaptiveAlgorithm {
    match AdaptiveRule::recommended().algorithm {
        AdaptiveAlgorithm::EnvoyGradient(_) => AdaptiveAlgorithm::EnvoyGradient(params.envoy),
        other => other,
    }
}
