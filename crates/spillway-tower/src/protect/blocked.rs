//! What a blocked request gets: HTTP 429 with `Retry-After` and the IETF `RateLimit` fields, or
//! gRPC `RESOURCE_EXHAUSTED`.

use crate::grpc::{is_grpc, GRPC_STATUS};
use http::HeaderName;
use std::fmt::Write;

use super::fields::{
    ratelimit_fields, RateLimitFields, RATELIMIT, RATELIMIT_POLICY, SF_INTEGER_MAX,
    X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{request, Response, StatusCode};
use spillway::{BlockError, BlockKind, QuotaUnit};
use std::time::Duration;

/// Marks the response of a request the layer refused (whatever
/// [`on_blocked`](super::SpillwayLayer::on_blocked) made of it) with the refusal, for the layers
/// outside: a metrics or access-log layer reads why, and which rule, from it.
///
/// # Examples
///
/// ```
/// use spillway::flow::FlowRule;
/// use spillway::BlockKind;
/// use spillway_tower::protect::Blocked;
/// use spillway_tower::{SpillwayLayer, TokioClock};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
/// spillway.load_flow_rules(vec![FlowRule::qps("closed", "api", 0.0)])?;
/// let service = SpillwayLayer::new(spillway).fixed_resource("api").layer(service_fn(
///     |_request: http::Request<String>| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
///     },
/// ));
/// let response = service.oneshot(http::Request::new(String::new())).await?;
/// let Blocked(err) = response.extensions().get::<Blocked>().unwrap();
/// assert_eq!((err.kind(), err.rule_id()), (BlockKind::Flow, Some("closed")));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Blocked(pub BlockError);

/// The layer's default: [`grpc_resource_exhausted`] for a gRPC request, else
/// [`too_many_requests`].
pub(super) fn default_blocked(
    err: &BlockError,
    request: &request::Parts,
    spillway: &spillway::Spillway,
) -> Response<Bytes> {
    blocked_with(err, request, spillway, RateLimitFields::Ietf)
}

/// [`default_blocked`] with the rate-limit fields `fields`.
pub(super) fn blocked_with(
    err: &BlockError,
    request: &request::Parts,
    spillway: &spillway::Spillway,
    fields: RateLimitFields,
) -> Response<Bytes> {
    let grpc = is_grpc(&request.headers);
    if err.kind() == BlockKind::Deadline {
        return deadline_exceeded(err, grpc);
    }
    if grpc {
        grpc_resource_exhausted(err)
    } else {
        too_many_requests_with(err, spillway, fields)
    }
}

/// The answer to a request refused for its deadline ([`BlockKind::Deadline`]: it came while
/// the request waited for a place, or was too near to be met at the current latency): gRPC `DEADLINE_EXCEEDED`
/// (status 4, trailers-only) to a gRPC call, else HTTP 504 Gateway Timeout with the error's
/// text; no `Retry-After` (the deadline is the caller's), no rate-limit fields (no quota ran
/// out).
///
/// # Examples
///
/// ```
/// use spillway::{BlockError, BlockKind};
/// use spillway_tower::protect::deadline_exceeded;
///
/// let err = BlockError::custom(BlockKind::Deadline, "GET /search", 8.0, 8.0);
/// assert_eq!(deadline_exceeded(&err, false).status(), 504);
/// let grpc = deadline_exceeded(&err, true);
/// assert_eq!(grpc.status(), 200);
/// assert_eq!(grpc.headers()["grpc-status"], "4");
/// ```
pub fn deadline_exceeded(err: &BlockError, grpc: bool) -> Response<Bytes> {
    if grpc {
        let mut response = grpc_resource_exhausted(err);
        response
            .headers_mut()
            .insert(GRPC_STATUS, HeaderValue::from_static("4"));
        return response;
    }
    let mut response = Response::new(Bytes::from(format!("{err}\n")));
    *response.status_mut() = StatusCode::GATEWAY_TIMEOUT;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Whole seconds to wait, rounded up (a client that waits less would be refused again).
fn ceil_secs(after: Duration) -> u64 {
    after.as_secs() + u64::from(after.subsec_nanos() > 0)
}

/// HTTP 429 Too Many Requests for `err`, with the error's text as a plain-text body and:
///
/// - `Retry-After` (whole seconds, rounded up) when the check knows when to retry: not for a
///   concurrency or adaptive limit, where a place frees when a call ends, whenever that is;
/// - the IETF `RateLimit-Policy` and `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers-10)
///   where the refusal is a client's quota ([`Spillway::refusal_quota`](spillway::Spillway::refusal_quota)
///   says which and what): the policy is named after the rule (a Structured Field String), `q` is
///   what the rule allows now in whole requests (a warm-up's current allowance),
///   `qu="concurrent-requests"` for a limit of calls in flight, `w` its window in whole seconds
///   when it has one; `RateLimit` gives the remaining quota `r=0` and, when `Retry-After` is
///   sent, `t` with the same value (`Retry-After` never earlier than `t`).
///
/// # Examples
///
/// ```
/// use spillway::flow::FlowRule;
/// use spillway::{ManualClock, Spillway};
/// use spillway_tower::too_many_requests;
///
/// let spillway = Spillway::new_with_clock(ManualClock::new());
/// spillway.load_flow_rules(vec![
///     FlowRule::qps("search", "GET /search", 0.0),
///     FlowRule::in_flight("POST /upload", 1).with_id("one-upload"),
/// ])?;
/// let err = spillway.entry("GET /search").enter().unwrap_err();
/// let response = too_many_requests(&err, &spillway);
/// assert_eq!(response.status(), 429);
/// assert_eq!(response.headers()["ratelimit-policy"], r#""search";q=0;w=1"#);
/// assert_eq!(response.headers()["ratelimit"], r#""search";r=0;t=1"#);
/// assert_eq!(response.headers()["retry-after"], "1");
///
/// // A concurrency limit cannot say when a place frees: no `Retry-After`, no `t`.
/// let _upload = spillway.entry("POST /upload").enter().unwrap();
/// let err = spillway.entry("POST /upload").enter().unwrap_err();
/// let response = too_many_requests(&err, &spillway);
/// assert_eq!(
///     response.headers()["ratelimit-policy"],
///     r#""one-upload";q=1;qu="concurrent-requests""#
/// );
/// assert_eq!(response.headers()["ratelimit"], r#""one-upload";r=0"#);
/// assert!(response.headers().get("retry-after").is_none());
/// # Ok::<(), spillway::flow::FlowRuleError>(())
/// ```
pub fn too_many_requests(err: &BlockError, spillway: &spillway::Spillway) -> Response<Bytes> {
    too_many_requests_with(err, spillway, RateLimitFields::Ietf)
}

/// [`too_many_requests`] with the rate-limit fields `fields` says: the IETF fields, the older
/// `X-RateLimit-*` ones, both, or none (only `Retry-After`).
///
/// # Examples
///
/// ```
/// use spillway::flow::FlowRule;
/// use spillway::{ManualClock, Spillway};
/// use spillway_tower::protect::{too_many_requests_with, RateLimitFields};
///
/// let spillway = Spillway::new_with_clock(ManualClock::new());
/// spillway.load_flow_rules(vec![FlowRule::per_second("GET /search", 0)])?;
/// let err = spillway.entry("GET /search").enter().unwrap_err();
/// let response = too_many_requests_with(&err, &spillway, RateLimitFields::Legacy);
/// assert_eq!(response.headers()["x-ratelimit-limit"], "0");
/// assert_eq!(response.headers()["x-ratelimit-remaining"], "0");
/// assert_eq!(response.headers()["x-ratelimit-reset"], "1");
/// assert!(response.headers().get("ratelimit").is_none());
/// # Ok::<(), spillway::flow::FlowRuleError>(())
/// ```
pub fn too_many_requests_with(
    err: &BlockError,
    spillway: &spillway::Spillway,
    fields: RateLimitFields,
) -> Response<Bytes> {
    let mut text = String::with_capacity(128);
    // Writing to a String cannot fail.
    let _ = writeln!(text, "{err}");
    let mut response = Response::new(Bytes::from(text));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.reserve(4);
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    let retry = err.retry_after().map(ceil_secs);
    if let Some(secs) = retry {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs.min(SF_INTEGER_MAX)));
    }
    if fields == RateLimitFields::None {
        return response;
    }
    if let Some(quota) = spillway.refusal_quota(err) {
        if fields.ietf() {
            let (policy, state) = ratelimit_fields(&quota, retry);
            if let (Ok(policy), Ok(state)) = (
                HeaderValue::from_maybe_shared(Bytes::from(policy)),
                HeaderValue::from_maybe_shared(Bytes::from(state)),
            ) {
                headers.insert(RATELIMIT_POLICY, policy);
                headers.insert(RATELIMIT, state);
            }
        }
        // The legacy fields have no unit: a limit of calls in flight would read as a rate.
        if fields.legacy() && quota.unit == QuotaUnit::Requests {
            let integer = |value: u64| HeaderValue::from(value.min(SF_INTEGER_MAX));
            headers.insert(X_RATELIMIT_LIMIT, integer(quota.quota));
            headers.insert(X_RATELIMIT_REMAINING, integer(quota.remaining));
            if let Some(secs) = retry {
                headers.insert(X_RATELIMIT_RESET, integer(secs));
            }
        }
    }
    response
}

