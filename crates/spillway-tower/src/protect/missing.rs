//! A request without the key a per-key rule reads: what it gets, and what its refusal says.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use std::sync::Arc;

/// What a request gets when it has no value for one of the layer's keys (see
/// [`SpillwayLayer::on_missing_key`](super::SpillwayLayer::on_missing_key)).
///
/// A key nobody can read is a common mistake, not a rare event: a per-IP limit behind a server
/// that hands the layer no peer address, a header a client leaves out. The default lets such a
/// request go unlimited; pick one of the others where that would be a hole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnMissingKey {
    /// The request is not limited by the rules of that key (the default).
    #[default]
    Pass,
    /// Every request without the key shares one key of its own: together they get one key's
    /// limit.
    Shared,
    /// The request is refused with 400 Bad Request, naming where the key was expected (never a
    /// value), and its response carries a [`MissingKey`].
    Refuse,
}

/// The key every request without one shares, under [`OnMissingKey::Shared`]. A request can
/// spell it (a query parameter `%00spillway:missing`), and then only joins the requests that
/// share it.
pub(super) const SHARED_MISSING: &str = "\u{0}spillway:missing";

/// Marks the response of a request refused because it had no value for a key whose rules
/// refuse such requests ([`OnMissingKey::Refuse`]), for the layers outside (metrics, logs).
///
/// # Examples
///
/// ```
/// use spillway::keyed::KeyedRule;
/// use spillway_tower::protect::{MissingKey, OnMissingKey};
/// use spillway_tower::SpillwayLayer;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let spillway = spillway::Spillway::new();
/// spillway.load_keyed_rules(vec![KeyedRule::qps("per-user", "api", 5.0)])?;
/// let layer = SpillwayLayer::new(spillway)
///     .fixed_resource("api")
///     .key_header(0, "x-user")
///     .on_missing_key(0, OnMissingKey::Refuse);
/// let service = layer.layer(service_fn(|_request: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hi")))
/// }));
/// let response = service.oneshot(http::Request::new(String::new())).await?;
/// assert_eq!(response.status(), 400);
/// let missing = response.extensions().get::<MissingKey>().unwrap();
/// assert_eq!(&*missing.source, "header:x-user");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingKey {
    /// The key's position.
    pub position: usize,
    /// Where the key was expected, as `header:NAME`, `query:NAME`, `path:NAME`, `peer_ip`, or
    /// the name given to [`SpillwayLayer::named_key`](super::SpillwayLayer::named_key).
    pub source: Arc<str>,
}

impl MissingKey {
    /// The refusal: 400 Bad Request, in plain text, marked with this.
    pub(super) fn response(self) -> Response<Bytes> {
        let text = format!(
            "this route limits requests per `{}`, and this request has none\n",
            self.source
        );
        let mut response = Response::new(Bytes::from(text));
        *response.status_mut() = StatusCode::BAD_REQUEST;
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response.extensions_mut().insert(self);
        response
    }
}
