//! Open file descriptors. The proxy's client connections share the process's open-file limit
//! with the upstream connections they need, the admin API's connections and the files and
//! sockets the rest of the process opens (the configuration, `/proc`, Redis). Accepted without
//! a cap, a flood of client connections takes every descriptor: each request then fails with
//! 502 for want of one for its upstream connection, and the admin API cannot accept. The
//! automatic cap keeps room for all of those.

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
        let limit = self.limit?;
        Some(limit.saturating_sub(self.open).saturating_sub(RESERVED) / 2)
    }
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
    fn this_process_has_descriptors_open_and_a_limit_above_them() {
        let now = Descriptors::now();
        // At least standard input, output and error.
        assert!(now.open >= 3, "{now:?}");
        if let Some(limit) = now.limit {
            assert!(limit > now.open, "{now:?}");
        }
    }
}
