//! A configuration of an adaptive limit that cannot be used.

use std::error::Error;
use std::fmt;

/// An adaptive limit's configuration that cannot be used: which algorithm, which field, why.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::Gradient2Config;
///
/// let err = Gradient2Config { min_limit: 50, max_limit: 10, ..Default::default() }
///     .validate()
///     .unwrap_err();
/// assert_eq!(err.field(), "max_limit");
/// assert_eq!(err.to_string(), "gradient2: `max_limit` must be at least `min_limit` (50), got 10");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdaptiveError {
    algorithm: &'static str,
    field: &'static str,
    problem: String,
}

impl AdaptiveError {
    pub(crate) fn new(algorithm: &'static str, field: &'static str, problem: String) -> Self {
        Self {
            algorithm,
            field,
            problem,
        }
    }

    /// What the settings are of: `gradient2`, `vegas`, `aimd`, `envoy_gradient`, `bbr`, or
    /// `queue` (an adaptive limit's queue).
    pub fn algorithm(&self) -> &'static str {
        self.algorithm
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

impl fmt::Display for AdaptiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: `{}` {}", self.algorithm, self.field, self.problem)
    }
}

impl Error for AdaptiveError {}

/// Checks shared by every configuration.
pub(crate) struct Check {
    pub(crate) algorithm: &'static str,
}

impl Check {
    /// `value` must be at least 1.
    pub(crate) fn positive(&self, field: &'static str, value: u32) -> Result<(), AdaptiveError> {
        if value == 0 {
            return Err(AdaptiveError::new(
                self.algorithm,
                field,
                "must be at least 1, got 0".to_owned(),
            ));
        }
        Ok(())
    }

    /// `low <= high` (`high` named `field`, `low` named `low_field`).
    pub(crate) fn ordered(
        &self,
        low_field: &'static str,
        low: u32,
        field: &'static str,
        high: u32,
    ) -> Result<(), AdaptiveError> {
        if high < low {
            return Err(AdaptiveError::new(
                self.algorithm,
                field,
                format!("must be at least `{low_field}` ({low}), got {high}"),
            ));
        }
        Ok(())
    }

    /// `value <= high` (`value` named `field`, `high` named `high_field`).
    pub(crate) fn at_most(
        &self,
        field: &'static str,
        value: u32,
        high_field: &'static str,
        high: u32,
    ) -> Result<(), AdaptiveError> {
        if value > high {
            return Err(AdaptiveError::new(
                self.algorithm,
                field,
                format!("must be at most `{high_field}` ({high}), got {value}"),
            ));
        }
        Ok(())
    }

    /// Limits at least 1 and ordered: `min <= initial <= max` (fields `min_limit`,
    /// `initial_limit`, `max_limit`).
    pub(crate) fn limits(&self, min: u32, initial: u32, max: u32) -> Result<(), AdaptiveError> {
        self.positive("min_limit", min)?;
        self.ordered("min_limit", min, "max_limit", max)?;
        self.ordered("min_limit", min, "initial_limit", initial)?;
        self.ordered("initial_limit", initial, "max_limit", max)
    }

    /// `value` finite and within `low..=high`.
    pub(crate) fn within(
        &self,
        field: &'static str,
        value: f64,
        low: f64,
        high: f64,
    ) -> Result<(), AdaptiveError> {
        if !(value.is_finite() && (low..=high).contains(&value)) {
            return Err(AdaptiveError::new(
                self.algorithm,
                field,
                format!("must be a number from {low} to {high}, got {value}"),
            ));
        }
        Ok(())
    }

    /// `value` not zero.
    pub(crate) fn nonzero_duration(
        &self,
        field: &'static str,
        value: std::time::Duration,
    ) -> Result<(), AdaptiveError> {
        if value.is_zero() {
            return Err(AdaptiveError::new(
                self.algorithm,
                field,
                "must be longer than 0".to_owned(),
            ));
        }
        Ok(())
    }
}
