//! `listener.max_connections`: a number, 0 for no cap, or `auto`, a cap that the open-file limit
//! leaves room for.

use crate::descriptors::{Descriptors, RESERVED};

/// The most proxy connections open at once (`listener.max_connections`, Dubbo's `accepts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxConnections {
    /// As many as the open-file limit leaves room for, each with an upstream connection, once
    /// the admin API and the process's own files are served
    /// ([`Descriptors::room_for_connections`]); no cap when the limit is unlimited.
    #[default]
    Auto,
    /// This many; 0: no cap.
    Count(u64),
}

impl MaxConnections {
    /// The cap for a process with `files` (0: no cap).
    ///
    /// # Errors
    ///
    /// `Auto` when the limit leaves no room for a single connection, with what to do.
    ///
    /// ```
    /// use spillway_server::config::MaxConnections;
    /// use spillway_server::descriptors::Descriptors;
    ///
    /// let files = Descriptors { limit: Some(1024), open: 24 };
    /// assert_eq!(MaxConnections::Count(100).resolve(files), Ok(100));
    /// assert_eq!(MaxConnections::Auto.resolve(files), Ok(436));
    /// let unlimited = Descriptors { limit: None, open: 24 };
    /// assert_eq!(MaxConnections::Auto.resolve(unlimited), Ok(0));
    /// ```
    pub fn resolve(self, files: Descriptors) -> Result<usize, String> {
        let cap = match (self, files.room_for_connections()) {
            (Self::Count(count), _) => count,
            (Self::Auto, None) => 0,
            (Self::Auto, Some(0)) => {
                return Err(format!(
                    "the open-file limit ({}) leaves no room for connections: {} descriptors \
                     are open and {RESERVED} are kept for the admin API and files, and each \
                     connection needs one more for its upstream; raise the limit (`ulimit -n`) \
                     or set `listener.max_connections`",
                    files.limit.unwrap_or_default(),
                    files.open,
                ))
            }
            (Self::Auto, Some(room)) => room,
        };
        Ok(usize::try_from(cap).unwrap_or(usize::MAX))
    }

    /// For a number above what `files` leaves room for, what that room is: past it, the
    /// proxy can run out of descriptors for upstream connections and the admin API.
    pub fn above_room(self, files: Descriptors) -> Option<u64> {
        match (self, files.room_for_connections()) {
            (Self::Count(count), Some(room)) if count == 0 || count > room => Some(room),
            _ => None,
        }
    }
}

super::auto_or_count::serde_auto_or_count!(
    MaxConnections,
    0..=u64::MAX,
    "a number of connections (0: no cap), or \"auto\""
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Deserialize, Serialize)]
    struct Listener {
        max_connections: MaxConnections,
    }

    fn parse(value: &str) -> Result<MaxConnections, String> {
        toml::from_str::<Listener>(&format!("max_connections = {value}"))
            .map(|listener| listener.max_connections)
            .map_err(|err| err.message().to_owned())
    }

    #[test]
    fn a_number_zero_or_auto_and_nothing_else() {
        assert_eq!(parse("\"auto\""), Ok(MaxConnections::Auto));
        assert_eq!(parse("0"), Ok(MaxConnections::Count(0)));
        assert_eq!(parse("5000"), Ok(MaxConnections::Count(5000)));
        for bad in ["-1", "\"many\"", "1.5", "true"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("a number of connections"), "{bad}: {err}");
        }
        let text = toml::to_string(&Listener {
            max_connections: MaxConnections::Auto,
        })
        .unwrap();
        assert_eq!(text.trim(), "max_connections = \"auto\"");
    }

    #[test]
    fn auto_leaves_room_and_says_so_when_there_is_none() {
        let files = |limit| Descriptors {
            limit: Some(limit),
            open: 30,
        };
        assert_eq!(
            MaxConnections::Auto.resolve(files(20_000)),
            Ok(((20_000 - 30 - RESERVED) / 2) as usize)
        );
        let err = MaxConnections::Auto.resolve(files(100)).unwrap_err();
        assert!(err.contains("open-file limit (100)"), "{err}");
        assert!(err.contains("30 descriptors are open"), "{err}");
        assert!(err.contains("ulimit -n"), "{err}");
        // A number is what it says, whatever the limit; above the room it is pointed out.
        assert_eq!(MaxConnections::Count(7).resolve(files(100)), Ok(7));
        assert_eq!(MaxConnections::Count(7).above_room(files(100)), Some(0));
        assert_eq!(MaxConnections::Count(0).above_room(files(1000)), Some(421));
        assert_eq!(MaxConnections::Count(421).above_room(files(1000)), None);
        assert_eq!(MaxConnections::Auto.above_room(files(100)), None);
    }
}
