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
    /// `bad_host`, `bad_header`, `bad_path`, `no_route` or `repeated_key`.
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
    // An HTTP/2 field value may not start or end with whitespace (RFC 9113 section 8.2.1):
    // HTTP/1.1's parser trims it, so an upstream reads ` alice` as `alice`, where a key read
    // as sent would be a new one for each spelling.
    if request.version() == http::Version::HTTP_2 {
        if let Some(name) = padded_value(request.headers()) {
            let resource = table.default.resource.as_str();
            let text = format!("the value of `{name}` starts or ends with whitespace\n");
            return Err(early(resource, "bad_header", StatusCode::BAD_REQUEST, text));
        }
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
    if request.version() == http::Version::HTTP_2 {
        // HTTP/2 sends each cookie as a field of its own; they are one `Cookie` line, joined
        // with `; `, as HTTP/1.1 sends them (RFC 9113 section 8.2.3): an HTTP/1.1 upstream
        // may read only the first of several.
        join_cookies(request.headers_mut());
    }
    // As many header fields as an HTTP/1.1 request may have (hyper's cap there, `Host`
    // included), so that an upstream is never sent more over one protocol than the other
    // allows.
    if request.version() == http::Version::HTTP_2 && request.headers().len() > MAX_HEADERS {
        let resource = table.default.resource.as_str();
        let text = format!("more than {MAX_HEADERS} header fields\n");
        let status = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
        return Err(early(resource, "bad_header", status, text));
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
    // A key stated twice has no one value: servers differ in which they read, so that either
    // could be the key the limits count and the other the one the upstream acts on.
    if let Some(key) = route.repeated_key(request.headers(), request.uri()) {
        let text = format!("the key `{key}` is given more than once\n");
        return Err(early(
            &route.resource,
            "repeated_key",
            StatusCode::BAD_REQUEST,
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

/// The most header fields a request may have: hyper's cap on an HTTP/1.1 head (past it, 431),
/// held to on HTTP/2 too.
pub(crate) const MAX_HEADERS: usize = 100;

/// Joins the `Cookie` fields of `headers` into one, with `; ` between them.
fn join_cookies(headers: &mut http::HeaderMap) {
    let cookies = headers.get_all(http::header::COOKIE);
    if cookies.iter().nth(1).is_none() {
        return;
    }
    let joined = cookies
        .iter()
        .map(http::HeaderValue::as_bytes)
        .collect::<Vec<_>>()
        .join(&b"; "[..]);
    // Joined from valid values with `; `: valid.
    if let Ok(joined) = http::HeaderValue::from_bytes(&joined) {
        headers.insert(http::header::COOKIE, joined);
    }
}

/// The name of a header whose value starts or ends with a space or a tab, if any.
fn padded_value(headers: &http::HeaderMap) -> Option<&http::HeaderName> {
    let padded = |byte: Option<&u8>| matches!(byte, Some(b' ' | b'\t'));
    headers.iter().find_map(|(name, value)| {
        let bytes = value.as_bytes();
        (padded(bytes.first()) || padded(bytes.last())).then_some(name)
    })
}
