//! Who may hold the admin API's connections: a cap on all of them, a smaller budget for those
//! that have not shown the token yet, and a cap on live streams. A silent or unauthenticated
//! connection can never take the operator's place: past its budget, the oldest such connection
//! is closed to make room, and only when every place is held by one that showed the token is a
//! newcomer refused (503, at once).

use crate::per_client::network;
use spillway_tower::keys::PeerIpPrefixes;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The caps ([`crate::config::AdminConfig`]'s `max_connections`, `max_pending`,
/// `max_streams`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub(crate) connections: usize,
    pub(crate) pending: usize,
    pub(crate) streams: usize,
    /// The networks a client's connections are counted by (the listener's `peer_ip`
    /// prefixes, as the proxy's per-client cap counts them).
    pub(crate) networks: PeerIpPrefixes,
}

/// The admin listener's places.
#[derive(Debug)]
pub(crate) struct Gate {
    caps: Caps,
    places: Mutex<Places>,
    streams: AtomicUsize,
    /// Where evictions and refusals are counted (the admin listener's counts, once it serves).
    counts: std::sync::OnceLock<crate::conn::ListenerCounts>,
}

#[derive(Debug, Default)]
struct Places {
    open: usize,
    next: u64,
    /// The connections that have not shown the token, oldest first: their number, their
    /// peer's network ([`network`]), and what closes each.
    pending: VecDeque<(u64, IpAddr, Arc<Eviction>)>,
}

impl Places {
    /// Which pending connection makes room: the oldest of the peer network that holds the
    /// most pending places, so that a flood from one address (or a few, or every address of
    /// one network of the `peer_ip` prefixes, an IPv6 /64 by default) evicts only its own, never the operator's connection from another,
    /// however long its head takes to come.
    fn to_evict(&self) -> Option<usize> {
        let held = |ip: &IpAddr| self.pending.iter().filter(|(_, at, _)| at == ip).count();
        let most = self.pending.iter().map(|(_, ip, _)| held(ip)).max()?;
        // Oldest first: the first of an address holding the most.
        self.pending.iter().position(|(_, ip, _)| held(ip) == most)
    }
}

/// How a pending connection is closed to make room.
#[derive(Debug, Default)]
struct Eviction {
    /// Set (under the places' lock) when its place was taken back.
    done: std::sync::atomic::AtomicBool,
    notify: Notify,
}

/// What the gate says to a newcomer.
#[derive(Debug)]
pub(crate) enum Admitted {
    /// A place, pending until its first authorized request.
    Seat(Seat),
    /// Every place is held by a connection that showed the token: 503.
    Full,
}

/// One connection's place: given back when dropped.
#[derive(Debug)]
pub(crate) struct Seat {
    gate: Arc<Gate>,
    id: u64,
    /// Notified when the connection is closed to make room.
    eviction: Arc<Eviction>,
}

impl Gate {
    pub(crate) fn new(caps: Caps) -> Arc<Self> {
        Arc::new(Self {
            caps,
            places: Mutex::new(Places::default()),
            streams: AtomicUsize::new(0),
            counts: std::sync::OnceLock::new(),
        })
    }

    /// Counts evictions and refusals in `counts` from now on.
    pub(crate) fn count_in(&self, counts: crate::conn::ListenerCounts) {
        let _ = self.counts.set(counts);
    }

    fn count(&self, what: impl FnOnce(&crate::conn::ListenerCounts)) {
        if let Some(counts) = self.counts.get() {
            what(counts);
        }
    }

    fn places(&self) -> std::sync::MutexGuard<'_, Places> {
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A newcomer from `peer`: a pending place, after closing a pending connection (see
    /// `Places::to_evict`) if the pending budget or the cap is reached; `Full` if every place
    /// is held by a trusted one.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Admitted {
        let mut places = self.places();
        let over =
            places.pending.len() >= self.caps.pending || places.open >= self.caps.connections;
        if over {
            let evicted = places.to_evict().and_then(|at| places.pending.remove(at));
            match evicted {
                Some((_, _, eviction)) => {
                    // Its place is the newcomer's from now; the connection closes soon.
                    places.open -= 1;
                    eviction.done.store(true, Ordering::Release);
                    eviction.notify.notify_one();
                    self.count(crate::conn::ListenerCounts::count_eviction);
                }
                None => {
                    self.count(crate::conn::ListenerCounts::count_full_refusal);
                    return Admitted::Full;
                }
            }
        }
        places.open += 1;
        let id = places.next;
        places.next += 1;
        let eviction = Arc::new(Eviction::default());
        places
            .pending
            .push_back((id, network(self.caps.networks, peer), Arc::clone(&eviction)));
        Admitted::Seat(Seat {
            gate: Arc::clone(self),
            id,
            eviction,
        })
    }

