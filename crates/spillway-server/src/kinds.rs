//! Every kind of rule as the server's surfaces meet it, in one list ([`KINDS`]): its tables in
//! the file and their checks, its rules through `GET` and `PUT /api/rules` (checked whole
//! before any is applied), written back to the file, loaded from it, and its state in
//! `/api/status`. Each kind is one module under `kinds/`; the file's checks (`checked.rs`) and
//! loading, the admin API, persistence and the status loop over the list, and so do the
//! metrics (each kind gives its own).

mod adaptive;
mod breaker;
mod cluster;
mod core_kind;
mod flow;
mod keyed;
mod system;

use crate::config::{Check, Config};
use crate::metrics::KindMetrics;
use crate::proxy::Proxy;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// One kind of rule, as the server's surfaces meet it.
pub(crate) trait RuleKind: Sync {
    /// Its name: its tables in the file (`[[flow]]`), its key in `GET` and `PUT /api/rules`
    /// and in the audit.
    fn name(&self) -> &'static str;

    /// Its short name: the kind as `spillway_rules{kind}` labels it (its
    /// [`KindMetrics::label`] is the same), and its key in `/api/status` (the name, unless the
    /// kind's file tables are named otherwise).
    fn label(&self) -> &'static str {
        self.name()
    }

    /// Its key in `/api/status` (the label, unless the status has long said otherwise).
    fn states_key(&self) -> &'static str {
        self.label()
    }

    /// Its metrics: its rules loaded and its own series.
    fn metrics(&self) -> &dyn KindMetrics;

    /// Its section's title on the dashboard.
    fn title(&self) -> &'static str;

    /// A new rule of it as the dashboard's form starts it, in the file's form.
    fn template(&self) -> Value;

    /// The rules in force, in the file's form.
    fn read(&self, proxy: &Proxy) -> Value;

    /// Each rule with what its state holds now, for `/api/status` (None: nothing beyond the
    /// rules).
    fn states(&self, _proxy: &Proxy) -> Option<Value> {
        None
    }

    /// Checks its rules in a configuration file (each rule at fault noted in `check`, where it
    /// is written), with what else the file gives that they need.
    fn check(&self, config: &Config, check: &Check<'_>);

    /// The rules a checked configuration file gives (a reload, or the start): applied with
    /// the routes the same file gives.
    fn configured(&self, config: &Config) -> Box<dyn Change>;

    /// Reads rules given in the file's form and checks their own fields.
    ///
    /// # Errors
    ///
    /// What is wrong: not the kind's form, or a rule at fault.
    fn parse(&self, rules: Value) -> Result<Box<dyn Change>, Problem>;
}

/// Rules of one kind, read and checked, ready to replace those in force.
pub(crate) trait Change: Send {
    /// Checks them against the running proxy (the routes a per-key rule reads keys on, the
    /// `[cluster]` section a cluster rule needs), changing nothing.
    ///
    /// # Errors
    ///
    /// The rule at fault.
    fn stage(&mut self, _proxy: &Proxy) -> Result<(), Fault> {
        Ok(())
    }

    /// The rules as the file's tables of kind `name`, in TOML.
    ///
    /// # Errors
    ///
    /// If they cannot be written as TOML.
    fn toml(&self, name: &str) -> Result<String, String>;

    /// Replaces the kind's rules in force with them (a rule that stays the same keeps its
    /// state).
    ///
    /// # Errors
    ///
    /// The rule at fault, should the core refuse one that the checks passed (it does not).
    fn apply(self: Box<Self>, proxy: &Proxy) -> Result<(), Fault>;
}

/// Loads every kind's rules from a checked configuration file (the routes' key readers come
/// with the routing table the same file gives), the proxy's metrics reading every kind's.
///
/// # Errors
///
/// A rule the core refuses (a checked file has none).
pub(crate) fn apply_configured(proxy: &Proxy, config: &Config) -> Result<(), String> {
    // The first load of a proxy's rules says which kinds its metrics read (once: kept).
    proxy.metrics().set_kinds(metrics());
    for kind in KINDS {
        kind.configured(config).apply(proxy).map_err(|fault| {
            format!(
                "{} rule #{} (id `{}`): `{}` {}",
                kind.name(),
                fault.index,
                fault.id,
                fault.field,
                fault.problem
            )
        })?;
    }
    Ok(())
}

/// Every kind, in the order the admin API applies them and the status lists them.
pub(crate) const KINDS: &[&dyn RuleKind] = &[
    &flow::FLOW,
    &system::SYSTEM,
    &breaker::BREAKER,
    &adaptive::ADAPTIVE,
    &cluster::Cluster,
    &keyed::Keyed,
];

