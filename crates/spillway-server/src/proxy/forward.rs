//! Sending a request on to its upstream.

use super::timed_body::TimedBody;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION};
use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Headers that describe one connection, not the message (RFC 9110 section 7.6.1, with the
/// obsolete `proxy-connection`): never forwarded, nor are the headers `Connection` names.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const FORWARDED: HeaderName = HeaderName::from_static("forwarded");

/// Removes the hop-by-hop headers: those `Connection` and `Proxy-Connection` name, then the
/// fixed ones.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .chain(headers.get_all("proxy-connection").iter())
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Appends `element` to the list header `name`: every earlier line of it, byte for byte, joined
/// with `, ` into one.
fn append_to_list(headers: &mut HeaderMap, name: HeaderName, element: &str) {
    let mut list = Vec::new();
    for value in headers.get_all(&name) {
        list.extend_from_slice(value.as_bytes());
        list.extend_from_slice(b", ");
    }
    list.extend_from_slice(element.as_bytes());
    // Earlier values were valid header values, and so is the element: so is the list.
    if let Ok(value) = HeaderValue::from_bytes(&list) {
        headers.insert(name, value);
    }
}

/// Adds `peer` as the last hop: to `X-Forwarded-For`, and as a `for=` element of `Forwarded`
/// (RFC 7239, an IPv6 address in quotes and brackets).
pub(crate) fn add_forwarded(headers: &mut HeaderMap, peer: SocketAddr) {
    let ip = peer.ip();
    append_to_list(headers, X_FORWARDED_FOR, &ip.to_string());
    let element = match ip {
        std::net::IpAddr::V4(ip) => format!("for={ip}"),
        std::net::IpAddr::V6(ip) => format!("for=\"[{ip}]\""),
    };
    append_to_list(headers, FORWARDED, &element);
}

/// How long a forwarded request may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// For the upstream's response head.
    pub(crate) upstream: Duration,
    /// For each next bytes of the client's body.
    pub(crate) body: Duration,
}

/// Forwards `request` to `upstream` (its path appended to the upstream's), within `timeouts`.
///
/// # Errors
///
/// 502 Bad Gateway when the upstream cannot be reached or fails mid-response head, 504
/// Gateway Timeout when it does not answer in time, 408 Request Timeout when the client's body
/// stalls.
pub(crate) async fn send(
    client: &Client<HttpConnector, TimedBody>,
    request: Request<Incoming>,
    upstream: &Uri,
    peer: SocketAddr,
    timeouts: Timeouts,
) -> Result<Response<Incoming>, StatusCode> {
    let (mut parts, body) = request.into_parts();
    let stalled = Arc::new(AtomicBool::new(false));
    let body = TimedBody::new(body, timeouts.body, Arc::clone(&stalled));
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let base = upstream.path().trim_end_matches('/');
    let authority = upstream.authority().map_or("", |a| a.as_str());
    parts.uri = format!("http://{authority}{base}{path}")
        .parse()
        .map_err(|_| StatusCode::BAD_REQUEST)?;
    strip_hop_by_hop(&mut parts.headers);
    add_forwarded(&mut parts.headers, peer);
    let request = Request::from_parts(parts, body);
    match tokio::time::timeout(timeouts.upstream, client.request(request)).await {
        Ok(Ok(mut response)) => {
            strip_hop_by_hop(response.headers_mut());
            Ok(response)
        }
        Ok(Err(_)) if stalled.load(Ordering::Acquire) => Err(StatusCode::REQUEST_TIMEOUT),
        Ok(Err(_)) => Err(StatusCode::BAD_GATEWAY),
        Err(_elapsed) => Err(StatusCode::GATEWAY_TIMEOUT),
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
    fn the_peer_is_appended_to_every_forwarding_list() {
        let peer: SocketAddr = "10.0.0.9:1234".parse().unwrap();
        let mut map = headers(&[
            ("x-forwarded-for", b"1.1.1.1"),
            ("x-forwarded-for", b"2.2.2.2, \xff"),
            ("forwarded", b"for=1.1.1.1;proto=https"),
        ]);
        add_forwarded(&mut map, peer);
        assert_eq!(
            map.get_all(X_FORWARDED_FOR).iter().collect::<Vec<_>>(),
            [&b"1.1.1.1, 2.2.2.2, \xff, 10.0.0.9"[..]]
        );
        assert_eq!(map[FORWARDED], "for=1.1.1.1;proto=https, for=10.0.0.9");
        let mut fresh = HeaderMap::new();
        add_forwarded(&mut fresh, "[2001:db8::1]:80".parse().unwrap());
        assert_eq!(fresh[X_FORWARDED_FOR], "2001:db8::1");
        assert_eq!(fresh[FORWARDED], "for=\"[2001:db8::1]\"");
    }
}
