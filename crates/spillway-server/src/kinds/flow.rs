//! Flow rules (`[[flow]]`): Sentinel's QPS and concurrency rules, with their controllers.

use super::{core_fault, given, rules_of, Change, CoreRules, Problem, RuleKind};
use crate::config::Config;
use crate::proxy::Proxy;
use serde_json::{json, Value};
use spillway::flow::FlowRule;

/// Flow rules.
pub(super) struct Flow;

impl RuleKind for Flow {
    fn name(&self) -> &'static str {
        "flow"
    }

    fn read(&self, proxy: &Proxy) -> Value {
        json!(proxy.spillway().flow_rules())
    }

    /// Each flow rule in load order, with what its controller holds now: a warm-up's allowed
    /// QPS, a pacer's queue wait (milliseconds), a shadow rule's refusals not made.
    fn states(&self, proxy: &Proxy) -> Option<Value> {
        let spillway = proxy.spillway();
        let states: Vec<Value> = spillway
            .flow_rules()
            .iter()
            .map(|rule| {
                let state = spillway.flow_rule_state(&rule.id).unwrap_or_default();
                json!({
                    "rule": rule.id,
                    "resource": rule.resource,
                    "count": rule.count,
                    "shadow": rule.shadow,
                    "allowed_qps": state.allowed_qps,
                    "queue_wait_ms": state.queue_wait.map(|wait| wait.as_secs_f64() * 1e3),
                    "shadow_refusals": state.shadow_refusals,
                })
            })
            .collect();
        Some(Value::from(states))
    }

    fn configured(&self, config: &Config) -> Box<dyn Change> {
        Box::new(CoreRules {
            rules: given(&config.flow),
            load: |spillway, rules| spillway.load_flow_rules(rules),
        })
    }

    fn parse(&self, rules: Value) -> Result<Box<dyn Change>, Problem> {
        let rules: Vec<FlowRule> = rules_of(rules)?;
        spillway::flow::validate_flow_rules(&rules).map_err(core_fault)?;
        Ok(Box::new(CoreRules {
            rules,
            load: |spillway, rules| spillway.load_flow_rules(rules),
        }))
    }
}