/// Every kind's metrics, for `/metrics` ([`crate::metrics::Metrics::set_kinds`]).
pub(crate) fn metrics() -> Vec<&'static dyn KindMetrics> {
    KINDS.iter().map(|kind| kind.metrics()).collect()
}

/// The kind named `name` in the file and the admin API.
pub(crate) fn named(name: &str) -> Option<&'static dyn RuleKind> {
    KINDS.iter().copied().find(|kind| kind.name() == name)
}

/// Why rules given for a kind were not taken.
#[derive(Debug)]
pub(crate) enum Problem {
    /// Not the kind's form (a field unknown, or of the wrong type).
    Malformed(String),
    /// A rule at fault.
    Rule(Fault),
}

/// A rule at fault: its position among those given, its id, the field and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fault {
    pub(crate) index: usize,
    pub(crate) id: String,
    pub(crate) field: String,
    pub(crate) problem: String,
}

impl Fault {
    /// Rule `index` of `ids` at fault, as the server's own checks name it.
    pub(crate) fn at<'a>(
        mut ids: impl Iterator<Item = &'a str>,
        (index, field, problem): (usize, &str, String),
    ) -> Self {
        Self {
            index,
            id: ids.nth(index).unwrap_or("").to_owned(),
            field: field.to_owned(),
            problem,
        }
    }
}

impl From<spillway::RuleError> for Fault {
    fn from(err: spillway::RuleError) -> Self {
        Self {
            index: err.index(),
            id: err.id().to_owned(),
            field: err.field().to_owned(),
            problem: err.problem().to_owned(),
        }
    }
}

impl From<Fault> for Problem {
    fn from(fault: Fault) -> Self {
        Self::Rule(fault)
    }
}

/// A rule the core's validator found at fault.
fn core_fault(err: impl Into<spillway::RuleError>) -> Problem {
    Problem::Rule(Fault::from(err.into()))
}

/// The rules of a file's tables, without their places in the file.
fn given<T: Clone>(tables: &[toml::Spanned<T>]) -> Vec<T> {
    tables.iter().map(|table| table.get_ref().clone()).collect()
}

/// Rules of kind `T` from the JSON given.
fn rules_of<T: DeserializeOwned>(rules: Value) -> Result<Vec<T>, Problem> {
    serde_json::from_value(rules).map_err(|err| Problem::Malformed(err.to_string()))
}

/// `rules` as the file's tables of kind `name`, in TOML.
fn toml_tables<T: Serialize>(name: &str, rules: &[T]) -> Result<String, String> {
    let tables = std::collections::BTreeMap::from([(name, rules)]);
    toml::to_string(&tables).map_err(|err| err.to_string())
}

/// Rules that go straight into the core: checked by its validator, loaded by its loader.
struct CoreRules<T> {
    rules: Vec<T>,
    load: fn(&spillway::Spillway, Vec<T>) -> Result<(), spillway::RuleError>,
}

impl<T: Serialize + Send> Change for CoreRules<T> {
    fn toml(&self, name: &str) -> Result<String, String> {
        toml_tables(name, &self.rules)
    }

    fn apply(self: Box<Self>, proxy: &Proxy) -> Result<(), Fault> {
        (self.load)(proxy.spillway(), self.rules).map_err(Fault::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_name_and_label() {
        for (i, a) in KINDS.iter().enumerate() {
            assert_eq!(named(a.name()).map(|kind| kind.label()), Some(a.label()));
            for b in &KINDS[i + 1..] {
                assert_ne!(a.name(), b.name());
                assert_ne!(a.label(), b.label());
            }
        }
        assert!(named("nope").is_none());
    }

    #[test]
    fn a_kind_refuses_what_is_not_its_form_and_names_the_rule_at_fault() {
        let flow = named("flow").unwrap();
        assert!(matches!(
            flow.parse(serde_json::json!([{"id": "a", "resource": "r", "nope": 1}])),
            Err(Problem::Malformed(_))
        ));
        let Err(Problem::Rule(fault)) = flow.parse(serde_json::json!([
            {"id": "a", "resource": "r", "count": 5},
            {"id": "b", "resource": "r", "count": -5}
        ])) else {
            panic!("a negative count is a rule at fault");
        };
        assert_eq!((fault.index, fault.id.as_str()), (1, "b"));
        assert_eq!(fault.field, "count");
    }

    #[test]
    fn every_kind_gives_its_metrics_under_its_own_label() {
        let labels: Vec<&str> = metrics().iter().map(|kind| kind.label()).collect();
        let expected: Vec<&str> = KINDS.iter().map(|kind| kind.label()).collect();
        assert_eq!(labels, expected);
        let mut distinct = labels.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), labels.len(), "{labels:?}");
        assert_eq!(
            labels,
            ["flow", "system", "breaker", "adaptive", "cluster", "keyed"]
        );
    }
}
