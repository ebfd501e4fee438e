//! How a shared limit treats Redis: its lease's batches and timeouts, what it admits while
//! Redis fails, which state it is in, and this process's name among those sharing it.

use crate::Error;
use spillway::Clock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a process admits while Redis cannot be reached or answers with errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fallback {
    /// Its fair share: the limit divided by the live processes (last known from their
    /// heartbeats), over a local sliding window (Sentinel's, two 500 ms buckets).
    #[default]
    LocalShare,
    /// Everything (fail open).
    Open,
    /// Nothing (fail closed).
    Closed,
}

/// Whether a lease admits against the shared limit or its fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseMode {
    /// No answer from Redis yet: requests wait for the first (at most
    /// [`LeaseSettings::startup_wait`]); those that find none by then are refused (nothing is
    /// admitted before the fleet is known, unless Redis fails: then the fallback decides).
    Starting,
    /// Passes leased from the shared limit.
    Global,
    /// Redis failed: [`Fallback`] decides until a probe succeeds.
    Fallback,
}

/// How a [`Leased`](crate::Leased) limit leases, and what it does when Redis fails.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// The largest batch taken at once (default 10).
    pub max_batch: u64,
    /// Longest one call to Redis may take before it counts as a failure (default 100 ms).
    pub call_timeout: Duration,
    /// While Redis fails, how often it is tried again (default 500 ms).
    pub probe_every: Duration,
    /// How long a heartbeat counts this process as live (default 3 s); one is sent with each
    /// call, and at least every third of this.
    pub heartbeat_ttl: Duration,
    /// What to admit while Redis fails.
    pub fallback: Fallback,
    /// The processes assumed live before a heartbeat has been read (default 1).
    pub assumed_processes: u64,
    /// Longest a request waits for the limit's first answer from Redis (default 1 s; zero: no
    /// wait). A failure ends the wait at once, and the fallback decides.
    pub startup_wait: Duration,
    /// This process's name among those sharing the limit (default: its process id and a
    /// counter, with the clock's reading).
    pub member: Option<String>,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            max_batch: 10,
            call_timeout: Duration::from_millis(100),
            probe_every: Duration::from_millis(500),
            heartbeat_ttl: Duration::from_secs(3),
            fallback: Fallback::LocalShare,
            assumed_processes: 1,
            startup_wait: Duration::from_secs(1),
            member: None,
        }
    }
}

/// Checks lease settings: `max_batch` and `assumed_processes` at least 1, durations positive.
pub(crate) fn check_lease_settings(settings: &LeaseSettings) -> Result<(), Error> {
    let invalid = |why: &str| Err(Error::Invalid(why.to_owned()));
    if settings.max_batch == 0 {
        return invalid("max_batch must be at least 1");
    }
    if settings.assumed_processes == 0 {
        return invalid("assumed_processes must be at least 1");
    }
    if settings.call_timeout.is_zero()
        || settings.probe_every.is_zero()
        || settings.heartbeat_ttl.as_millis() < 3
    {
        return invalid(
            "call_timeout, probe_every and heartbeat_ttl (at least 3 ms) must be positive",
        );
    }
    Ok(())
}

/// A name for this process among those sharing a limit: its id, a counter (for several leases
/// in one process) and the clock's reading. What a lease is named by default; a
/// [`crate::SharedConcurrency`]'s holder can take one too.
///
/// ```
/// let clock = spillway::ManualClock::new();
/// let a = spillway_redis::default_member(&clock);
/// let b = spillway_redis::default_member(&clock);
/// assert_ne!(a, b);
/// assert!(a.starts_with(&std::process::id().to_string()));
/// ```
pub fn default_member(clock: &dyn Clock) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}-{n}-{}", std::process::id(), clock.now_nanos())
}
