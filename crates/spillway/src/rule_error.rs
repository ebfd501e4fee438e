//! The error of a rule that cannot be used, shared by every kind of rule.

use std::error::Error;
use std::fmt;

/// A rule that cannot be used: which kind of rule, which one (position and id), which field,
/// and why. [`FlowRuleError`](crate::flow::FlowRuleError),
/// [`SystemRuleError`](crate::system::SystemRuleError) and
/// [`BreakerRuleError`](crate::breaker::BreakerRuleError) are this type.
///
/// # Examples
///
/// ```
/// use spillway::flow::{validate_flow_rules, FlowRule};
///
/// let err = validate_flow_rules(&[FlowRule::qps("", "a", 1.0)]).unwrap_err();
/// assert_eq!((err.kind(), err.index(), err.field()), ("flow", 0, "id"));
/// assert_eq!(err.to_string(), "flow rule #0 (id ``): `id` must not be empty");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    kind: &'static str,
    index: usize,
    id: String,
    field: &'static str,
    problem: String,
}

impl RuleError {
    pub(crate) fn new(
        kind: &'static str,
        index: usize,
        id: &str,
        field: &'static str,
        problem: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            index,
            id: id.to_owned(),
            field,
            problem: problem.into(),
        }
    }

    /// The kind of rule: `"flow"`, `"system"` or `"breaker"`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// Position of the rule in its set (from 0).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The rule's id (may be empty, when that is the problem).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The field at fault.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// What is wrong with it.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rule #{} (id `{}`): `{}` {}",
            self.kind, self.index, self.id, self.field, self.problem
        )
    }
}

impl Error for RuleError {}
