//! Circuit breakers (`[[breaker]]`): Sentinel's degrade rules.

use super::{core_fault, given, rules_of, Change, CoreRules, Problem, RuleKind};
use crate::config::Config;
use crate::proxy::Proxy;
use serde_json::{json, Value};
use spillway::breaker::BreakerRule;

/// Circuit breaker rules.
pub(super) struct Breaker;

impl RuleKind for Breaker {
    fn name(&self) -> &'static str {
        "breaker"
    }

    /// `breakers`: the key the status has had since it began (the dashboard reads it).
    fn states_key(&self) -> &'static str {
        "breakers"
    }

    /// Each breaker's rule, resource and state (`closed`, `open`, `half_open`).
    fn states(&self, proxy: &Proxy) -> Option<Value> {
        let spillway = proxy.spillway();
        let states: Vec<Value> = spillway
            .breaker_rules()
            .iter()
            .map(|rule| {
                let state = spillway.breaker_state(&rule.id).map(|s| s.as_str());
                json!({ "rule": rule.id, "resource": rule.resource, "state": state })
            })
            .collect();
        Some(Value::from(states))
    }

    fn read(&self, proxy: &Proxy) -> Value {
        json!(proxy.spillway().breaker_rules())
    }

    fn configured(&self, config: &Config) -> Box<dyn Change> {
        Box::new(CoreRules {
            rules: given(&config.breakers),
            load: |spillway, rules| spillway.load_breaker_rules(rules),
        })
    }

    fn parse(&self, rules: Value) -> Result<Box<dyn Change>, Problem> {
        let rules: Vec<BreakerRule> = rules_of(rules)?;
        spillway::breaker::validate_breaker_rules(&rules).map_err(core_fault)?;
        Ok(Box::new(CoreRules {
            rules,
            load: |spillway, rules| spillway.load_breaker_rules(rules),
        }))
    }
}
