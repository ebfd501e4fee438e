//! Open file descriptors. The proxy's client connections share the process's open-file limit
//! with the upstream connections they need, the admin API's connections and the files and
//! sockets the rest of the process opens (the configuration, `/proc`, Redis). Accepted without
//! a cap, a flood of client connections takes every descriptor: each request then fails with
//! 502 for want of one for its upstream connection, and the admin API cannot accept. The
//! automatic cap keeps room for all of those, and upstream connections have a cap of their own
//! from the same room, for HTTP/2 clients (many requests on one connection) and idle pools.

use spillway::dubbo::{ExecuteLimiter, ExecutePermit};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::LazyLock;

/// Descriptors kept out of the proxy's reach besides each connection's upstream one: the admin
/// API's connections (at most [`crate::admin::MAX_CONNECTIONS`]) and as many again for files,
/// `/proc`, Redis and the runtime's own.
pub const RESERVED: u64 = 2 * crate::admin::MAX_CONNECTIONS as u64;

/// The process's open-file limit and how many descriptors it has open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    /// The soft limit on open files (`RLIMIT_NOFILE`); `None`: unlimited, or unknown.
    pub limit: Option<u64>,
    /// Descriptors open now.
    pub open: u64,
}

impl Descriptors {
    /// The calling process's limit and open descriptors (counted in `/proc/self/fd`; 0 where
    /// that cannot be read).
    pub fn now() -> Self {
        Self {
            limit: limit(),
            open: open(),
        }
    }

    /// The most client connections the limit leaves room for, each with one upstream
    /// connection, once [`RESERVED`] and the descriptors open now are set aside; `None` when
    /// the limit is unlimited or unknown.
    ///
    /// ```
    /// use spillway_server::descriptors::{Descriptors, RESERVED};
    ///
    /// let files = Descriptors { limit: Some(1024), open: 20 };
    /// assert_eq!(files.room_for_connections(), Some((1024 - 20 - RESERVED) / 2));
    /// // No room at all:
    /// assert_eq!(Descriptors { limit: Some(100), open: 20 }.room_for_connections(), Some(0));
    /// assert_eq!(Descriptors { limit: None, open: 20 }.room_for_connections(), None);
    /// ```
    pub fn room_for_connections(self) -> Option<u64> {
        Some(self.spare()? / 2)
    }

    /// The most upstream connections once `clients` client connections (0: no cap) are
    /// allowed for: what they leave, but never less than
    /// [`room_for_connections`](Self::room_for_connections) (a number of clients set above
    /// that room is the operator's choice, warned of); `None` when the limit is unlimited or
    /// unknown.
    ///
    /// ```
    /// use spillway_server::descriptors::{Descriptors, RESERVED};
    ///
    /// let files = Descriptors { limit: Some(1024), open: 20 };
    /// let room = files.room_for_connections().unwrap();
    /// assert_eq!(files.room_for_upstreams(100), Some(1024 - 20 - RESERVED - 100));
    /// assert_eq!(files.room_for_upstreams(5000), Some(room));
    /// assert_eq!(files.room_for_upstreams(0), Some(room));
    /// ```
    pub fn room_for_upstreams(self, clients: usize) -> Option<u64> {
        let spare = self.spare()?;
        let room = spare / 2;
        if clients == 0 {
            return Some(room);
        }
        Some(spare.saturating_sub(clients as u64).max(room))
    }

    /// Descriptors neither open nor reserved.
    fn spare(self) -> Option<u64> {
        Some(
            self.limit?
                .saturating_sub(self.open)
                .saturating_sub(RESERVED),
        )
    }
}

/// The upstream connections open in this process, counted as Dubbo's `executes` counts calls
/// in flight (one key): descriptors belong to the process, so the count covers every pool of
/// every proxy in it.
static UPSTREAM: LazyLock<ExecuteLimiter> = LazyLock::new(ExecuteLimiter::new);
/// The key [`UPSTREAM`] counts under.
const UPSTREAM_KEY: &str = "upstream connections";
/// The most upstream connections (0: no cap), set where the proxy's connection cap is
/// ([`set_upstream_cap`]).
static UPSTREAM_MAX: AtomicU32 = AtomicU32::new(0);

/// A place for one open upstream connection under the process's cap; given back when dropped,
/// with the connection.
pub(crate) type UpstreamSeat = ExecutePermit;

/// Out of places for upstream connections: one more could leave the process without
/// descriptors for the admin API.
#[derive(Debug)]
pub(crate) struct NoUpstreamSeat {
    max: u32,
}

impl std::fmt::Display for NoUpstreamSeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} upstream connections are open, as many as the open-file limit leaves room for",
            self.max
        )
    }
}

impl std::error::Error for NoUpstreamSeat {}

/// Caps the process's upstream connections at `max` (0: no cap), from now on.
pub(crate) fn set_upstream_cap(max: u64) {
    UPSTREAM_MAX.store(u32::try_from(max).unwrap_or(u32::MAX), Ordering::Release);
}

