//! `listener.max_connections_per_client`: the most proxy connections one client holds open.

/// The most connections one client (an address, or a network of the listener's `peer_ip`
/// prefixes) holds open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxPerClient {
    /// Half of `max_connections`, none when it has no cap or one below 32: one client can hold
    /// no more than half the places, and a network behind one address (a NAT, an office, a
    /// load generator) still has many (at least 16).
    #[default]
    Auto,
    /// This many; 0: no cap.
    Count(u64),
}

impl MaxPerClient {
    /// The cap under a listener cap of `max_connections` (0: none), 0 for no cap.
    ///
    /// ```
    /// use spillway_server::config::MaxPerClient;
    ///
    /// assert_eq!(MaxPerClient::Auto.resolve(10_000), 5_000);
    /// assert_eq!(MaxPerClient::Auto.resolve(32), 16);
    /// assert_eq!(MaxPerClient::Auto.resolve(31), 0);
    /// assert_eq!(MaxPerClient::Auto.resolve(0), 0);
    /// assert_eq!(MaxPerClient::Count(3).resolve(10_000), 3);
    /// ```
    pub fn resolve(self, max_connections: usize) -> usize {
        match self {
            Self::Count(count) => usize::try_from(count).unwrap_or(usize::MAX),
            Self::Auto if max_connections < 32 => 0,
            Self::Auto => max_connections / 2,
        }
    }
}

super::auto_or_count::serde_auto_or_count!(
    MaxPerClient,
    0..=u64::MAX,
    "a number of connections (0: no cap), or \"auto\""
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Deserialize, Serialize)]
    struct Listener {
        max_connections_per_client: MaxPerClient,
    }

    fn parse(value: &str) -> Result<MaxPerClient, String> {
        toml::from_str::<Listener>(&format!("max_connections_per_client = {value}"))
            .map(|listener| listener.max_connections_per_client)
            .map_err(|err| err.message().to_owned())
    }

    #[test]
    fn a_number_zero_or_auto_and_nothing_else() {
        assert_eq!(parse("\"auto\""), Ok(MaxPerClient::Auto));
        assert_eq!(parse("0"), Ok(MaxPerClient::Count(0)));
        assert_eq!(parse("64"), Ok(MaxPerClient::Count(64)));
        for bad in ["-1", "\"many\"", "1.5", "true"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("a number of connections"), "{bad}: {err}");
        }
    }
}
