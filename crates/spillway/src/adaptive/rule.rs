//! An adaptive limit as a rule of the entry path: on one resource, or on all inbound traffic.

use super::error::AdaptiveError;
use super::{
    AdaptiveQueue, Aimd, AimdConfig, Bbr, BbrConfig, EnvoyGradient, EnvoyGradientConfig, Gradient2,
    Gradient2Config, LimitAlgorithm, Vegas, VegasConfig,
};
use crate::rule_error::RuleError;
use std::collections::HashSet;

/// The error of an adaptive rule that cannot be used (a [`RuleError`] of kind `"adaptive"`).
pub type AdaptiveRuleError = RuleError;

/// Which algorithm an [`AdaptiveRule`] runs, with its settings.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "type", rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum AdaptiveAlgorithm {
    /// [`Gradient2`].
    Gradient2(Gradient2Config),
    /// [`Vegas`].
    Vegas(VegasConfig),
    /// [`Aimd`].
    Aimd(AimdConfig),
    /// [`EnvoyGradient`].
    EnvoyGradient(EnvoyGradientConfig),
    /// [`Bbr`].
    Bbr(BbrConfig),
}

impl AdaptiveAlgorithm {
    /// The algorithm, built; its jitter (Vegas's probes, Envoy's minRTT schedule) drawn from
    /// `seed`, or at random without one.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] if its settings do not validate.
    pub fn build(&self, seed: Option<u64>) -> Result<Box<dyn LimitAlgorithm>, AdaptiveError> {
        Ok(match (self, seed) {
            (AdaptiveAlgorithm::Gradient2(config), _) => Box::new(Gradient2::new(*config)?),
            (AdaptiveAlgorithm::Vegas(config), Some(seed)) => {
                Box::new(Vegas::with_seed(*config, seed)?)
            }
            (AdaptiveAlgorithm::Vegas(config), None) => Box::new(Vegas::new(*config)?),
            (AdaptiveAlgorithm::Aimd(config), _) => Box::new(Aimd::new(*config)?),
            (AdaptiveAlgorithm::EnvoyGradient(config), Some(seed)) => {
                Box::new(EnvoyGradient::with_seed(*config, seed)?)
            }
            (AdaptiveAlgorithm::EnvoyGradient(config), None) => {
                Box::new(EnvoyGradient::new(*config)?)
            }
            (AdaptiveAlgorithm::Bbr(config), _) => Box::new(Bbr::new(*config)?),
        })
    }

    fn validate(&self) -> Result<(), AdaptiveError> {
        match self {
            AdaptiveAlgorithm::Gradient2(config) => config.validate(),
            AdaptiveAlgorithm::Vegas(config) => config.validate(),
            AdaptiveAlgorithm::Aimd(config) => config.validate(),
            AdaptiveAlgorithm::EnvoyGradient(config) => config.validate(),
            AdaptiveAlgorithm::Bbr(config) => config.validate(),
        }
    }
}

/// An adaptive concurrency limit checked on every entry of one resource, or of every inbound
/// entry (`resource: None`, like the system rule), with the other rules: after the flow rules,
/// before the breakers, all or nothing. A refusal is a
/// [`BlockError`](crate::BlockError) of kind [`BlockKind::Adaptive`](crate::BlockKind::Adaptive)
/// naming the rule, with the limit as threshold, the calls in flight as observed value, and no
/// retry-after hint (a place frees when a call ends, whenever that is). Each entry's exit gives
/// the algorithm its RTT.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
/// use spillway::{BlockKind, ManualClock, Spillway};
///
/// let spillway = Spillway::new_with_clock(ManualClock::new());
/// let aimd = AimdConfig { initial_limit: 1, min_limit: 1, ..Default::default() };
/// spillway.load_adaptive_rules(vec![AdaptiveRule::resource(
///     "search-adaptive",
///     "GET /search",
///     AdaptiveAlgorithm::Aimd(aimd),
/// )])?;
/// let first = spillway.entry("GET /search").enter()?;
/// let err = spillway.entry("GET /search").enter().unwrap_err();
/// assert_eq!((err.kind(), err.rule_id()), (BlockKind::Adaptive, Some("search-adaptive")));
/// assert_eq!((err.observed(), err.threshold()), (1.0, 1.0));
/// drop(first); // in time, the limit in use: AIMD grows to 2
/// assert_eq!(spillway.adaptive_state("search-adaptive").unwrap().limit, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
#[non_exhaustive]
pub struct AdaptiveRule {
    /// Unique id, named in errors and blocks.
    pub id: String,
    /// The resource it limits; `None` for every inbound entry, whatever its resource.
    #[cfg_attr(feature = "serde", serde(default))]
    pub resource: Option<String>,
    /// The algorithm and its settings.
    pub algorithm: AdaptiveAlgorithm,
    /// Where the algorithm's jitter comes from: a seed, for runs that must repeat exactly (a
    /// simulation, a test); `None` (the default) draws it at random, so that instances started
    /// together do not re-measure in step.
    #[cfg_attr(feature = "serde", serde(default))]
    pub seed: Option<u64>,
    /// A queue for callers that can wait briefly for a place while the limit is full (see
    /// [`AdaptiveQueue`]); `None` (the default) refuses them at once.
    #[cfg_attr(feature = "serde", serde(default))]
    pub queue: Option<AdaptiveQueue>,
}

impl AdaptiveRule {
    /// A rule on `resource`.
    pub fn resource(
        id: impl Into<String>,
        resource: impl Into<String>,
        algorithm: AdaptiveAlgorithm,
    ) -> Self {
        Self {
            id: id.into(),
            resource: Some(resource.into()),
            algorithm,
            seed: None,
            queue: None,
        }
    }