    /// A live stream's place, if the cap leaves one (else counted as refused).
    pub(crate) fn stream(self: &Arc<Self>) -> Option<StreamPlace> {
        let cap = self.caps.streams;
        let taken = self
            .streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < cap).then_some(open + 1)
            })
            .is_ok();
        if !taken {
            self.count(crate::conn::ListenerCounts::count_stream_refusal);
            return None;
        }
        Some(StreamPlace(Arc::clone(self)))
    }
}

impl crate::conn::Occupied for Gate {
    fn occupancy(&self) -> crate::conn::Occupancy {
        let (open, pending) = {
            let places = self.places();
            (places.open, places.pending.len())
        };
        crate::conn::Occupancy {
            open,
            max: self.caps.connections,
            paused: false,
            pending,
            streams: self.streams.load(Ordering::Acquire),
        }
    }
}

impl Seat {
    /// The connection showed the token (or, with none set, made a request): it is no longer
    /// pending, and never closed to make room.
    pub(crate) fn trust(&self) {
        let mut places = self.gate.places();
        if let Some(at) = places.pending.iter().position(|(id, ..)| *id == self.id) {
            places.pending.remove(at);
        }
    }

    /// Completes when the connection is closed to make room.
    pub(crate) async fn evicted(&self) {
        self.eviction.notify.notified().await;
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut places = self.gate.places();
        match places.pending.iter().position(|(id, ..)| *id == self.id) {
            Some(at) => {
                places.pending.remove(at);
                places.open -= 1;
            }
            // Evicted: its place was given back then.
            None if self.eviction.done.load(Ordering::Acquire) => {}
            // Trusted: its place goes back now.
            None => places.open -= 1,
        }
    }
}

/// A live stream's place, given back when dropped.
#[derive(Debug)]
pub(crate) struct StreamPlace(Arc<Gate>);

impl Drop for StreamPlace {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(connections: usize, pending: usize) -> Arc<Gate> {
        gate_by(connections, pending, PeerIpPrefixes::default())
    }

    fn gate_by(connections: usize, pending: usize, networks: PeerIpPrefixes) -> Arc<Gate> {
        let gate = Gate::new(Caps {
            connections,
            pending,
            streams: 2,
            networks,
        });
        gate.count_in(crate::conn::ListenerCounts::default());
        gate
    }

    /// (open, cap).
    fn occupancy(gate: &Gate) -> (usize, usize) {
        let now = crate::conn::Occupied::occupancy(gate);
        (now.open, now.max)
    }

    fn pending(gate: &Gate) -> usize {
        crate::conn::Occupied::occupancy(gate).pending
    }

    fn evicted(gate: &Gate) -> u64 {
        gate.counts.get().unwrap().admin_refusals().0
    }

    /// (newcomers refused when full, streams refused).
    fn refused(gate: &Gate) -> (u64, u64) {
        let (_, full, streams) = gate.counts.get().unwrap().admin_refusals();
        (full, streams)
    }

