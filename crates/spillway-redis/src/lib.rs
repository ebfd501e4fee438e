//! Cluster-wide limits for spillway on Redis: one limit for a whole fleet of processes, with no
//! coordinator of our own. The semantics of each kind and mode, the bounds and the fallback are
//! in `docs/cluster.md`.
//!
//! Three kinds, each checked *strictly* (one atomic script call per request: exact across the
//! fleet, a round trip each) or from *leases* (batches taken ahead of need, admitted from with
//! no I/O, within a documented bound):
//! - [`SharedWindow`] / [`LeasedWindow`]: a QPS limit over Sentinel's sliding window;
//! - [`SharedBucket`] / [`LeasedBucket`]: a rate with bursts, Guava's smooth bursty
//!   `RateLimiter` (its arithmetic, in the script);
//! - [`SharedConcurrency`] / [`LeasedConcurrency`]: requests in flight, places kept while their
//!   holder's heartbeat lasts, so a dead process's places come back after its TTL.
//!
//! Leases never make a request wait on Redis: a call that fails or is slow switches the limit
//! to its [`Fallback`] at once (the process's fair share from the fleet's heartbeats, open or
//! closed), and a probe brings it back. Each lease is a [`spillway::cluster::SharedLimit`]: a
//! [`spillway::cluster::ClusterRule`] puts it in front of a resource, in the same decision
//! pipeline as the resource's local rules. Keys carry a hash tag (`spillway:{name}:window`), so
//! each limit lives in one slot of a Redis Cluster ([`Target`]). Scripts run by their SHA and
//! are loaded again when Redis has forgotten them.

use std::sync::Arc;

mod bucket;
mod concurrency;
mod driver;
mod health;
mod lease;
mod limit_clock;
mod lock;
mod places;
mod rate_fallback;
mod ready;
mod settings;
mod shared;
mod strict;
mod timed;
mod unreported;
mod window;

pub use bucket::{check_bucket, Reserved, SharedBucket};
pub use concurrency::{Holding, SharedConcurrency};
pub use driver::Target;
pub use lease::{Leased, LeasedBucket, LeasedWindow};
pub use places::LeasedConcurrency;
pub use redis;
pub use settings::{default_member, Fallback, LeaseMode, LeaseSettings};
pub use shared::Shared;
pub use strict::Strict;
pub use window::{check_settings, Checked, SharedWindow};

/// Where a shared limit reads the time.
#[derive(Debug, Clone, Default)]
pub enum Time {
    /// Redis's own clock (`TIME`, in the script): one clock for every process, whatever their
    /// machines' clocks say.
    #[default]
    Redis,
    /// A spillway clock of the caller's, in milliseconds: every process sharing the limit
    /// must read the same time, as threads sharing a [`spillway::ManualClock`] in a test do.
    Clock(Arc<dyn spillway::Clock>),
}

impl Time {
    /// The script's time argument: milliseconds, or -1 for Redis's clock.
    fn now_arg(&self) -> i64 {
        match self {
            Self::Redis => -1,
            Self::Clock(clock) => i64::try_from(clock.now_millis()).unwrap_or(i64::MAX),
        }
    }

    /// The same in microseconds (a bucket's time, as Guava's).
    fn now_micros_arg(&self) -> i64 {
        match self {
            Self::Redis => -1,
            Self::Clock(clock) => i64::try_from(clock.now_nanos() / 1000).unwrap_or(i64::MAX),
        }
    }
}

/// A failed check.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The limit's settings cannot work; the message says which and why.
    Invalid(String),
    /// Redis could not be reached, or answered with an error.
    Redis(redis::RedisError),
    /// Redis did not answer within the call timeout.
    Timeout(std::time::Duration),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(why) => write!(f, "invalid shared limit: {why}"),
            Self::Redis(err) => write!(f, "redis: {err}"),
            Self::Timeout(timeout) => write!(f, "redis: no answer within {timeout:?}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Invalid(_) | Self::Timeout(_) => None,
            Self::Redis(err) => Some(err),
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        Self::Redis(err)
    }
}

/// Checks a shared limit's name: 1 to 200 bytes, without braces (it becomes the key's hash
/// tag, which a brace would cut short).
///
/// # Errors
///
/// [`Error::Invalid`], saying why.
pub fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > 200 {
        return Err(Error::Invalid(format!(
            "a shared limit's name must have 1 to 200 bytes, not {}",
            name.len()
        )));
    }
    if name.contains(['{', '}']) {
        return Err(Error::Invalid(format!(
            "a shared limit's name cannot hold braces: {name:?}"
        )));
    }
    Ok(())
}

/// The Redis key of `name`'s `kind` of state: `spillway:{name}:kind`, the braces a hash tag, so
/// that everything of one limit is in one cluster slot.
fn key(name: &str, kind: &str) -> String {
    format!("spillway:{{{name}}}:{kind}")
}

/// The examples of `docs/cluster.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/cluster.md")]
struct ClusterDocs;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_tagged_with_the_whole_name() {
        assert_eq!(key("orders", "window"), "spillway:{orders}:window");
    }

    #[test]
    fn a_name_is_short_and_has_no_braces() {
        assert!(check_name("tenant:7/orders").is_ok());
        for bad in ["", "a{b", "a}b", &"x".repeat(201)] {
            let err = check_name(bad).unwrap_err();
            assert!(matches!(err, Error::Invalid(_)), "{bad:?}: {err}");
        }
    }
}
