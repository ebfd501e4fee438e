//! Sending a request on to its upstream.

use http::header::{HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use std::net::SocketAddr;
use std::time::Duration;

/// Headers that describe one connection, not the message (RFC 9110 section 7.6.1): never
/// forwarded.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Forwards `request` to `upstream` (its path appended to the upstream's), within `timeout`.
///
/// # Errors
///
/// 502 Bad Gateway when the upstream cannot be reached or fails mid-response head, 504
/// Gateway Timeout when it does not answer in time.
pub(crate) async fn send(
    client: &Client<HttpConnector, Incoming>,
    request: Request<Incoming>,
    upstream: &Uri,
    peer: SocketAddr,
    timeout: Duration,
) -> Result<Response<Incoming>, StatusCode> {
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let base = upstream.path().trim_end_matches('/');
    let authority = upstream.authority().map_or("", |a| a.as_str());
    parts.uri = format!("http://{authority}{base}{path}")
        .parse()
        .map_err(|_| StatusCode::BAD_REQUEST)?;
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    let forwarded = match parts.headers.get(&X_FORWARDED_FOR) {
        Some(earlier) => format!("{}, {}", earlier.to_str().unwrap_or(""), peer.ip()),
        None => peer.ip().to_string(),
    };
    if let Ok(value) = HeaderValue::from_str(&forwarded) {
        parts.headers.insert(X_FORWARDED_FOR, value);
    }
    let request = Request::from_parts(parts, body);
    match tokio::time::timeout(timeout, client.request(request)).await {
        Ok(Ok(mut response)) => {
            for name in HOP_BY_HOP {
                response.headers_mut().remove(name);
            }
            Ok(response)
        }
        Ok(Err(_)) => Err(StatusCode::BAD_GATEWAY),
        Err(_elapsed) => Err(StatusCode::GATEWAY_TIMEOUT),
    }
}