/// A gRPC `RESOURCE_EXHAUSTED` (status 8) for `err`, as a trailers-only response: HTTP 200,
/// `content-type: application/grpc`, `grpc-status: 8` and the error's text as `grpc-message`
/// (percent-encoded as gRPC requires), and no body.
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, Spillway};
/// use spillway::flow::FlowRule;
/// use spillway_tower::grpc_resource_exhausted;
///
/// let spillway = Spillway::new_with_clock(ManualClock::new());
/// spillway.load_flow_rules(vec![FlowRule::qps("q", "/echo.Echo/Say", 0.0)])?;
/// let err = spillway.entry("/echo.Echo/Say").enter().unwrap_err();
/// let response = grpc_resource_exhausted(&err);
/// assert_eq!(response.status(), 200);
/// assert_eq!(response.headers()["grpc-status"], "8");
/// assert!(response.headers()["grpc-message"].to_str().unwrap().starts_with("/echo.Echo/Say blocked"));
/// # Ok::<(), spillway::flow::FlowRuleError>(())
/// ```
pub fn grpc_resource_exhausted(err: &BlockError) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from_static("8"));
    if let Ok(message) = HeaderValue::from_str(&grpc_percent_encode(&err.to_string())) {
        headers.insert(GRPC_MESSAGE, message);
    }
    response
}

