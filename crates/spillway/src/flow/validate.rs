//! Checking a set of flow rules before any of it is used.

use super::{Behavior, FlowRule, Grade, LimitApp, Strategy};
use std::collections::HashMap;
use std::time::Duration;

/// Most flow rules one resource may have.
pub const MAX_RULES_PER_RESOURCE: usize = 64;

/// Most queueing (throttle, warm-up + throttle) rules one resource may have: an entry carries
/// its queue slots inline, so that it never allocates.
pub const MAX_QUEUEING_RULES_PER_RESOURCE: usize = crate::entry_caps::MAX_QUEUED;

/// Longest occupy timeout: prioritized entries borrow from within one second window.
pub const MAX_OCCUPY_TIMEOUT: Duration = Duration::from_secs(1);

/// A flow rule that cannot be used: which rule (position and id), which field, and why.
///
/// # Examples
///
/// ```
/// use spillway::flow::{validate_flow_rules, FlowRule};
///
/// let rules = [FlowRule::qps("ok", "a", 10.0), FlowRule::qps("bad", "b", f64::NAN)];
/// let err = validate_flow_rules(&rules).unwrap_err();
/// assert_eq!((err.index(), err.id(), err.field()), (1, "bad", "count"));
/// assert_eq!(err.to_string(), "flow rule #1 (id `bad`): `count` must be finite and at least 0, got NaN");
/// ```
pub type FlowRuleError = crate::RuleError;

/// A flow rule error at `index`.
fn flow_error(
    index: usize,
    rule: &FlowRule,
    field: &'static str,
    problem: impl Into<String>,
) -> FlowRuleError {
    FlowRuleError::new("flow", index, &rule.id, field, problem)
}

/// A resource with more rules of a kind than it may have.
pub(crate) fn too_many(index: usize, rule: &FlowRule, most: usize, what: &str) -> FlowRuleError {
    flow_error(
        index,
        rule,
        "resource",
        format!("has more than {most} {what} rules"),
    )
}

/// Checks every rule of a set, returning the first problem found.
///
/// # Errors
///
/// A [`FlowRuleError`] naming the rule and the field.
pub fn validate_flow_rules(rules: &[FlowRule]) -> Result<(), FlowRuleError> {
    let mut ids: HashMap<&str, usize> = HashMap::with_capacity(rules.len());
    // Rules, and queueing (pacing) rules, per resource so far.
    let mut per_resource: HashMap<&str, (usize, usize)> = HashMap::new();
    for (index, rule) in rules.iter().enumerate() {
        let fail = |field, problem: String| Err(flow_error(index, rule, field, problem));
        let (all, queueing) = per_resource.entry(&rule.resource).or_default();
        *all += 1;
        if *all > MAX_RULES_PER_RESOURCE {
            return Err(too_many(index, rule, MAX_RULES_PER_RESOURCE, "flow"));
        }
        let paces = rule.grade == Grade::Qps
            && matches!(
                rule.behavior,
                Behavior::Throttle { .. } | Behavior::WarmUpThrottle { .. }
            );
        if paces {
            *queueing += 1;
            if *queueing > MAX_QUEUEING_RULES_PER_RESOURCE {
                return Err(too_many(
                    index,
                    rule,
                    MAX_QUEUEING_RULES_PER_RESOURCE,
                    "queueing (throttle) flow",
                ));
            }
        }
        if rule.id.is_empty() {
            return fail("id", "must not be empty".into());
        }
        if let Some(first) = ids.insert(&rule.id, index) {
            let hint = if rule.id == rule.resource {
                " (`per_second` and `in_flight` name a rule after its resource: give one \
                 another id with `with_id`)"
            } else {
                ""
            };
            return fail("id", format!("is also the id of flow rule #{first}{hint}"));
        }
        if rule.resource.is_empty() {
            return fail("resource", "must not be empty".into());
        }
        if !rule.count.is_finite() || rule.count < 0.0 {
            return fail(
                "count",
                format!("must be finite and at least 0, got {}", rule.count),
            );
        }
        match rule.behavior {
            Behavior::Reject => {}
            _ if rule.grade == Grade::Concurrency => {
                return fail(
                    "behavior",
                    "must be reject for a concurrency rule (warm-up and throttling pace QPS)"
                        .into(),
                );
            }
            Behavior::WarmUp {
                period,
                cold_factor,
            }
            | Behavior::WarmUpThrottle {
                period,
                cold_factor,
                ..
            } => {
                if period.is_zero() {
                    return fail("behavior.period", "must be longer than zero".into());
                }
                if cold_factor < 2 {
                    return fail(
                        "behavior.cold_factor",
                        format!("must be at least 2, got {cold_factor}"),
                    );
                }
            }
            Behavior::Throttle { stat_duration, .. } => {
                if super::throttle::stat_duration_ms(stat_duration).is_none() {
                    return fail(
                        "behavior.stat_duration",
                        format!(
                            "must be a whole number of milliseconds from 1 ms to {} ms, got {stat_duration:?}",
                            u32::MAX
                        ),
                    );
                }
            }
        }
        if rule.limit_app == LimitApp::Origin(String::new()) {
            return fail("limit_app", "must not be empty".into());
        }
        match &rule.strategy {
            Strategy::Relate { ref_resource } if ref_resource.is_empty() => {
                return fail("strategy.ref_resource", "must not be empty".into());
            }
            Strategy::Chain { entrance } if entrance.is_empty() => {
                return fail("strategy.entrance", "must not be empty".into());
            }
            _ => {}
        }
        if rule.occupy_timeout > MAX_OCCUPY_TIMEOUT {
            return fail(
                "occupy_timeout",
                format!(
                    "must be at most {MAX_OCCUPY_TIMEOUT:?} (one second window), got {:?}",
                    rule.occupy_timeout
                ),
            );
        }
    }
    Ok(())
}
