//! A listener's troubles: the connections and requests it closed, refused or timed out
//! (mostly the work of slow, leaving or hostile clients), counted since the start. One table
//! names each for `/metrics`, `/api/status` and the dashboard.

use crate::conn::ListenerCounts;
use serde_json::{Map, Value};

/// One of a listener's counters.
pub(crate) struct Trouble {
    /// Its key in a listener's `troubles` in `/api/status` (and on the dashboard).
    pub(crate) key: &'static str,
    /// Its metric's name (a counter: `_total` is added).
    pub(crate) metric: &'static str,
    /// Its metric's help.
    pub(crate) help: &'static str,
    /// Its count now.
    pub(crate) read: fn(&ListenerCounts) -> u64,
}

/// Every trouble a listener counts.
pub(crate) const TROUBLES: [Trouble; 8] = [
    Trouble {
        key: "accept_errors",
        metric: "spillway_accept_errors",
        help: "Errors accepting connections (out of file descriptors, ...), by listener",
        read: ListenerCounts::accept_errors,
    },
    Trouble {
        key: "header_timeouts",
        metric: "spillway_header_timeouts",
        help: "Connections closed because a request head did not arrive within the header \
               timeout (slow or idle clients), by listener",
        read: ListenerCounts::header_timeouts,
    },
    Trouble {
        key: "body_timeouts",
        metric: "spillway_body_timeouts",
        help: "Requests answered 408 because their body stalled past the body timeout, by \
               listener",
        read: ListenerCounts::body_timeouts,
    },
    Trouble {
        key: "send_timeouts",
        metric: "spillway_send_timeouts",
        help: "Connections closed, and HTTP/2 streams failed, because the client took \
               nothing for the send timeout, by listener",
        read: ListenerCounts::send_timeouts,
    },
    Trouble {
        key: "tunnel_idle_closes",
        metric: "spillway_tunnel_idle_closes",
        help: "Upgraded connections (WebSocket tunnels) closed because no byte went either \
               way for the tunnel idle timeout, by listener",
        read: ListenerCounts::tunnel_idle_closes,
    },
    Trouble {
        key: "go_aways",
        metric: "spillway_go_aways",
        help: "Connections asked to go away (HTTP/2's GOAWAY; their new requests answered 503) \
               because 8 of their requests ran on after their client left: a client resetting \
               stream after stream, by listener",
        read: ListenerCounts::go_aways,
    },
    Trouble {
        key: "client_cap_refusals",
        metric: "spillway_client_cap_refusals",
        help: "Connections closed at once because their client (an address, or a network of \
               the peer_ip prefixes) held listener.max_connections_per_client, by listener",
        read: ListenerCounts::client_refusals,
    },
    Trouble {
        key: "clients_left",
        metric: "spillway_clients_left",
        help: "Requests whose client left (or whose connection closed) before their \
               response head, waiting for a place or forwarded; a forwarded one runs on to \
               the upstream's answer as listener.finish_when_client_leaves says, by listener",
        read: ListenerCounts::clients_left,
    },
];

/// A listener's troubles now, by key, for `/api/status`.
pub(crate) fn json(counts: &ListenerCounts) -> Value {
    let troubles: Map<String, Value> = TROUBLES
        .iter()
        .map(|trouble| (trouble.key.to_owned(), (trouble.read)(counts).into()))
        .collect();
    Value::Object(troubles)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_trouble_has_its_own_key_and_metric() {
        let mut keys: Vec<_> = TROUBLES.iter().map(|t| t.key).collect();
        let mut metrics: Vec<_> = TROUBLES.iter().map(|t| t.metric).collect();
        keys.sort_unstable();
        keys.dedup();
        metrics.sort_unstable();
        metrics.dedup();
        assert_eq!(
            (keys.len(), metrics.len()),
            (TROUBLES.len(), TROUBLES.len())
        );
        let counts = ListenerCounts::default();
        counts.count_go_away();
        let json = json(&counts);
        assert_eq!(json["go_aways"], 1);
        assert_eq!(json["header_timeouts"], 0);
        assert_eq!(json.as_object().unwrap().len(), TROUBLES.len());
    }
}
