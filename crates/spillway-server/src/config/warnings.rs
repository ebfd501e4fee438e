//! Warnings about a good configuration: rules that can never apply.

use super::validate::{Check, MAX_PROBLEMS};
use super::{Config, ConfigError};
use std::collections::HashSet;
use std::ops::Range;

/// Rules that name a resource no route (nor the default route) produces: they never apply.
/// Each is a line of `file:line:column:`, the field (`flow[0].resource`) and why, for `check`
/// to print as a warning and `serve` to log.
pub fn warnings(config: &Config, text: &str, file: &str) -> Vec<String> {
    let mut produced: HashSet<&str> = config
        .routes
        .iter()
        .map(|route| route.get_ref().resource.as_str())
        .collect();
    produced.insert(
        config
            .default
            .as_ref()
            .map_or("unmatched", |default| default.get_ref().resource.as_str()),
    );
    let check = Check::new(text, file);
    let note = |kind: &str, index: usize, span: Range<usize>, resource: &str| {
        if !produced.contains(resource) {
            check.problem(
                span,
                format!("{kind}[{index}]"),
                "resource",
                format!("no route produces `{resource}`, so this rule never applies"),
            );
        }
    };
    for (index, rule) in config.flow.iter().enumerate() {
        note("flow", index, rule.span(), &rule.get_ref().resource);
    }
    for (index, rule) in config.breakers.iter().enumerate() {
        note("breaker", index, rule.span(), &rule.get_ref().resource);
    }
    for (index, rule) in config.adaptive.iter().enumerate() {
        if let Some(resource) = &rule.get_ref().resource {
            note("adaptive", index, rule.span(), resource);
        }
    }
    for (index, rule) in config.cluster_rules.iter().enumerate() {
        note("cluster_rule", index, rule.span(), &rule.get_ref().resource);
    }
    for (index, rule) in config.keyed.iter().enumerate() {
        note("keyed", index, rule.span(), &rule.get_ref().resource);
    }
    let mut lines: Vec<String> = ConfigError::all(check.problems.into_inner())
        .map(|all| all.problems().iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    if lines.len() > MAX_PROBLEMS {
        let more = lines.len() - MAX_PROBLEMS;
        lines.truncate(MAX_PROBLEMS);
        lines.push(format!("{file}: and {more} more rules no route produces"));
    }
    lines
}
