//! Sending a request on to its upstream.

use super::client::Upstream;
use super::client_body::{BodyLimits, ClientBody, ClientFault, FaultCell};
use super::forwarding::Forwarding;
use super::upstream_body::UpstreamBody;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, HOST, TE, UPGRADE};
use http::{Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use spillway_tower::protect::CallerWait;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Headers that describe one connection, not the message (RFC 9110 section 7.6.1, with the
/// obsolete `proxy-connection`): never forwarded, nor are the headers `Connection` names.
/// Names, not strings: a string would be parsed into a name at every removal.
const HOP_BY_HOP: [HeaderName; 10] = [
    CONNECTION,
    KEEP_ALIVE,
    http::header::PROXY_AUTHENTICATE,
    http::header::PROXY_AUTHORIZATION,
    TE,
    http::header::TRAILER,
    http::header::TRANSFER_ENCODING,
    UPGRADE,
    PROXY_CONNECTION,
    // The settings of HTTP/2's upgrade from HTTP/1.1 (RFC 7540 section 3.2.1; RFC 9113
    // dropped the upgrade): one connection's, whether or not `Connection` names them.
    HeaderName::from_static("http2-settings"),
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const FORWARDED: HeaderName = HeaderName::from_static("forwarded");

/// Headers that `Connection` cannot make hop-by-hop: the upstream routes by `Host`, and the
/// forwarding headers carry what the proxies in front of this one wrote about the client (an
/// upstream that trusts them would otherwise take this proxy for the client). A client that
/// names them would otherwise send its request upstream without them.
const NEVER_HOP_BY_HOP: [HeaderName; 8] = [
    HOST,
    X_FORWARDED_FOR,
    FORWARDED,
    HeaderName::from_static("x-forwarded-proto"),
    HeaderName::from_static("x-forwarded-host"),
    HeaderName::from_static("x-forwarded-port"),
    HeaderName::from_static("x-real-ip"),
    HeaderName::from_static("true-client-ip"),
];

/// Removes the hop-by-hop headers: those `Connection` and `Proxy-Connection` name (but
/// [`NEVER_HOP_BY_HOP`]), then the fixed ones.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages have none: one look at each name, without hashing, tells.
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .chain(headers.get_all(PROXY_CONNECTION).iter())
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .filter(|name| !NEVER_HOP_BY_HOP.contains(name))
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Appends `element` to the list header `name`: every earlier line of it, byte for byte, joined
/// with `, ` into one.
fn append_to_list(headers: &mut HeaderMap, name: HeaderName, element: &HeaderValue) {
    let mut entry = match headers.entry(name) {
        // The common case: the first hop.
        http::header::Entry::Vacant(vacant) => {
            vacant.insert(element.clone());
            return;
        }
        http::header::Entry::Occupied(occupied) => occupied,
    };
    let mut list = Vec::new();
    for value in entry.iter() {
        list.extend_from_slice(value.as_bytes());
        list.extend_from_slice(b", ");
    }
    list.extend_from_slice(element.as_bytes());
    // Earlier values were valid header values, and so is the element: so is the list.
    if let Ok(value) = HeaderValue::from_bytes(&list) {
        entry.insert(value);
    }
}

/// A client connection's peer, with its elements of the forwarding headers written once for
/// all the requests of the connection.
#[derive(Debug)]
pub struct Peer {
    addr: SocketAddr,
    /// Its requests that run on after it left (see `finishing`).
    run_ons: std::sync::atomic::AtomicUsize,
    /// Its requests cancelled when their client left, for want of a place to run on in.
    cancelled: std::sync::atomic::AtomicUsize,
    /// Told when [`MAX_RUN_ONS`] of its requests run on: its connection is to take no more.
    go_away: tokio::sync::Notify,
    /// Set then: its new requests are refused.
    going_away: std::sync::atomic::AtomicBool,
    /// Its place under its client's cap on connections (`listener.max_connections_per_client`).
    seat: crate::per_client::ClientSeat,
    /// Held open while the peer lives, by its connection, its requests and those that run on
    /// after it left: the drain at shutdown waits for every receiver to close (`None`: nothing
    /// waits, as outside a server).
    _draining: Option<tokio::sync::watch::Receiver<()>>,
    /// Its `X-Forwarded-For` element: the address.
    forwarded_for: HeaderValue,
    /// Its `Forwarded` element (RFC 7239): `for=` the address, an IPv6 one in quotes and
    /// brackets.
    forwarded: HeaderValue,
}

impl Peer {
    /// The peer at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        let ip = addr.ip();
        let forwarded = match ip {
            std::net::IpAddr::V4(ip) => format!("for={ip}"),
            std::net::IpAddr::V6(ip) => format!("for=\"[{ip}]\""),
        };
        // An address and these elements are made of visible ASCII only.
        let value = |text: String| HeaderValue::try_from(text).expect("an address is ASCII");
        Self {
            addr,
            run_ons: std::sync::atomic::AtomicUsize::new(0),
            cancelled: std::sync::atomic::AtomicUsize::new(0),
            go_away: tokio::sync::Notify::new(),
            going_away: std::sync::atomic::AtomicBool::new(false),
            seat: crate::per_client::ClientSeat::none(),
            _draining: None,
            forwarded_for: value(ip.to_string()),
            forwarded: value(forwarded),
        }
    }

    /// The peer, holding `draining` (a receiver of the channel whose closing the drain at
    /// shutdown waits for) until the last of its connection, its requests and those that run
    /// on after it left ends.
    pub(crate) fn drained_by(mut self, draining: tokio::sync::watch::Receiver<()>) -> Self {
        self._draining = Some(draining);
        self
    }

    /// The peer holding `seat`, its place under its client's cap, until the last of its
    /// connection and its requests ends.
    pub(crate) fn seated(mut self, seat: crate::per_client::ClientSeat) -> Self {
        self.seat = seat;
        self
    }

    /// One more place of its client's, whatever the client's cap: for a tunnel, whose
    /// connection's place goes back when hyper hands the connection over.
    pub(crate) fn client_place(&self) -> crate::per_client::ClientSeat {
        self.seat.another()
    }

    /// One more of its requests runs on after it left, holding one more place of its
    /// client's, given back when dropped; `None` if its client holds its cap (the request is
    /// then cancelled, and counted as such). With the ones cancelled, the [`MAX_RUN_ONS`]th
    /// asks its connection to go away (see [`gone_away`](Self::gone_away)).
    pub(crate) fn run_on(self: &Arc<Self>) -> Option<RunOn> {
        use std::sync::atomic::Ordering;
        let Some(client) = self.seat.another_within_cap() else {
            self.cancel();
            return None;
        };
        let running = self.run_ons.fetch_add(1, Ordering::AcqRel) + 1;
        self.left(running);
        Some(RunOn {
            peer: Arc::clone(self),
            _client: client,
        })
    }

    /// One of its requests whose client left was cancelled, for want of a place to run on in
    /// (its places are given back while the upstream may still work on it): it counts toward
    /// the connection's going away as one running on does.
    pub(crate) fn cancel(&self) {
        use std::sync::atomic::Ordering;
        self.cancelled.fetch_add(1, Ordering::AcqRel);
        self.left(self.run_ons.load(Ordering::Acquire));
    }

    /// `running` of its requests run on now: with those cancelled, at [`MAX_RUN_ONS`] its
    /// connection is asked to go away.
    fn left(&self, running: usize) {
        use std::sync::atomic::Ordering;
        let cancelled = self.cancelled.load(Ordering::Acquire);
        if running + cancelled >= MAX_RUN_ONS && !self.going_away.swap(true, Ordering::AcqRel) {
            // Kept until the connection waits for it, if it does not yet.
            self.go_away.notify_one();
        }
    }

    /// Whether its connection was asked to go away: its new requests are refused (a client
    /// that does not heed HTTP/2's GOAWAY could otherwise go on sending them).
    pub(crate) fn is_going_away(&self) -> bool {
        self.going_away.load(std::sync::atomic::Ordering::Acquire)
    }

    /// How many of its requests run on now.
    #[cfg(test)]
    pub(crate) fn running_on(&self) -> usize {
        self.run_ons.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Completes once [`MAX_RUN_ONS`] of its requests have run on at once: an HTTP/2 client
    /// resetting stream after stream, or leaving with many in flight. Its connection then
    /// takes no new request (HTTP/2's GOAWAY) and closes once those in flight end, so that
    /// one connection cannot keep sending requests it leaves at once.
    pub(crate) async fn gone_away(&self) {
        self.go_away.notified().await;
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// How many requests of one client connection may run on at once after it left before the
/// connection is asked to go away (its new requests are refused): an HTTP/1.1 connection has
/// one request at a time, and an HTTP/2 one that resets stream after stream can then leave no
/// more than it had in flight when it was asked (at most its 256 streams, each admitted by
/// the limits as any request, and each holding a place of its client's).
pub(crate) const MAX_RUN_ONS: usize = 8;

/// One of a connection's requests running on after it left (holding its peer, and with it the
/// drain, open).
#[derive(Debug)]
pub(crate) struct RunOn {
    peer: Arc<Peer>,
    /// A place of its client's, held while it runs on.
    _client: crate::per_client::ClientSeat,
}

impl Drop for RunOn {
    fn drop(&mut self) {
        self.peer
            .run_ons
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Adds `peer` as the last hop: to `X-Forwarded-For`, and as a `for=` element of `Forwarded`.
pub(crate) fn add_forwarded(headers: &mut HeaderMap, peer: &Peer) {
    append_to_list(headers, X_FORWARDED_FOR, &peer.forwarded_for);
    append_to_list(headers, FORWARDED, &peer.forwarded);
}

/// The protocol an HTTP/1.1 request asks to switch to (`Upgrade`, with `upgrade` among its
/// `Connection` options), if it is WebSocket, the one upgrade the proxy tunnels.
///
/// Any other (`h2c` above all) is not an upgrade here: the request is forwarded without its
/// `Upgrade`, as a plain request. A tunnel to an upstream that switched to HTTP/2 would carry
/// any number of requests, to any path, that no route or rule of the proxy ever sees.
pub(crate) fn upgrade_of<B>(request: &Request<B>) -> Option<HeaderValue> {
    let headers = request.headers();
    let asked = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|option| option.trim().eq_ignore_ascii_case("upgrade"));
    if request.version() != Version::HTTP_11 || !asked {
        return None;
    }
    // One `Upgrade` line naming WebSocket alone (RFC 6455 section 4.1), with no other
    // protocol the upstream could pick instead.
    let mut lines = headers.get_all(UPGRADE).iter();
    let (Some(protocol), None) = (lines.next(), lines.next()) else {
        return None;
    };
    let text = protocol.to_str().ok()?;
    let mut protocols = text.split(',').map(str::trim).filter(|p| !p.is_empty());
    let websocket = protocols.next()?.eq_ignore_ascii_case("websocket");
    (websocket && protocols.next().is_none()).then(|| protocol.clone())
}

/// Marks a message as switching to `protocol`, after its hop-by-hop headers went.
fn set_upgrade(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, protocol);
}

/// How long a forwarded request may take, and how large its body may be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// For the upstream's response head.
    pub(crate) upstream: Duration,
    /// For each next bytes of the client's body, and its size.
    pub(crate) body: BodyLimits,
}

/// Why a forwarded request got no response from its upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The client's fault: its body stalled, ran past the cap, was malformed or cut short.
    /// Not the upstream's failure.
    Client(ClientFault),
    /// The request's target cannot be joined to the upstream's URL: 400.
    BadTarget,
    /// A new upstream connection was needed and the process's cap on them is reached: 503.
    NoUpstreamSeat,
    /// The upstream's: 502 (unreachable, failed mid-head), 504 (no answer in time).
    Upstream(StatusCode),
    /// The request's deadline ran out while the upstream worked on it: 504, or gRPC
    /// `DEADLINE_EXCEEDED`; the upstream's error when the configuration set the deadline.
    Deadline {
        /// Whether it counts as the upstream's error.
        error: bool,
    },
}

impl Failure {
    /// What the access log says of it: the request's outcome (`pass`: the limits let it
    /// through, `client_error`: the client's fault) and the reason.
    pub(crate) fn decision(self) -> (&'static str, &'static str) {
        match self {
            Self::Client(fault) => ("client_error", fault.as_str()),
            Self::BadTarget => ("client_error", "bad_target"),
            Self::NoUpstreamSeat => ("pass", "no_upstream_connection"),
            Self::Upstream(_) => ("pass", "upstream_failed"),
            Self::Deadline { error: true } => ("pass", "deadline"),
            Self::Deadline { error: false } => ("client_error", "deadline"),
        }
    }
}

/// A request made ready for its upstream: rewritten for it, with its body wrapped, and the
/// cell where that body tells a client's fault. Made before the exchange, so that the future
/// that awaits the upstream holds this and nothing of the request as it came.
pub(crate) struct Outgoing {
    request: Request<ClientBody>,
    fault: FaultCell,
    /// Whether it asks for an upgrade (WebSocket): it goes on an HTTP/1.1 connection.
    upgrade: bool,
}

/// Makes `request` ready to forward to `upstream` (its path appended to the upstream's), its
/// body held to `limits` (and telling `forwarding` when it ends). A request that asks for an upgrade (WebSocket) keeps its
/// `Connection: upgrade` and `Upgrade`; `TE: trailers` (which gRPC sends) is kept, as HTTP/2
/// allows; the hop-by-hop headers go, and `peer` is added to the forwarding headers.
///
/// # Errors
///
/// [`Failure::BadTarget`] when the request's target cannot be joined to the upstream's URL.
pub(crate) fn prepare(
    upstream: &Upstream,
    request: Request<Incoming>,
    peer: &Peer,
    limits: BodyLimits,
    forwarding: Option<Forwarding>,
) -> Result<Outgoing, Failure> {
    let upgrade = upgrade_of(&request);
    let (mut parts, body) = request.into_parts();
    let fault = FaultCell::default();
    let body = ClientBody::new(body, limits, fault.clone(), forwarding);
    // An HTTP/2 client's `:authority` is its `Host` already (`front::front`).
    parts.uri = upstream
        .uri_for(parts.uri.path_and_query())
        .ok_or(Failure::BadTarget)?;
    // The pool picks the upstream's version; the request asks for none.
    parts.version = Version::HTTP_11;
    let trailers = parts.headers.get(TE).is_some_and(|te| te == "trailers");
    // A body framed by `Transfer-Encoding` (which overrides a `Content-Length` beside it)
    // is forwarded without that length (RFC 9112 section 6.3): the upstream connection frames
    // it anew, and a stale length must not frame it there.
    if parts.headers.contains_key(http::header::TRANSFER_ENCODING) {
        parts.headers.remove(http::header::CONTENT_LENGTH);
    }
    strip_hop_by_hop(&mut parts.headers);
    if trailers {
        parts
            .headers
            .insert(TE, HeaderValue::from_static("trailers"));
    }
    let upgrading = upgrade.is_some();
    if let Some(protocol) = upgrade {
        set_upgrade(&mut parts.headers, protocol);
    }
    add_forwarded(&mut parts.headers, peer);
    Ok(Outgoing {
        request: Request::from_parts(parts, body),
        fault,
        upgrade: upgrading,
    })
}

/// Sends `outgoing` to `upstream` and waits `timeout` at most for its response head; an
/// upgrade goes on an HTTP/1.1 connection, and so does the upstream's 101.
///
/// # Errors
///
/// [`Failure::Upstream`] with 502 Bad Gateway when the upstream cannot be reached, fails
/// mid-response head, or speaks HTTP/2 only and the request asks for an upgrade, or with 504
/// Gateway Timeout when it does not answer in time; [`Failure::Client`] when the client's body
/// failed first (whatever the upstream request then did); [`Failure::NoUpstreamSeat`] when a
/// new upstream connection is needed and the process's cap on them is reached.
pub(crate) async fn send(
    upstream: &Upstream,
    outgoing: Outgoing,
    timeout: Duration,
) -> Result<Response<UpstreamBody>, Failure> {
    let Outgoing {
        request,
        fault,
        upgrade,
    } = outgoing;
    let client = match upgrade {
        true => upstream
            .upgrades
            .as_ref()
            .ok_or(Failure::Upstream(StatusCode::BAD_GATEWAY))?,
        false => &upstream.client,
    };
    let sent = tokio::time::timeout(timeout, client.send(request)).await;
    match sent {
        Ok(Ok(mut response)) => {
            let switching = (response.status() == StatusCode::SWITCHING_PROTOCOLS)
                .then(|| response.headers().get(UPGRADE).cloned())
                .flatten();
            // A switch is tunnelled only to WebSocket, and only when the request asked for it:
            // an upstream that switches to anything else (HTTP/2, whose requests no route
            // would see) or unasked gets no tunnel.
            let websocket = switching.as_ref().is_some_and(|protocol| {
                protocol
                    .to_str()
                    .is_ok_and(|text| text.trim().eq_ignore_ascii_case("websocket"))
            });
            if response.status() == StatusCode::SWITCHING_PROTOCOLS && !(upgrade && websocket) {
                tracing::warn!(
                    protocol = ?switching,
                    asked = upgrade,
                    "the upstream switched protocols to other than the WebSocket asked for"
                );
                return Err(Failure::Upstream(StatusCode::BAD_GATEWAY));
            }
            strip_hop_by_hop(response.headers_mut());
            if let Some(protocol) = switching {
                set_upgrade(response.headers_mut(), protocol);
            }
            // The time the proxy waited for the client's body bytes was the client's: with
            // more than a quarter of the call's, the client paced the call, and its time says
            // nothing of the upstream's latency.
            let waited = fault.caller_wait();
            if !waited.is_zero() {
                response.extensions_mut().insert(CallerWait(waited));
            }
            Ok(response)
        }
        // The client's body failed first: whatever became of the upstream request, the
        // client is at fault.
        Ok(Err(err)) => Err(match fault.get() {
            Some(fault) => Failure::Client(fault),
            None if err.is::<crate::descriptors::NoUpstreamSeat>() => Failure::NoUpstreamSeat,
            None => Failure::Upstream(StatusCode::BAD_GATEWAY),
        }),
        // The time ran out while the client's body was still coming, or so soon after its end
        // that the upstream had less than half the time with it, or on a call its client
        // paced (it waited on the body for more than a quarter of the time): the wait was the
        // client's (a body sent byte by byte), not the upstream's. An upstream that needs more
        // than half its time could otherwise be made to fail by a client that holds its body
        // back for the rest (found by an attack, which opened an error breaker so).
        Err(_elapsed) => {
            // A fault the body noted first (a client gone mid-body, whose body waited out its
            // timeout) is what ended it.
            if let Some(fault) = fault.get() {
                return Err(Failure::Client(fault));
            }
            let upstream_had = fault
                .body_ended_at()
                .map(|end| tokio::time::Instant::now().saturating_duration_since(end));
            let paced = spillway::paced_by_caller(fault.caller_wait(), timeout);
            if paced || upstream_had.is_none_or(|had| had < timeout / 2) {
                Err(Failure::Client(ClientFault::TooSlow))
            } else {
                Err(Failure::Upstream(StatusCode::GATEWAY_TIMEOUT))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn headers_connection_names_go_with_the_fixed_hop_by_hop_ones() {
        let mut map = headers(&[
            ("connection", b"keep-alive, X-Secret"),
            ("connection", b"x-other"),
            ("proxy-connection", b"x-proxied"),
            ("x-secret", b"1"),
            ("x-other", b"2"),
            ("x-proxied", b"3"),
            ("keep-alive", b"timeout=5"),
            ("te", b"trailers"),
            ("x-kept", b"4"),
        ]);
        strip_hop_by_hop(&mut map);
        let left: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"]);
    }

    #[test]
    fn connection_cannot_take_the_host_or_the_forwarding_lists() {
        let mut map = headers(&[
            ("host", b"app"),
            (
                "connection",
                b"host, x-forwarded-for, Forwarded, X-Real-IP, x-gone",
            ),
            ("x-forwarded-for", b"10.0.0.1"),
            ("forwarded", b"for=10.0.0.1"),
            ("x-real-ip", b"10.0.0.1"),
            ("x-gone", b"1"),
        ]);
        strip_hop_by_hop(&mut map);
        let mut left: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["forwarded", "host", "x-forwarded-for", "x-real-ip"]);
    }

    #[test]
    fn a_message_without_hop_by_hop_headers_keeps_all_it_has() {
        let mut map = headers(&[
            ("host", b"example"),
            ("x-trace", b"1"),
            ("x-trace", b"2"),
            ("content-length", b"0"),
        ]);
        let before = map.clone();
        strip_hop_by_hop(&mut map);
        assert_eq!(map, before);
        map.append(TE, HeaderValue::from_static("gzip"));
        strip_hop_by_hop(&mut map);
        assert_eq!(map, before);
    }

    #[test]
    fn an_upgrade_needs_both_headers_on_http1() {
        let request = |connection: &str, version| {
            Request::builder()
                .version(version)
                .header(CONNECTION, connection)
                .header(UPGRADE, "websocket")
                .body(())
                .unwrap()
        };
        assert_eq!(
            upgrade_of(&request("keep-alive, Upgrade", Version::HTTP_11)).unwrap(),
            "websocket"
        );
        assert!(upgrade_of(&request("keep-alive", Version::HTTP_11)).is_none());
        assert!(upgrade_of(&request("upgrade", Version::HTTP_2)).is_none());
        // WebSocket alone, in any case; no other protocol, nor a list naming one.
        let asking = |protocol: &str| {
            let request = Request::builder()
                .header(CONNECTION, "Upgrade, HTTP2-Settings")
                .header(UPGRADE, protocol)
                .body(())
                .unwrap();
            upgrade_of(&request)
        };
        assert_eq!(asking("WebSocket").unwrap(), "WebSocket");
        for refused in [
            "h2c",
            "websocket, h2c",
            "h2c, websocket",
            "TLS/1.0",
            "",
            ",",
        ] {
            assert!(asking(refused).is_none(), "{refused:?}");
        }
        let twice = Request::builder()
            .header(CONNECTION, "upgrade")
            .header(UPGRADE, "websocket")
            .header(UPGRADE, "h2c")
            .body(())
            .unwrap();
        assert!(upgrade_of(&twice).is_none());
        let no_protocol = Request::builder()
            .header(CONNECTION, "upgrade")
            .body(())
            .unwrap();
        assert!(upgrade_of(&no_protocol).is_none());
    }

    #[test]
    fn the_peer_is_appended_to_every_forwarding_list() {
        let peer = Peer::new("10.0.0.9:1234".parse().unwrap());
        let mut map = headers(&[
            ("x-forwarded-for", b"1.1.1.1"),
            ("x-forwarded-for", b"2.2.2.2, \xff"),
            ("forwarded", b"for=1.1.1.1;proto=https"),
        ]);
        add_forwarded(&mut map, &peer);
        assert_eq!(
            map.get_all(X_FORWARDED_FOR).iter().collect::<Vec<_>>(),
            [&b"1.1.1.1, 2.2.2.2, \xff, 10.0.0.9"[..]]
        );
        assert_eq!(map[FORWARDED], "for=1.1.1.1;proto=https, for=10.0.0.9");
        let mut fresh = HeaderMap::new();
        add_forwarded(&mut fresh, &Peer::new("[2001:db8::1]:80".parse().unwrap()));
        assert_eq!(fresh[X_FORWARDED_FOR], "2001:db8::1");
        assert_eq!(fresh[FORWARDED], "for=\"[2001:db8::1]\"");
    }
}
