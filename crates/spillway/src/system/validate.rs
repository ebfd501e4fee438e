//! Checking a set of system rules before any of it is used.

use super::{MinRtEstimate, SystemRule};
use std::collections::HashMap;
use std::time::Duration;

/// Longest [`MinRtEstimate::BucketAverage`] window: the minute window.
pub const MAX_MIN_RT_WINDOW: Duration = Duration::from_secs(60);

/// A system rule that cannot be used: which rule (position and id), which field, and why.
///
/// # Examples
///
/// ```
/// use spillway::system::{validate_system_rules, SystemRule};
///
/// let rules = [SystemRule::new("cpu").with_highest_cpu_usage(1.5)];
/// let err = validate_system_rules(&rules).unwrap_err();
/// assert_eq!((err.index(), err.id(), err.field()), (0, "cpu", "highest_cpu_usage"));
/// assert_eq!(
///     err.to_string(),
///     "system rule #0 (id `cpu`): `highest_cpu_usage` must be between 0 and 1, got 1.5"
/// );
/// ```
pub type SystemRuleError = crate::RuleError;

/// Checks every rule of a set, returning the first problem found.
///
/// # Errors
///
/// A [`SystemRuleError`] naming the rule and the field.
pub fn validate_system_rules(rules: &[SystemRule]) -> Result<(), SystemRuleError> {
    let mut ids: HashMap<&str, usize> = HashMap::with_capacity(rules.len());
    for (index, rule) in rules.iter().enumerate() {
        let fail = |field, problem: String| {
            Err(SystemRuleError::new(
                "system", index, &rule.id, field, problem,
            ))
        };
        if rule.id.is_empty() {
            return fail("id", "must not be empty".into());
        }
        if let Some(first) = ids.insert(&rule.id, index) {
            return fail("id", format!("is also the id of system rule #{first}"));
        }
        if let Some(qps) = rule.qps {
            if !qps.is_finite() || qps < 0.0 {
                return fail("qps", format!("must be finite and at least 0, got {qps}"));
            }
        }
        if let Some(load) = rule.highest_system_load {
            if !load.is_finite() || load < 0.0 {
                return fail(
                    "highest_system_load",
                    format!("must be finite and at least 0, got {load}"),
                );
            }
        }
        if let Some(cpu) = rule.highest_cpu_usage {
            if !(0.0..=1.0).contains(&cpu) {
                return fail(
                    "highest_cpu_usage",
                    format!("must be between 0 and 1, got {cpu}"),
                );
            }
        }
        let sets_any = rule.qps.is_some()
            || rule.max_concurrency.is_some()
            || rule.avg_rt.is_some()
            || rule.highest_system_load.is_some()
            || rule.highest_cpu_usage.is_some();
        if !sets_any {
            return fail(
                "id",
                "sets no threshold: set qps, max_concurrency, avg_rt, highest_system_load or \
                 highest_cpu_usage"
                    .into(),
            );
        }
        if let MinRtEstimate::BucketAverage { window } = rule.min_rt {
            if window < Duration::from_secs(1) || window > MAX_MIN_RT_WINDOW {
                return fail(
                    "min_rt.window",
                    format!(
                        "must be between 1s and {MAX_MIN_RT_WINDOW:?} (the minute window), got \
                         {window:?}"
                    ),
                );
            }
        }
    }
    Ok(())
}
