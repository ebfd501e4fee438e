//! How a gRPC message is told apart and classified, shared by the layer and the `spillway`
//! binary's proxy.
//!
//! ```
//! use http::{HeaderMap, HeaderValue, StatusCode};
//! use spillway_tower::grpc;
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("content-type", HeaderValue::from_static("application/grpc+proto"));
//! assert!(grpc::is_grpc(&headers));
//! // A trailers-only response with a status of the server's fault is an error, under HTTP 200.
//! headers.insert("grpc-status", HeaderValue::from_static("14"));
//! assert!(grpc::is_error(StatusCode::OK, &headers, true));
//! // One of the caller's (INVALID_ARGUMENT) is not, as a 4xx is not.
//! headers.insert("grpc-status", HeaderValue::from_static("3"));
//! assert!(!grpc::is_error(StatusCode::OK, &headers, true));
//! ```

use http::{HeaderMap, HeaderName, StatusCode};

mod timeout;

pub use timeout::{encode_grpc_timeout, grpc_timeout, parse_grpc_timeout, GRPC_TIMEOUT};

/// `grpc-status`, parsed once.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// Whether a message is gRPC: its content type is `application/grpc`, with any suffix.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// Whether a gRPC response with `headers` (its head) has its status still to come, in its
/// trailers: none in the head, and a content type of gRPC over HTTP/2 (`application/grpc`,
/// alone, with a `+` suffix or with parameters). gRPC-Web (`application/grpc-web...`) sends its status inside
/// the body, where the layer does not read it.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use spillway_tower::grpc;
///
/// let head = |content_type| {
///     let mut headers = HeaderMap::new();
///     headers.insert("content-type", HeaderValue::from_static(content_type));
///     headers
/// };
/// assert!(grpc::status_to_come(&head("application/grpc+proto")));
/// assert!(!grpc::status_to_come(&head("application/grpc-web+proto")));
/// let mut answered = head("application/grpc");
/// answered.insert("grpc-status", HeaderValue::from_static("0"));
/// assert!(!grpc::status_to_come(&answered));
/// ```
pub fn status_to_come(headers: &HeaderMap) -> bool {
    let over_http2 = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.as_bytes().strip_prefix(b"application/grpc"))
        .is_some_and(|suffix| {
            suffix.is_empty() || suffix.starts_with(b"+") || suffix.starts_with(b";")
        });
    over_http2 && !headers.contains_key(GRPC_STATUS)
}

/// The gRPC statuses that are the server's fault, as an HTTP 5xx is: UNKNOWN (2), INTERNAL
/// (13), UNAVAILABLE (14) and DATA_LOSS (15). The others say that the server rightly refused
/// what its caller asked, as a 4xx does (CANCELLED, INVALID_ARGUMENT, NOT_FOUND,
/// ALREADY_EXISTS, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED,
/// OUT_OF_RANGE, UNAUTHENTICATED), or answer what the caller chose: UNIMPLEMENTED (12), which
/// servers answer a call to a method they lack, and DEADLINE_EXCEEDED (4), the deadline the
/// caller gave running out (how long the call took reaches slow-call breakers and adaptive
/// limits as its response time). A client can earn as many of those as it likes, and counted
/// as errors they would let any client open a breaker for everyone.
pub const SERVER_FAULTS: [u32; 4] = [2, 13, 14, 15];

/// Whether `headers` (or trailers) carry a gRPC status that is the server's fault
/// ([`SERVER_FAULTS`]), one past the known codes (gRPC takes it for UNKNOWN), or one that is
/// no status at all (not a number).
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use spillway_tower::grpc;
///
/// let status = |code| {
///     let mut headers = HeaderMap::new();
///     headers.insert("grpc-status", HeaderValue::from_static(code));
///     grpc::has_error_status(&headers)
/// };
/// assert!(status("13") && status("14") && status("garbage") && status("17"));
/// assert!(!status("0") && !status("3") && !status("16"));
/// // What the caller chose: a method the server lacks, its own deadline.
/// assert!(!status("12") && !status("4"));
/// assert!(!grpc::has_error_status(&HeaderMap::new()));
/// ```
pub fn has_error_status(headers: &HeaderMap) -> bool {
    headers.get(GRPC_STATUS).is_some_and(|status| {
        let code = std::str::from_utf8(status.as_bytes())
            .ok()
            .and_then(|text| text.parse::<u32>().ok());
        code.is_none_or(|code| SERVER_FAULTS.contains(&code) || code > 16)
    })
}

/// The default classification of a response head: a 5xx status, or (for a gRPC response,
/// `grpc` being [`is_grpc`] of its headers) a gRPC status of the server's fault in the
/// headers (a trailers-only response; see [`SERVER_FAULTS`]). A gRPC status in the trailers
/// is checked with [`has_error_status`] as the body ends.
pub fn is_error(status: StatusCode, headers: &HeaderMap, grpc: bool) -> bool {
    status.is_server_error() || (grpc && has_error_status(headers))
}
