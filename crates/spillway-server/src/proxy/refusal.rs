//! What the proxy answers when a request is refused (by a Dubbo limit or a rule).

use bytes::Bytes;
use http::{Response, StatusCode};
use spillway::BlockError;

/// The response of a blocked request: gRPC `RESOURCE_EXHAUSTED` to a gRPC call, else the
/// default 429 (with `Retry-After` and the `RateLimit` fields), or the configured status, body
/// and rate-limit fields (keeping `Retry-After`).
pub(super) fn blocked(
    spillway: &spillway::Spillway,
    err: &BlockError,
    configured: Option<&crate::config::BlockedResponse>,
    grpc: bool,
) -> Response<Bytes> {
    if err.kind() == spillway::BlockKind::Deadline {
        return spillway_tower::protect::deadline_exceeded(err, grpc);
    }
    if grpc {
        return spillway_tower::grpc_resource_exhausted(err);
    }
    let fields = configured.map_or_else(Default::default, |c| c.ratelimit_fields.into());
    let mut response = spillway_tower::too_many_requests_with(err, spillway, fields);
    if let Some(configured) = configured {
        if let Ok(status) = StatusCode::from_u16(configured.status) {
            *response.status_mut() = status;
        }
        if let Some(body) = &configured.body {
            *response.body_mut() = Bytes::from(body.clone());
        }
        if let Some(content_type) = configured
            .content_type
            .as_deref()
            .and_then(|value| http::HeaderValue::from_str(value).ok())
        {
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, content_type);
        }
    }
    response
}
