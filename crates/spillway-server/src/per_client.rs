//! The proxy's connections by client: one client (an address, or a network of the listener's
//! `peer_ip` prefixes) holds at most `listener.max_connections_per_client` open at once, so
//! that one cannot take every place under `max_connections` (an attack held 300 of 300 with
//! silent WebSockets, and 300 with TLS handshakes sent a byte every half second).

use spillway_tower::keys::PeerIpPrefixes;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The open connections of each client, under a cap.
#[derive(Debug)]
pub(crate) struct ClientConnections {
    /// The most one client holds (0: no cap).
    max: usize,
    prefixes: PeerIpPrefixes,
    /// Open connections by client key (clients with none are not kept).
    open: Mutex<HashMap<String, usize>>,
    /// Connections closed at once because their client held its cap.
    refused: AtomicU64,
}

impl ClientConnections {
    /// At most `max` connections a client (0: no cap), clients keyed by `prefixes`.
    pub(crate) fn new(max: usize, prefixes: PeerIpPrefixes) -> Arc<Self> {
        Arc::new(Self {
            max,
            prefixes,
            open: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
        })
    }

    /// A place for a new connection from `ip`, held until dropped; `None` (counted) if its
    /// client holds its cap.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSeat> {
        if self.max == 0 {
            return Some(ClientSeat::none());
        }
        let key = self.prefixes.key(ip);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let held = open.entry(key.clone()).or_insert(0);
        if *held >= self.max {
            drop(open);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *held += 1;
        Some(ClientSeat(Some((Arc::clone(self), key))))
    }

    /// The cap (0: none).
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Connections closed at once because their client held its cap.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Clients with a connection open now.
    pub(crate) fn clients(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// One connection's place under its client's cap, given back when dropped.
#[derive(Debug)]
pub(crate) struct ClientSeat(Option<(Arc<ClientConnections>, String)>);

impl ClientSeat {
    /// A place under no cap.
    pub(crate) fn none() -> Self {
        Self(None)
    }
}

impl Drop for ClientSeat {
    fn drop(&mut self) {
        let Some((clients, key)) = self.0.take() else {
            return;
        };
        let mut open = clients.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = open.get_mut(&key) {
            *held -= 1;
            if *held == 0 {
                open.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_holds_at_most_its_cap_and_gets_its_places_back() {
        let clients = ClientConnections::new(2, PeerIpPrefixes::new(32, 64).unwrap());
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
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
    fn no_cap_keeps_nothing() {
        let clients = ClientConnections::new(0, PeerIpPrefixes::default());
        let seats: Vec<_> = (0..100)
            .map(|_| clients.admit("192.0.2.1".parse().unwrap()).unwrap())
            .collect();
        assert_eq!((clients.clients(), seats.len()), (0, 100));
    }
}
