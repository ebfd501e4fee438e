//! Checking a set of breaker rules before any of it is used.

use super::{BreakerRule, BreakerStrategy};
use crate::stats::WindowConfig;
use std::collections::HashMap;
use std::time::Duration;

/// Most breaker rules on one resource.
pub const MAX_BREAKERS_PER_RESOURCE: usize = 8;

/// A breaker rule that cannot be used: which rule (position and id), which field, and why.
///
/// # Examples
///
/// ```
/// use spillway::breaker::{validate_breaker_rules, BreakerRule, BreakerStrategy};
/// use std::time::Duration;
///
/// let rules = [BreakerRule::new("e", "api", BreakerStrategy::ErrorRatio { threshold: 2.0 },
///     Duration::from_secs(5))];
/// let err = validate_breaker_rules(&rules).unwrap_err();
/// assert_eq!(err.field(), "strategy.threshold");
/// assert_eq!(
///     err.to_string(),
///     "breaker rule #0 (id `e`): `strategy.threshold` must be between 0 and 1, got 2"
/// );
/// ```
pub type BreakerRuleError = crate::RuleError;

/// Checks every rule of a set, returning the first problem found.
///
/// # Errors
///
/// A [`BreakerRuleError`] naming the rule and the field.
pub fn validate_breaker_rules(rules: &[BreakerRule]) -> Result<(), BreakerRuleError> {
    let mut ids: HashMap<&str, usize> = HashMap::with_capacity(rules.len());
    let mut per_resource: HashMap<&str, usize> = HashMap::new();
    for (index, rule) in rules.iter().enumerate() {
        let fail = |field, problem: String| {
            Err(BreakerRuleError::new(
                "breaker", index, &rule.id, field, problem,
            ))
        };
        if rule.id.is_empty() {
            return fail("id", "must not be empty".into());
        }
        if let Some(first) = ids.insert(&rule.id, index) {
            return fail("id", format!("is also the id of breaker rule #{first}"));
        }
        if rule.resource.is_empty() {
            return fail("resource", "must not be empty".into());
        }
        let on_resource = per_resource.entry(&rule.resource).or_default();
        *on_resource += 1;
        if *on_resource > MAX_BREAKERS_PER_RESOURCE {
            return fail(
                "resource",
                format!("has more than {MAX_BREAKERS_PER_RESOURCE} breaker rules"),
            );
        }
        let ratio = |value: f64| (0.0..=1.0).contains(&value);
        match rule.strategy {
            BreakerStrategy::SlowCallRatio {
                slow_ratio_threshold,
                ..
            } if !ratio(slow_ratio_threshold) => {
                return fail(
                    "strategy.slow_ratio_threshold",
                    format!("must be between 0 and 1, got {slow_ratio_threshold}"),
                );
            }
            BreakerStrategy::ErrorRatio { threshold } if !ratio(threshold) => {
                return fail(
                    "strategy.threshold",
                    format!("must be between 0 and 1, got {threshold}"),
                );
            }
            _ => {}
        }
        if rule.retry_timeout.is_zero() {
            return fail("retry_timeout", "must be longer than zero".into());
        }
        if rule.probe_timeout == Some(Duration::ZERO) {
            return fail("probe_timeout", "must be longer than zero".into());
        }
        if rule.half_open_probes == 0 {
            return fail("half_open_probes", "must be at least 1".into());
        }
        if rule.stat_buckets < 2 {
            return fail(
                "stat_buckets",
                format!(
                    "must be at least 2 (a sliding window), got {}",
                    rule.stat_buckets
                ),
            );
        }
        if let Err(err) = WindowConfig::new(rule.stat_buckets as usize, rule.stat_interval) {
            return fail("stat_interval", format!("cannot make the window: {err}"));
        }
    }
    Ok(())
}
