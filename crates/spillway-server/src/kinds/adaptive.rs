//! Adaptive concurrency limits (`[[adaptive]]`).

use super::{core_fault, given, rules_of, Change, CoreRules, Problem, RuleKind};
use crate::config::Config;
use crate::proxy::Proxy;
use serde_json::{json, Value};
use spillway::adaptive::AdaptiveRule;

/// Adaptive rules.
pub(super) struct Adaptive;

impl RuleKind for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn read(&self, proxy: &Proxy) -> Value {
        json!(proxy.spillway().adaptive_rules())
    }

    /// Each adaptive rule's limiter now: limit, calls in flight, RT estimates (milliseconds),
    /// the reason of the last change, samples, updates, refusals, and its queue (waiting,
    /// timeouts).
    fn states(&self, proxy: &Proxy) -> Option<Value> {
        let spillway = proxy.spillway();
        let millis = |rtt: Option<std::time::Duration>| rtt.map(|rtt| rtt.as_secs_f64() * 1e3);
        let states: Vec<Value> = spillway
            .adaptive_rules()
            .iter()
            .filter_map(|rule| {
                let state = spillway.adaptive_state(&rule.id)?;
                Some(json!({
                    "rule": rule.id,
                    "resource": rule.resource,
                    "limit": state.limit,
                    "in_flight": state.in_flight,
                    "baseline_rtt_ms": millis(state.estimates.baseline),
                    "latest_rtt_ms": millis(state.estimates.latest),
                    "last_change": state.last_change.as_str(),
                    "samples": state.samples,
                    "updates": state.updates,
                    "refusals": state.refusals,
                    "waiting": state.waiting,
                    "queue_timeouts": state.queue_timeouts,
                }))
            })
            .collect();
        Some(Value::from(states))
    }

    fn configured(&self, config: &Config) -> Box<dyn Change> {
        Box::new(CoreRules {
            rules: given(&config.adaptive),
            load: |spillway, rules| spillway.load_adaptive_rules(rules),
        })
    }

    fn parse(&self, rules: Value) -> Result<Box<dyn Change>, Problem> {
        let rules: Vec<AdaptiveRule> = rules_of(rules)?;
        spillway::adaptive::validate_adaptive_rules(&rules).map_err(core_fault)?;
        // Rules that stay the same keep their limiters (limit, RT estimates, queue).
        Ok(Box::new(CoreRules {
            rules,
            load: |spillway, rules| spillway.load_adaptive_rules(rules),
        }))
    }
}