    /// The adaptive limit spillway recommends when the service's capacity is unknown, on all
    /// inbound traffic: Envoy's gradient controller with spillway's defaults, id `adaptive`.
    /// `docs/overload.md` says why, and where it falls short.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::adaptive::AdaptiveRule;
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// spillway.load_adaptive_rules(vec![AdaptiveRule::recommended()])?;
    /// // It starts by measuring the service's no-load latency at 3 calls in flight.
    /// let held: Vec<_> = (0..3).map(|_| spillway.entry("api").inbound().enter()).collect();
    /// assert!(held.iter().all(Result::is_ok));
    /// assert!(spillway.entry("api").inbound().enter().is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recommended() -> Self {
        Self::inbound(
            "adaptive",
            AdaptiveAlgorithm::EnvoyGradient(super::EnvoyGradientConfig::default()),
        )
    }

    /// A rule on all inbound traffic.
    pub fn inbound(id: impl Into<String>, algorithm: AdaptiveAlgorithm) -> Self {
        Self {
            id: id.into(),
            resource: None,
            algorithm,
            seed: None,
            queue: None,
        }
    }

    /// Draws the algorithm's jitter from `seed` (see [`seed`](Self::seed)).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Lets callers that can wait queue for a place (see [`AdaptiveQueue`]).
    pub fn with_queue(mut self, queue: AdaptiveQueue) -> Self {
        self.queue = Some(queue);
        self
    }
}

/// Checks a set of adaptive rules: ids non-empty and unique, at most one rule per resource and
/// one for all inbound traffic, and each algorithm's settings (the field named as the
/// algorithm's, for example `algorithm.min_limit`).
///
/// # Errors
///
/// An [`AdaptiveRuleError`] naming the first rule and field at fault.
pub fn validate_adaptive_rules(rules: &[AdaptiveRule]) -> Result<(), AdaptiveRuleError> {
    let mut ids = HashSet::new();
    let mut scopes = HashSet::new();
    for (index, rule) in rules.iter().enumerate() {
        let error =
            |field, problem: String| RuleError::new("adaptive", index, &rule.id, field, problem);
        if rule.id.is_empty() {
            return Err(error("id", "must not be empty".to_owned()));
        }
        if !ids.insert(rule.id.as_str()) {
            return Err(error("id", "is used by an earlier rule".to_owned()));
        }
        if rule.resource.as_deref() == Some("") {
            return Err(error("resource", "must not be empty".to_owned()));
        }
        if !scopes.insert(rule.resource.as_deref()) {
            let scope = match &rule.resource {
                Some(resource) => format!("resource `{resource}`"),
                None => "all inbound traffic".to_owned(),
            };
            return Err(error(
                "resource",
                format!("{scope} already has an adaptive rule"),
            ));
        }
        if let Err(err) = rule.algorithm.validate() {
            return Err(RuleError::new(
                "adaptive",
                index,
                &rule.id,
                algorithm_field(err.field()),
                err.problem(),
            ));
        }
        if let Some(Err(err)) = rule.queue.as_ref().map(AdaptiveQueue::validate) {
            return Err(RuleError::new(
                "adaptive",
                index,
                &rule.id,
                err.field(),
                err.problem(),
            ));
        }
    }
    Ok(())
}

/// `algorithm.<field>`, as a `'static` name.
fn algorithm_field(field: &'static str) -> &'static str {
    crate::intern::intern(&format!("algorithm.{field}"))
}

#[cfg(all(test, feature = "serde", not(spillway_loom)))]
mod serde_tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_rule_reads_from_json_with_defaults_and_round_trips() {
        let rule: AdaptiveRule = serde_json::from_str(
            r#"{"id": "api", "resource": "GET /api",
                "algorithm": {"type": "envoy_gradient", "min_rtt_interval": "30s"}}"#,
        )
        .unwrap();
        let expected = AdaptiveRule::resource(
            "api",
            "GET /api",
            AdaptiveAlgorithm::EnvoyGradient(EnvoyGradientConfig {
                min_rtt_interval: Duration::from_secs(30),
                ..EnvoyGradientConfig::default()
            }),
        );
        assert_eq!(rule, expected);
        let text = serde_json::to_string(&rule).unwrap();
        assert_eq!(serde_json::from_str::<AdaptiveRule>(&text).unwrap(), rule);

        let inbound: AdaptiveRule = serde_json::from_str(
            r#"{"id": "all", "algorithm": {"type": "gradient2", "min_limit": 1,
                "sampling": {"type": "window", "min_time": "100ms", "max_time": "100ms"}}}"#,
        )
        .unwrap();
        assert_eq!(inbound.resource, None);
        let AdaptiveAlgorithm::Gradient2(config) = inbound.algorithm else {
            panic!("gradient2");
        };
        assert_eq!(config.min_limit, 1);
        assert_eq!(config.initial_limit, 20, "Netflix's default");
        assert_eq!(
            config.sampling,
            crate::adaptive::Sampling::Window(crate::adaptive::WindowPolicy {
                min_time: Duration::from_millis(100),
                max_time: Duration::from_millis(100),
                ..Default::default()
            })
        );
    }

    #[test]
    fn unknown_fields_and_algorithms_are_errors() {
        let unknown = serde_json::from_str::<AdaptiveRule>(
            r#"{"id": "x", "algorithm": {"type": "aimd", "backof_ratio": 0.5}}"#,
        );
        assert!(unknown.unwrap_err().to_string().contains("backof_ratio"));
        let algorithm =
            serde_json::from_str::<AdaptiveRule>(r#"{"id": "x", "algorithm": {"type": "tcp"}}"#);
        assert!(algorithm.unwrap_err().to_string().contains("tcp"));
    }
}
