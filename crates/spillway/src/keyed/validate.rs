//! Checking a set of per-key rules before any of it is used.

use super::{KeyedBehavior, KeyedRule};
use crate::flow::Grade;
use std::collections::HashMap;

/// Most keys with exact state one rule may keep.
pub const MAX_CAPACITY: usize = 1 << 22;

/// Most exceptions one rule may name.
pub const MAX_EXCEPTIONS: usize = 10_000;

/// Longest `duration`: a day.
pub const MAX_DURATION_SECS: u64 = 86_400;

/// A per-key rule that cannot be used.
pub type KeyedRuleError = crate::RuleError;

/// Checks every rule of a set, returning the first problem found.
///
/// # Errors
///
/// A [`KeyedRuleError`] naming the rule and the field.
///
/// # Examples
///
/// ```
/// use spillway::keyed::{validate_keyed_rules, KeyedRule};
/// use std::time::Duration;
///
/// let rule = KeyedRule::qps("per-ip", "api", 5.0).with_duration(Duration::from_millis(1500));
/// let err = validate_keyed_rules(&[rule]).unwrap_err();
/// assert_eq!(err.field(), "duration");
/// ```
pub fn validate_keyed_rules(rules: &[KeyedRule]) -> Result<(), KeyedRuleError> {
    let mut ids: HashMap<&str, usize> = HashMap::with_capacity(rules.len());
    for (index, rule) in rules.iter().enumerate() {
        let fail = |field, problem: String| {
            Err(KeyedRuleError::new(
                "keyed", index, &rule.id, field, problem,
            ))
        };
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
            return fail("id", format!("is also the id of keyed rule #{first}{hint}"));
        }
        if rule.resource.is_empty() {
            return fail("resource", "must not be empty".into());
        }
        if rule.param >= super::KEY_POSITIONS {
            return fail(
                "param",
                format!(
                    "must be from 0 to {}, got {}",
                    super::KEY_POSITIONS - 1,
                    rule.param
                ),
            );
        }
        if !rule.count.is_finite() || rule.count < 0.0 || rule.count > u32::MAX as f64 {
            return fail(
                "count",
                format!("must be finite, from 0 to {}, got {}", u32::MAX, rule.count),
            );
        }
        let secs = rule.duration.as_secs();
        if rule.duration.subsec_nanos() != 0 || secs == 0 || secs > MAX_DURATION_SECS {
            return fail(
                "duration",
                format!(
                    "must be whole seconds from 1 s to {MAX_DURATION_SECS} s, got {:?}",
                    rule.duration
                ),
            );
        }
        if rule.grade == Grade::Concurrency {
            if rule.behavior != KeyedBehavior::Reject {
                return fail(
                    "behavior",
                    "must be reject for a concurrency rule (throttling paces QPS)".into(),
                );
            }
            if rule.burst != 0 {
                return fail("burst", "applies to QPS rules only".into());
            }
        }
        if rule.burst > u64::from(u32::MAX) {
            return fail("burst", format!("must be at most {}", u32::MAX));
        }
        if let KeyedBehavior::Throttle { max_queueing_time } = rule.behavior {
            if rule.burst != 0 {
                return fail("burst", "applies to reject rules only".into());
            }
            if max_queueing_time.as_millis() > u128::from(u32::MAX) {
                return fail(
                    "behavior.max_queueing_time",
                    format!("must be at most {} ms", u32::MAX),
                );
            }
        }
        if rule.capacity == 0 || rule.capacity > MAX_CAPACITY {
            return fail(
                "capacity",
                format!("must be from 1 to {MAX_CAPACITY}, got {}", rule.capacity),
            );
        }
        if rule.exceptions.len() > MAX_EXCEPTIONS {
            return fail(
                "exceptions",
                format!("must name at most {MAX_EXCEPTIONS} keys"),
            );
        }
        let mut keys: HashMap<&str, usize> = HashMap::with_capacity(rule.exceptions.len());
        for (at, exception) in rule.exceptions.iter().enumerate() {
            if let Some(first) = keys.insert(&exception.key, at) {
                return fail(
                    "exceptions",
                    format!(
                        "names the key {:?} twice (#{first} and #{at})",
                        exception.key
                    ),
                );
            }
            if exception.count > u64::from(u32::MAX) {
                return fail(
                    "exceptions",
                    format!("the key {:?} has a count over {}", exception.key, u32::MAX),
                );
            }
        }
    }
    Ok(())
}