    const FLOOD: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));

    fn seat(admitted: Admitted) -> Seat {
        match admitted {
            Admitted::Seat(seat) => seat,
            Admitted::Full => panic!("refused"),
        }
    }

    #[tokio::test]
    async fn past_the_pending_budget_the_oldest_pending_connection_makes_room() {
        let gate = gate(4, 2);
        let first = seat(gate.admit(FLOOD));
        let second = seat(gate.admit(FLOOD));
        // A third that has not shown the token either: the first is closed for it.
        let third = seat(gate.admit(FLOOD));
        tokio::time::timeout(std::time::Duration::from_secs(5), first.evicted())
            .await
            .expect("the oldest was told to close");
        assert_eq!(occupancy(&gate), (2, 4));
        assert_eq!((pending(&gate), evicted(&gate)), (2, 1));
        drop(first); // its place went back when it was evicted
        assert_eq!(occupancy(&gate), (2, 4));
        second.trust();
        third.trust();
        assert_eq!(pending(&gate), 0);
        drop(second);
        assert_eq!(occupancy(&gate), (1, 4));
        drop(third);
        assert_eq!(occupancy(&gate), (0, 4));
    }

    #[test]
    fn trusted_connections_are_never_evicted_and_a_full_gate_refuses() {
        let gate = gate(3, 2);
        let trusted: Vec<Seat> = (0..3)
            .map(|_| {
                let seat = seat(gate.admit(FLOOD));
                seat.trust();
                seat
            })
            .collect();
        assert!(matches!(gate.admit(FLOOD), Admitted::Full));
        assert_eq!(refused(&gate), (1, 0));
        assert_eq!(evicted(&gate), 0);
        drop(trusted);
        assert_eq!(occupancy(&gate), (0, 3));
        // At the cap with one pending, a newcomer takes the pending one's place.
        let a = seat(gate.admit(FLOOD));
        a.trust();
        let b = seat(gate.admit(FLOOD));
        b.trust();
        let _c = seat(gate.admit(FLOOD));
        let _d = seat(gate.admit(FLOOD));
        assert_eq!((occupancy(&gate), evicted(&gate)), ((3, 3), 1));
    }

    #[test]
    fn a_flood_from_one_address_evicts_only_its_own() {
        let gate = gate(64, 16);
        let operator = seat(gate.admit(IpAddr::V4(std::net::Ipv4Addr::new(10, 9, 9, 9))));
        let flood: Vec<Seat> = (0..1_000).map(|_| seat(gate.admit(FLOOD))).collect();
        assert_eq!(evicted(&gate), 1_000 - 15);
        assert!(
            !operator.eviction.done.load(Ordering::Acquire),
            "the operator's connection, the oldest, kept its place"
        );
        drop(flood);
        operator.trust();
        assert_eq!(pending(&gate), 0);
    }

    /// The networks are the listener's `peer_ip` prefixes, as for the proxy's per-client cap:
    /// with IPv4 clients keyed by /24, a flood from every address of one /24 is one client.
    #[test]
    fn a_flood_from_every_address_of_a_peer_ip_network_evicts_only_its_own() {
        let by_24 = PeerIpPrefixes::new(24, 64).unwrap();
        for (networks, operator_kept) in [(by_24, true), (PeerIpPrefixes::default(), false)] {
            let gate = gate_by(64, 16, networks);
            let operator = seat(gate.admit(IpAddr::from([192, 0, 2, 1])));
            let flood: Vec<Seat> = (1..=250u8)
                .map(|n| seat(gate.admit(IpAddr::from([198, 51, 100, n]))))
                .collect();
            assert_eq!(evicted(&gate), 250 - 15);
            // Each address of the flood a client of its own holds one place, as many as the
            // operator: the oldest, the operator's, goes first.
            assert_eq!(
                !operator.eviction.done.load(Ordering::Acquire),
                operator_kept,
                "{networks:?}"
            );
            drop(flood);
        }
    }

    #[test]
    fn a_flood_from_every_address_of_one_64_evicts_only_its_own() {
        let gate = gate(64, 16);
        let operator = seat(gate.admit("2001:db8:0:1::1".parse().unwrap()));
        let flood: Vec<Seat> = (1..=1_000u16)
            .map(|n| {
                let peer = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 2, n, 0, 0, n);
                seat(gate.admit(IpAddr::V6(peer)))
            })
            .collect();
        assert_eq!(evicted(&gate), 1_000 - 15);
        assert!(
            !operator.eviction.done.load(Ordering::Acquire),
            "the operator's connection, from another /64, kept its place"
        );
        drop(flood);
        assert_eq!(
            network(
                PeerIpPrefixes::default(),
                "::ffff:10.0.0.1".parse().unwrap()
            ),
            IpAddr::from([10, 0, 0, 1])
        );
    }

    #[test]
    fn streams_past_the_cap_are_refused_and_places_come_back() {
        let gate = gate(4, 2);
        let one = gate.stream().unwrap();
        let _two = gate.stream().unwrap();
        assert!(gate.stream().is_none());
        assert_eq!(refused(&gate), (0, 1));
        drop(one);
        assert!(gate.stream().is_some());
    }
}
