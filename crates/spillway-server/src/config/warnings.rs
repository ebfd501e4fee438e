//! Warnings about a good configuration: rules that can never apply.

use super::validate::{Check, MAX_PROBLEMS};
use super::{Config, ConfigError};
use spillway_tower::keys::path_segment;
use std::collections::HashSet;
use std::ops::Range;

/// Rules that name a resource no route (nor the default route) produces: they never apply;
/// and `[[criticality.rule]]`s or a `[tenant]` that read a path segment no route they apply to
/// has, so never match or never tell tenants apart. Each is a line of `file:line:column:`, the field (`flow[0].resource`) and why, for `check`
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
    claims(config, &check, &produced);
    let mut lines: Vec<String> = ConfigError::all(check.problems.into_inner())
        .map(|all| all.problems().iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    if lines.len() > MAX_PROBLEMS {
        let more = lines.len() - MAX_PROBLEMS;
        lines.truncate(MAX_PROBLEMS);
        lines.push(format!("{file}: and {more} more warnings"));
    }
    lines
}

/// The warnings about `[criticality]` and `[tenant]`: a rule for a resource no route produces;
/// a rule's `path:NAME` key that a route to its resource lacks (that route's requests never
/// match it), or that no route has when the rule names no resource; a tenant read from a path
/// segment no route has (every request would be nobody's).
fn claims(config: &Config, check: &Check<'_>, produced: &HashSet<&str>) {
    let segment = |key: &str| match crate::keyed::Source::parse(key) {
        Ok(crate::keyed::Source::Path(name)) => Some(name),
        _ => None,
    };
    let templates = || {
        config.routes.iter().map(|route| {
            let route = route.get_ref();
            (route.resource.as_str(), route.path.as_str())
        })
    };
    let has = |template: &str, name: &str| path_segment(template, name).is_some();
    if let Some(criticality) = &config.criticality {
        for (index, spanned) in criticality.get_ref().rules.iter().enumerate() {
            let (span, rule) = (spanned.span(), spanned.get_ref());
            let path = format!("criticality.rule[{index}]");
            if let Some(resource) = rule.resource.as_deref() {
                if !produced.contains(resource) {
                    check.problem(
                        span.clone(),
                        path.clone(),
                        "resource",
                        format!("no route produces `{resource}`, so this rule never applies"),
                    );
                    continue;
                }
            }
            let Some(name) = rule.key.as_deref().and_then(segment) else {
                continue;
            };
            let problem = match rule.resource.as_deref() {
                Some(resource) => templates()
                    .find(|(produces, template)| *produces == resource && !has(template, &name))
                    .map(|(_, template)| {
                        format!(
                            "reads `{{{name}}}` from the path, and the route `{template}` to \
                             `{resource}` has no such segment: its requests never match this rule"
                        )
                    })
                    .or_else(|| {
                        let default = config
                            .default
                            .as_ref()
                            .map_or("unmatched", |d| d.get_ref().resource.as_str());
                        (default == resource).then(|| {
                            format!(
                                "reads `{{{name}}}` from the path, and `{resource}` is the default \
                                 route's resource, which has no path template: its requests \
                                 never match this rule"
                            )
                        })
                    }),
                None => (!templates().any(|(_, template)| has(template, &name))).then(|| {
                    format!(
                        "reads `{{{name}}}` from the path, and no route's path has such a \
                         segment, so this rule never applies"
                    )
                }),
            };
            if let Some(problem) = problem {
                check.problem(span, path, "key", problem);
            }
        }
    }
    if let Some(tenant) = &config.tenant {
        if let Some(name) = segment(&tenant.get_ref().key) {
            if !templates().any(|(_, template)| has(template, &name)) {
                check.problem(
                    tenant.span(),
                    "tenant".into(),
                    "key",
                    format!(
                        "reads `{{{name}}}` from the path, and no route's path has such a \
                         segment, so no request has a tenant"
                    ),
                );
            }
        }
    }
}
