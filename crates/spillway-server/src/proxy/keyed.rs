//! Per-key rules replaced while the proxy runs (the admin API's `PUT /api/rules`): checked
//! against the running routes as the file's are, then the core's rules and the routes' key
//! readers installed together.

use super::{Proxy, Table};
use crate::config::KeyedConfig;
use std::sync::Arc;

/// Per-key rules checked against the running routes, ready to install.
#[derive(Debug)]
pub(crate) struct StagedKeyed {
    table: Table,
    core: Vec<spillway::keyed::KeyedRule>,
}

impl Table {
    /// This table with `rules`' keys read on its routes, and the core's rules; or the rule at
    /// fault (its index), its field and why, as the file's checks say it.
    fn with_keyed(
        &self,
        rules: Vec<KeyedConfig>,
    ) -> Result<StagedKeyed, (usize, &'static str, String)> {
        let (plan, core) = crate::keyed::plan(&rules)?;
        let routes = || {
            self.routes
                .iter()
                .chain(std::iter::once(&self.default))
                .map(|route| (route.resource.as_str(), route.template.as_deref()))
        };
        for (index, rule) in rules.iter().enumerate() {
            if let Some(problem) = crate::keyed::path_problem(rule, routes()) {
                return Err((index, "key", problem));
            }
            let prefixes = self.trusted_proxies.prefixes();
            if let Some((at, problem)) = crate::keyed::exception_problem(rule, prefixes) {
                return Err((index, "exceptions", format!("exception {at}: {problem}")));
            }
        }
        let mut table = self.clone();
        for route in table
            .routes
            .iter_mut()
            .chain(std::iter::once(&mut table.default))
        {
            let keys = crate::keyed::route_keys(&plan, &route.resource, route.path());
            *route = route.clone().with_keys(keys);
        }
        table.keyed_sources = super::table::keyed_sources(&rules);
        if let Some(logged) = table.logged_headers.take() {
            let logged = crate::read_headers::with_keyed(logged, &rules);
            table.logged_headers = Some(logged);
        }
        table.keyed = rules;
        Ok(StagedKeyed { table, core })
    }
}

impl Proxy {
    /// The per-key rules in force, as the file or the admin API gave them.
    pub(crate) fn keyed_rules(&self) -> Vec<KeyedConfig> {
        self.inner.table.load().keyed.clone()
    }

    /// Checks `rules` against the running routes: the rule at fault, its field and why.
    pub(crate) fn stage_keyed(
        &self,
        rules: Vec<KeyedConfig>,
    ) -> Result<StagedKeyed, (usize, &'static str, String)> {
        self.inner.table.load().with_keyed(rules)
    }

    /// Installs staged rules: the core's (a rule that stays the same keeps every key's state)
    /// and the routes' key readers.
    ///
    /// # Errors
    ///
    /// The core refused the rules (staging checked them as it does: it does not).
    pub(crate) fn install_keyed(&self, staged: StagedKeyed) -> Result<(), spillway::RuleError> {
        self.inner.shared.spillway.load_keyed_rules(staged.core)?;
        self.inner.table.store(Arc::new(staged.table));
        Ok(())
    }
}
