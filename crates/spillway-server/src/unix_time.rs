//! The wall clock, for timestamps people read.

use std::time::SystemTime;

/// The wall clock in Unix seconds: for a timestamp operators read and compare with other
/// systems' (spillway's clocks count from an arbitrary origin, for measuring, not for dates).
#[allow(clippy::disallowed_methods)]
pub(crate) fn unix_seconds_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// The wall clock in nanoseconds since the Unix epoch (0 before it).
#[allow(clippy::disallowed_methods)]
pub(crate) fn unix_nanos_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}
