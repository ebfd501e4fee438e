//! Open file descriptors. The proxy's client connections share the process's open-file limit
//! with the upstream connections they need, the admin API's connections and the files and
//! sockets the rest of the process opens (the configuration, `/proc`, Redis). Accepted without
//! a cap, a flood of client connections takes every descriptor: each request then fails with
//! 502 for want of one for its upstream connection, and the admin API cannot accept. The
//! automatic cap keeps room for all of those, and upstream connections have a cap of their own
//! from the same room, for HTTP/2 clients (many requests on one connection) and idle pools.

use std::sync::atomic::{AtomicUsize, Ordering};

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

/// The upstream connections open in this process, and the most that may be (0: no cap), set
/// where the proxy's connection cap is ([`set_upstream_cap`]): descriptors belong to the
/// process, so the count covers every pool of every proxy in it.
static UPSTREAM: Seats = Seats::new();

/// Places for open connections under a cap (0: none).
#[derive(Debug)]
struct Seats {
    open: AtomicUsize,
    max: AtomicUsize,
}

impl Seats {
    const fn new() -> Self {
        Self {
            open: AtomicUsize::new(0),
            max: AtomicUsize::new(0),
        }
    }

    fn take(&'static self) -> Result<UpstreamSeat, NoUpstreamSeat> {
        let max = self.max.load(Ordering::Acquire);
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (max == 0 || open < max).then_some(open + 1)
            });
        match taken {
            Ok(_) => Ok(UpstreamSeat(self)),
            Err(_) => Err(NoUpstreamSeat { max }),
        }
    }
}

/// A place for one open upstream connection under the process's cap; given back when dropped,
/// with the connection.
#[derive(Debug)]
pub(crate) struct UpstreamSeat(&'static Seats);

impl Drop for UpstreamSeat {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Out of places for upstream connections: one more could leave the process without
/// descriptors for the admin API.
#[derive(Debug)]
pub(crate) struct NoUpstreamSeat {
    max: usize,
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
pub(crate) fn set_upstream_cap(max: usize) {
    UPSTREAM.max.store(max, Ordering::Release);
}

/// A place for a new upstream connection, unless the process's cap is reached.
pub(crate) fn upstream_seat() -> Result<UpstreamSeat, NoUpstreamSeat> {
    UPSTREAM.take()
}

/// The cap on the process's upstream connections (0: none).
pub(crate) fn upstream_cap() -> usize {
    UPSTREAM.max.load(Ordering::Acquire)
}

/// Upstream connections open in this process now.
pub(crate) fn upstream_open() -> usize {
    UPSTREAM.open.load(Ordering::Acquire)
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
        let seats: &'static Seats = Box::leak(Box::new(Seats::new()));
        // No cap.
        let many: Vec<_> = (0..100).map(|_| seats.take().unwrap()).collect();
        drop(many);
        seats.max.store(2, Ordering::Release);
        let (first, _second) = (seats.take().unwrap(), seats.take().unwrap());
        let err = seats.take().unwrap_err();
        assert_eq!(err.max, 2);
        assert!(
            err.to_string().contains("2 upstream connections are open"),
            "{err}"
        );
        drop(first);
        assert_eq!(seats.open.load(Ordering::Acquire), 1);
        let _third = seats.take().unwrap();
    }

    #[test]
    fn seats_racing_threads_never_exceed_the_cap() {
        let seats: &'static Seats = Box::leak(Box::new(Seats::new()));
        seats.max.store(3, Ordering::Release);
        let most = std::sync::Arc::new(AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..4 {
                let most = most.clone();
                scope.spawn(move || {
                    for _ in 0..20_000 {
                        if let Ok(seat) = seats.take() {
                            most.fetch_max(seats.open.load(Ordering::Acquire), Ordering::AcqRel);
                            drop(seat);
                        }
                    }
                });
            }
        });
        assert!(most.load(Ordering::Acquire) <= 3);
        assert_eq!(seats.open.load(Ordering::Acquire), 0);
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
