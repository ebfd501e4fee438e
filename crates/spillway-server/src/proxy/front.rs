//! What every request goes through before its route's stack, in `spillway serve` and in
//! `spillway replay` alike: one host, a path in normal form, a route with an upstream, the
//! client's address where a key reads it, and its claims read once.

use super::path::{bad_host, normalize_uri};
use super::table::{RouteInfo, Table};
use http::{Request, StatusCode};
use spillway::Criticality;
use std::net::SocketAddr;
use tokio::time::Instant;

/// A request ready for its route's stack.
#[derive(Debug)]
pub(crate) struct Fronted<'t> {
    pub(crate) route: &'t RouteInfo,
    /// Its route's index in the table (`None`: the default route).
    pub(crate) index: Option<usize>,
    /// Its criticality and deadline, where its route reads claims.
    pub(crate) class: Option<Criticality>,
    pub(crate) deadline: Option<Instant>,
}

/// A request answered before its route's stack: counted on `resource` as `outcome`.
#[derive(Debug)]
pub(crate) struct Early<'t> {
    pub(crate) resource: &'t str,
    /// `bad_host`, `bad_path` or `no_route`.
    pub(crate) outcome: &'static str,
    pub(crate) status: StatusCode,
    pub(crate) text: String,
}

/// Checks and routes `request`, from `peer`, arrived at `arrived`, in `table`: the request is
/// given back in normal form with what its route's stack reads (the peer's address, its
/// claim).
pub(crate) fn front<'t, B>(
    table: &'t Table,
    mut request: Request<B>,
    peer: SocketAddr,
    arrived: Instant,
) -> Result<(Fronted<'t>, Request<B>), Early<'t>> {
    let early = |resource, outcome, status, text: String| Early {
        resource,
        outcome,
        status,
        text,
    };
    // An HTTP/1.1 request names its host once (RFC 9112 section 3.2): none, or two that may
    // disagree, is refused before anything reads either.
    if let Some(why) = bad_host(&request) {
        let resource = table.default.resource.as_str();
        return Err(early(
            resource,
            "bad_host",
            StatusCode::BAD_REQUEST,
            why.into(),
        ));
    }
    // An HTTP/2 client names its host in `:authority` only: it is the request's `Host` from
    // here on, for the keys and claims that read it as for the upstream (`bad_host` checked
    // that a `Host` it also sent is the same).
    if !request.headers().contains_key(http::header::HOST) {
        let host = request
            .uri()
            .authority()
            .and_then(|a| a.as_str().parse().ok());
        if let Some(host) = host {
            request.headers_mut().insert(http::header::HOST, host);
        }
    }
    // Routed and forwarded in normal form, so that no spelling of a path misses its route.
    if let Err(err) = normalize_uri(&mut request) {
        let resource = table.default.resource.as_str();
        let text = format!("bad path: {err}\n");
        return Err(early(resource, "bad_path", StatusCode::BAD_REQUEST, text));
    }
    let (index, route) = table.route(&request);
    if route.upstream.is_none() {
        let text = "no route matches\n".to_owned();
        return Err(early(
            &route.resource,
            "no_route",
            StatusCode::NOT_FOUND,
            text,
        ));
    }
    if route.reads_peer {
        let addr = spillway_tower::keys::PeerAddr(peer);
        request.extensions_mut().insert(addr);
    }
    // What it claims (criticality, tenant, deadline), read once, for the layer and the
    // forwarder.
    let (mut class, mut deadline) = (None, None);
    if let Some(claims) = &route.claims {
        let (mut parts, body) = request.into_parts();
        let claim = claims.read(&parts, &table.trusted_proxies, arrived);
        (class, deadline) = (Some(claim.criticality), claim.deadline);
        parts.extensions.insert(claim);
        request = Request::from_parts(parts, body);
    }
    let fronted = Fronted {
        route,
        index,
        class,
        deadline,
    };
    Ok((fronted, request))
}