/// A place for a new upstream connection, unless the process's cap is reached.
pub(crate) fn upstream_seat() -> Result<UpstreamSeat, NoUpstreamSeat> {
    seat(&UPSTREAM, UPSTREAM_MAX.load(Ordering::Acquire))
}

/// A place under `max` (0: no cap) on `limiter`'s upstream key.
fn seat(limiter: &ExecuteLimiter, max: u32) -> Result<UpstreamSeat, NoUpstreamSeat> {
    limiter
        .try_acquire(UPSTREAM_KEY, max)
        .map_err(|_| NoUpstreamSeat { max })
}

/// The cap on the process's upstream connections (0: none).
pub(crate) fn upstream_cap() -> u32 {
    UPSTREAM_MAX.load(Ordering::Acquire)
}

/// Upstream connections open in this process now.
pub(crate) fn upstream_open() -> u64 {
    UPSTREAM.in_flight(UPSTREAM_KEY)
}

/// Raises the process's soft limit on open files to its hard limit, as Go's runtime does at
/// start: distributions keep the soft limit low (often 1024) for programs that still use
/// `select(2)`, which spillway does not. Returns the limit in force afterwards; when raising
/// fails, the limit stays as it was, and that is returned.
pub fn raise_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let now = getrlimit(Resource::Nofile);
        if now.current.is_some() && now.current != now.maximum {
            let raised = Rlimit {
                current: now.maximum,
                maximum: now.maximum,
            };
            if let Err(err) = setrlimit(Resource::Nofile, raised) {
                tracing::debug!(%err, "cannot raise the open-file limit");
            }
        }
    }
    limit()
}

/// The soft limit on open files; `None`: unlimited, or unknown.
fn limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Descriptors open now, less the one reading the directory; 0 where it cannot be read.
fn open() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .map_or(0, |entries| (entries.count() as u64).saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_half_of_what_the_reserve_and_open_files_leave() {
        let files = |limit, open| Descriptors {
            limit: Some(limit),
            open,
        };
        assert_eq!(
            files(1024, 24).room_for_connections(),
            Some((1024 - 24 - RESERVED) / 2)
        );
        assert_eq!(files(RESERVED + 24 + 2, 24).room_for_connections(), Some(1));
        assert_eq!(files(RESERVED + 24 + 1, 24).room_for_connections(), Some(0));
        assert_eq!(files(10, 24).room_for_connections(), Some(0));
        assert_eq!(files(u64::MAX, u64::MAX).room_for_connections(), Some(0));
        let unlimited = Descriptors {
            limit: None,
            open: 24,
        };
        assert_eq!(unlimited.room_for_connections(), None);
    }

    #[test]
    fn seats_are_taken_up_to_the_cap_and_given_back_on_drop() {
        let limiter = ExecuteLimiter::new();
        // No cap.
        let many: Vec<_> = (0..100).map(|_| seat(&limiter, 0).unwrap()).collect();
        drop(many);
        let (first, _second) = (seat(&limiter, 2).unwrap(), seat(&limiter, 2).unwrap());
        let err = seat(&limiter, 2).unwrap_err();
        assert_eq!(err.max, 2);
        assert!(
            err.to_string().contains("2 upstream connections are open"),
            "{err}"
        );
        drop(first);
        assert_eq!(limiter.in_flight(UPSTREAM_KEY), 1);
        let _third = seat(&limiter, 2).unwrap();
    }

    #[test]
    fn seats_racing_threads_never_exceed_the_cap() {
        let limiter = ExecuteLimiter::new();
        let most = AtomicU32::new(0);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..20_000 {
                        if let Ok(seat) = seat(&limiter, 3) {
                            let open = limiter.in_flight(UPSTREAM_KEY) as u32;
                            most.fetch_max(open, Ordering::AcqRel);
                            drop(seat);
                        }
                    }
                });
            }
        });
        assert!(most.load(Ordering::Acquire) <= 3);
        assert_eq!(limiter.in_flight(UPSTREAM_KEY), 0);
    }

    #[test]
    fn upstreams_get_what_the_clients_leave_and_at_least_half() {
        let files = Descriptors {
            limit: Some(1000),
            open: 40,
        };
        let spare = 1000 - 40 - RESERVED;
        assert_eq!(files.room_for_upstreams(100), Some(spare - 100));
        assert_eq!(
            files.room_for_upstreams(spare as usize / 2),
            Some(spare - spare / 2)
        );
        assert_eq!(files.room_for_upstreams(10_000), Some(spare / 2));
        assert_eq!(files.room_for_upstreams(0), Some(spare / 2));
        let unlimited = Descriptors {
            limit: None,
            open: 40,
        };
        assert_eq!(unlimited.room_for_upstreams(100), None);
    }

    #[test]
    fn this_process_has_descriptors_open_and_a_limit_above_them() {
        let now = Descriptors::now();
        // At least standard input, output and error.
        assert!(now.open >= 3, "{now:?}");
        if let Some(limit) = now.limit {
            assert!(limit > now.open, "{now:?}");
        }
    }
}
