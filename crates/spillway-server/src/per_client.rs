//! The proxy's connections by client: one client (an address, or a network of the listener's
//! `peer_ip` prefixes) holds at most `listener.max_connections_per_client` places at once, so
//! that one cannot take every place under `max_connections` (an attack held 300 of 300 with
//! silent WebSockets, and 300 with TLS handshakes sent a byte every half second). A place is
//! held by each open connection (a WebSocket's until its tunnel closes) and by each request
//! that runs on after its client left.

use spillway_tower::keys::{client_address, PeerIpPrefixes};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The places each client holds, under a cap.
#[derive(Debug)]
pub(crate) struct ClientConnections {
    /// The most one client holds (0: no cap).
    max: usize,
    prefixes: PeerIpPrefixes,
    /// Places held by client network (clients with none are not kept).
    open: Mutex<HashMap<IpAddr, usize>>,
    /// Connections closed at once because their client held its cap.
    refused: AtomicU64,
}

impl ClientConnections {
    /// At most `max` places a client (0: no cap), clients told apart by `prefixes`.
    pub(crate) fn new(max: usize, prefixes: PeerIpPrefixes) -> Arc<Self> {
        Arc::new(Self {
            max,
            prefixes,
            open: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
        })
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new connection from `ip`, held until dropped; `None` (counted) if its
    /// client holds its cap.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSeat> {
        if self.max == 0 {
            return Some(ClientSeat::none());
        }
        let network = network(self.prefixes, ip);
        let mut open = self.open();
        let held = open.entry(network).or_insert(0);
        if *held >= self.max {
            drop(open);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *held += 1;
        Some(ClientSeat(Some((Arc::clone(self), network))))
    }

    /// One more place for the client at `network` (a tunnel: its connection's place went back
    /// when hyper handed it over), whatever its cap.
    fn add(self: &Arc<Self>, network: IpAddr) -> ClientSeat {
        *self.open().entry(network).or_insert(0) += 1;
        ClientSeat(Some((Arc::clone(self), network)))
    }

    /// One more place for the client at `network` if its cap leaves one (a request of its that
    /// runs on after it left), counting the place of the connection it left on as free: that
    /// connection is closing (HTTP/1.1), or holds one place however many of its streams run
    /// on (HTTP/2), so that a client holds at most one more than its cap.
    fn add_within_cap(self: &Arc<Self>, network: IpAddr) -> Option<ClientSeat> {
        let mut open = self.open();
        let held = open.entry(network).or_insert(0);
        if *held > self.max {
            return None;
        }
        *held += 1;
        Some(ClientSeat(Some((Arc::clone(self), network))))
    }

    /// The cap (0: none).
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Connections closed at once because their client held its cap.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Clients holding a place now (none are kept with no cap).
    pub(crate) fn clients(&self) -> usize {
        self.open().len()
    }
}

/// The network a client at `ip` is: its address (an IPv4 client's, however written) cut to
/// the prefix length of its family.
pub(crate) fn network(prefixes: PeerIpPrefixes, ip: IpAddr) -> IpAddr {
    match client_address(ip) {
        IpAddr::V4(v4) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(prefixes.v4()))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(prefixes.v6()))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

/// One place of a client's, given back when dropped.
#[derive(Debug)]
pub(crate) struct ClientSeat(Option<(Arc<ClientConnections>, IpAddr)>);

impl ClientSeat {
    /// A place under no cap.
    pub(crate) fn none() -> Self {
        Self(None)
    }

    /// One more place of the same client's, whatever its cap (see [`ClientConnections::add`]).
    pub(crate) fn another(&self) -> Self {
        match &self.0 {
            Some((clients, network)) => clients.add(*network),
            None => Self::none(),
        }
    }

    /// One more place of the same client's, if its cap leaves one.
    pub(crate) fn another_within_cap(&self) -> Option<Self> {
        match &self.0 {
            Some((clients, network)) => clients.add_within_cap(*network),
            None => Some(Self::none()),
        }
    }
}

impl Drop for ClientSeat {
    fn drop(&mut self) {
        let Some((clients, network)) = self.0.take() else {
            return;
        };
        let mut open = clients.open();
        if let Some(held) = open.get_mut(&network) {
            *held -= 1;
            if *held == 0 {
                open.remove(&network);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_client_holds_at_most_its_cap_and_gets_its_places_back() {
        let clients = ClientConnections::new(2, PeerIpPrefixes::new(32, 64).unwrap());
        let first = clients.admit(ip("192.0.2.1")).unwrap();
        let _second = clients.admit(ip("::ffff:192.0.2.1")).unwrap();
        assert!(clients.admit(ip("192.0.2.1")).is_none(), "the same client");
        let _other = clients.admit(ip("192.0.2.2")).unwrap();
        // One IPv6 client is its /64.
        let _six = clients.admit(ip("2001:db8::1")).unwrap();
        let _seven = clients.admit(ip("2001:db8::2")).unwrap();
        assert!(clients.admit(ip("2001:db8::3")).is_none());
        assert_eq!((clients.refused(), clients.clients()), (2, 3));
        drop(first);
        assert!(clients.admit(ip("192.0.2.1")).is_some());
    }

    #[test]
    fn another_place_is_taken_past_the_cap_and_holds_the_client_s_connections_out() {
        let clients = ClientConnections::new(1, PeerIpPrefixes::new(24, 64).unwrap());
        let connection = clients.admit(ip("192.0.2.1")).unwrap();
        // Its tunnels hold a place each, whatever the cap.
        let running: Vec<_> = (0..3).map(|_| connection.another()).collect();
        assert!(
            connection.another_within_cap().is_none(),
            "a run-on respects the cap"
        );
        drop(connection);
        assert!(clients.admit(ip("192.0.2.200")).is_none(), "one /24");
        drop(running);
        let again = clients.admit(ip("192.0.2.200")).unwrap();
        // A run-on may take the place of the connection it left on, and no more.
        let run_on = again.another_within_cap().expect("the connection's place");
        assert!(
            again.another_within_cap().is_none(),
            "one over its cap at most"
        );
        drop(again);
        assert!(
            clients.admit(ip("192.0.2.1")).is_none(),
            "held by the run-on"
        );
        drop(run_on);
    }

    #[test]
    fn networks_are_cut_to_their_prefix() {
        let prefixes = PeerIpPrefixes::new(24, 48).unwrap();
        assert_eq!(network(prefixes, ip("192.0.2.77")), ip("192.0.2.0"));
        assert_eq!(network(prefixes, ip("::ffff:192.0.2.77")), ip("192.0.2.0"));
        assert_eq!(network(prefixes, ip("2001:db8:1:2::9")), ip("2001:db8:1::"));
        let whole = PeerIpPrefixes::new(32, 128).unwrap();
        assert_eq!(network(whole, ip("192.0.2.77")), ip("192.0.2.77"));
        assert_eq!(network(whole, ip("2001:db8::9")), ip("2001:db8::9"));
    }

    #[test]
    fn no_cap_keeps_nothing() {
        let clients = ClientConnections::new(0, PeerIpPrefixes::default());
        let seats: Vec<_> = (0..100)
            .map(|_| clients.admit(ip("192.0.2.1")).unwrap())
            .collect();
        let more: Vec<_> = seats.iter().map(ClientSeat::another).collect();
        assert_eq!((clients.clients(), more.len()), (0, 100));
    }
}
