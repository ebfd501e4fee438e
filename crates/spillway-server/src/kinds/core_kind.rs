//! A kind whose rules go straight into the core: the file's tables are the core's rule type,
//! checked by the core's validator and loaded by the core's loader. Flow, system, breaker and
//! adaptive rules are each one of these, with their functions.

use super::{core_fault, given, rules_of, Change, CoreRules, Problem, RuleKind};
use crate::config::{Check, Config};
use crate::metrics::{KindMetrics, Sources};
use crate::proxy::Proxy;
use prometheus_client::encoding::DescriptorEncoder;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use spillway::{RuleError, Spillway};
use toml::Spanned;

/// A kind of the core's rules, `T`, described by its functions.
pub(super) struct CoreKind<T: 'static> {
    /// Its tables in the file and its key in the admin API.
    pub(super) name: &'static str,
    /// Its key in `/api/status`, if not its name.
    pub(super) states_key: Option<&'static str>,
    /// Its tables in a configuration.
    pub(super) tables: fn(&Config) -> &[Spanned<T>],
    /// The rules in force.
    pub(super) read: fn(&Spillway) -> Vec<T>,
    /// Each rule with its state now, for `/api/status`, if the kind has one to show.
    pub(super) states: Option<fn(&Spillway) -> Vec<Value>>,
    /// The core's checks.
    pub(super) validate: fn(&[T]) -> Result<(), RuleError>,
    /// The core's load (a rule that stays the same keeps its state).
    pub(super) load: fn(&Spillway, Vec<T>) -> Result<(), RuleError>,
    /// Its section's title on the dashboard.
    pub(super) title: &'static str,
    /// A new rule as the dashboard's form starts it.
    pub(super) template: fn() -> Value,
    /// Its own series in `/metrics`, if it has any.
    pub(super) metrics: Option<fn(&mut DescriptorEncoder<'_>, &Spillway) -> std::fmt::Result>,
}

impl<T: Send + Sync + 'static> KindMetrics for CoreKind<T> {
    fn label(&self) -> &'static str {
        self.name
    }

    fn loaded(&self, from: Sources<'_>) -> usize {
        (self.read)(from.spillway).len()
    }

    fn encode(&self, encoder: &mut DescriptorEncoder<'_>, from: Sources<'_>) -> std::fmt::Result {
        match self.metrics {
            Some(metrics) => metrics(encoder, from.spillway),
            None => Ok(()),
        }
    }
}

impl<T> RuleKind for CoreKind<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    fn name(&self) -> &'static str {
        self.name
    }

    fn metrics(&self) -> &dyn KindMetrics {
        self
    }

    fn title(&self) -> &'static str {
        self.title
    }

    fn template(&self) -> Value {
        (self.template)()
    }

    fn states_key(&self) -> &'static str {
        self.states_key.unwrap_or(self.name)
    }

    fn read(&self, proxy: &Proxy) -> Value {
        json!((self.read)(proxy.spillway()))
    }

    fn states(&self, proxy: &Proxy) -> Option<Value> {
        self.states
            .map(|states| Value::from(states(proxy.spillway())))
    }

    fn check(&self, config: &Config, check: &Check<'_>) {
        check.rules((self.tables)(config), self.name, |rules| {
            (self.validate)(rules)
                .map_err(|err| (err.index(), err.field(), err.problem().to_owned()))
        });
    }

    fn configured(&self, config: &Config) -> Box<dyn Change> {
        Box::new(CoreRules {
            rules: given((self.tables)(config)),
            load: self.load,
        })
    }

    fn parse(&self, rules: Value) -> Result<Box<dyn Change>, Problem> {
        let rules: Vec<T> = rules_of(rules)?;
        (self.validate)(&rules).map_err(core_fault)?;
        Ok(Box::new(CoreRules {
            rules,
            load: self.load,
        }))
    }
}
