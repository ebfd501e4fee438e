//! What the proxy answers and counts when a request is refused (by a Dubbo limit or a rule),
//! and what shadow mode logs instead.

use super::{Proxy, ProxyBody, Table};
use crate::metrics::{Metrics, ResourceMetrics};
use bytes::Bytes;
use http::{Response, StatusCode};
use spillway::BlockError;

impl Proxy {
    /// Logs a request shadow mode would have blocked: at most one line a second, with the
    /// count since the last line (the metrics count each one).
    pub(super) fn shadow_logged(&self, resource: &str, reason: &str) {
        if let Some(count) = self.inner.shadow_log.note(tokio::time::Instant::now()) {
            tracing::info!(%resource, %reason, count, "shadow mode: would block (count: since the last such line)");
        }
    }

    /// A Dubbo limit refused: counted as a block on the resource and answered with the blocked
    /// response; in shadow mode, counted and logged only (`None`: go on).
    pub(super) fn refused(
        &self,
        resource: &str,
        counters: &ResourceMetrics,
        err: &BlockError,
        table: &Table,
        grpc: bool,
    ) -> Option<Response<ProxyBody>> {
        let spillway = &self.inner.spillway;
        let metrics = &self.inner.metrics;
        // Counted as a block on the resource either way, as a spillway rule's refusal is.
        if let Ok(handle) = spillway.resource(resource) {
            handle.record_block(1);
        }
        if table.shadow {
            metrics.count(resource, "shadow_block", err.kind().as_str());
            self.shadow_logged(resource, &err.to_string());
            return None;
        }
        metrics.count(resource, "block", err.kind().as_str());
        counters.blocked(err);
        Some(blocked(spillway, err, table.blocked.as_ref(), grpc))
    }
}

/// Counts a request refused for want of a per-key rule's key.
pub(super) fn metrics_missing_key(metrics: &Metrics, resource: &str) {
    metrics.count(resource, "block", "missing_key");
}

/// The response of a blocked request: gRPC `RESOURCE_EXHAUSTED` to a gRPC call, else the
/// default 429 (with `Retry-After` and the `RateLimit` fields), or the configured status and
/// body (keeping `Retry-After`).
pub(super) fn blocked(
    spillway: &spillway::Spillway,
    err: &BlockError,
    configured: Option<&crate::config::BlockedResponse>,
    grpc: bool,
) -> Response<ProxyBody> {
    if grpc {
        return spillway_tower::grpc_resource_exhausted(err).map(ProxyBody::full);
    }
    let mut response = spillway_tower::too_many_requests(err, spillway);
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
    response.map(ProxyBody::full)
}
