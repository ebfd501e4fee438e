use std::error::Error;
use std::fmt;

/// A rate limiter was asked for something it can never do.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum RateLimiterError {
    /// The rate must be positive (infinity is allowed); NaN is refused.
    Rate(f64),
    /// A request must be for at least one permit. No longer returned: a request for no permits
    /// is granted at once.
    #[deprecated(since = "0.2.0", note = "a request for no permits is granted at once")]
    ZeroPermits,
    /// The maximum burst must be finite and at least 0 seconds.
    MaxBurst(f64),
    /// The cold factor must be finite and at least 1.
    ColdFactor(f64),
}

impl fmt::Display for RateLimiterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rate(rate) => write!(f, "rate must be positive, got {rate}"),
            #[allow(deprecated)]
            Self::ZeroPermits => f.write_str("requested permits must be positive, got 0"),
            Self::MaxBurst(seconds) => {
                write!(
                    f,
                    "max burst must be finite and at least 0 seconds, got {seconds}"
                )
            }
            Self::ColdFactor(factor) => {
                write!(f, "cold factor must be finite and at least 1, got {factor}")
            }
        }
    }
}

impl Error for RateLimiterError {}