/// gRPC's `grpc-message` encoding: bytes outside printable ASCII (0x20 to 0x7E), and `%`,
/// as `%XX`.
fn grpc_percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway::flow::FlowRule;
    use spillway::{ManualClock, Spillway};

    #[test]
    fn ratelimit_fields_quote_the_rule_and_give_a_window_to_qps_rules_only() {
        let spillway = Spillway::new_with_clock(ManualClock::new());
        spillway
            .load_flow_rules(vec![
                FlowRule::qps("say \"hi\" \\ é", "qps", 2.7),
                FlowRule::in_flight("busy", 1).with_id("one-at-a-time"),
            ])
            .unwrap();
        for _ in 0..2 {
            drop(spillway.entry("qps").enter().unwrap());
        }
        let err = spillway.entry("qps").enter().unwrap_err();
        let response = too_many_requests(&err, &spillway);
        let headers = response.headers();
        // Quotes and backslashes escaped, non-ASCII replaced; the quota rounded down.
        assert_eq!(headers["ratelimit-policy"], r#""say \"hi\" \\ _";q=2;w=1"#);
        assert_eq!(headers["ratelimit"], r#""say \"hi\" \\ _";r=0;t=1"#);

        let _held = spillway.entry("busy").enter().unwrap();
        let err = spillway.entry("busy").enter().unwrap_err();
        let response = too_many_requests(&err, &spillway);
        let headers = response.headers();
        // A concurrency rule has no window, counts calls in flight, and cannot say when a
        // place frees.
        assert_eq!(
            headers["ratelimit-policy"],
            r#""one-at-a-time";q=1;qu="concurrent-requests""#
        );
        assert_eq!(headers["ratelimit"], r#""one-at-a-time";r=0"#);
        assert!(headers.get(RETRY_AFTER).is_none());
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    }
}
