//! System rules (`[[system]]`): Sentinel's checks of the whole process's inbound traffic.

use super::{core_fault, given, rules_of, Change, CoreRules, Problem, RuleKind};
use crate::config::Config;
use crate::proxy::Proxy;
use serde_json::{json, Value};
use spillway::system::SystemRule;

/// System rules.
pub(super) struct System;

impl RuleKind for System {
    fn name(&self) -> &'static str {
        "system"
    }

    fn read(&self, proxy: &Proxy) -> Value {
        json!(proxy.spillway().system_rules())
    }

    fn configured(&self, config: &Config) -> Box<dyn Change> {
        Box::new(CoreRules {
            rules: given(&config.system),
            load: |spillway, rules| spillway.load_system_rules(rules),
        })
    }

    fn parse(&self, rules: Value) -> Result<Box<dyn Change>, Problem> {
        let rules: Vec<SystemRule> = rules_of(rules)?;
        spillway::system::validate_system_rules(&rules).map_err(core_fault)?;
        Ok(Box::new(CoreRules {
            rules,
            load: |spillway, rules| spillway.load_system_rules(rules),
        }))
    }
}
