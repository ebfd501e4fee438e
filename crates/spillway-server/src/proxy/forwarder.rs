//! The innermost service of a route's stack: counts the admission, forwards the request to the
//! route's upstream, and answers a failure with the proxy's own response, marked with what
//! failed ([`Failure`]) and the call's [`Verdict`] for the spillway layer around it.

use super::client::Upstream;
use super::forward::{self, Failure, Peer, Timeouts};
use super::tally::Tally;
use crate::claims::Claim;
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use spillway_tower::protect::{ShadowBlock, ShadowRefusal, Verdict};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A forwarded response's body: the upstream's, or the proxy's text after a failure.
pub(crate) type ForwardBody = Either<Incoming, Full<Bytes>>;

/// Forwards a route's requests to its upstream.
#[derive(Debug, Clone)]
pub(crate) struct Forwarder {
    upstream: Arc<Upstream>,
    timeouts: Timeouts,
    tally: Arc<Tally>,
    /// The client connection's peer, set on the clone that serves its request.
    peer: Option<Arc<Peer>>,
}

impl Forwarder {
    pub(crate) fn new(upstream: Arc<Upstream>, timeouts: Timeouts, tally: Arc<Tally>) -> Self {
        Self {
            upstream,
            timeouts,
            tally,
            peer: None,
        }
    }

    /// Serves requests from `peer` (named in the forwarding headers).
    pub(crate) fn set_peer(&mut self, peer: Arc<Peer>) {
        self.peer = Some(peer);
    }
}

impl tower::Service<Request<Incoming>> for Forwarder {
    type Response = Response<ForwardBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Incoming>) -> Self::Future {
        let mut timeouts = self.timeouts;
        // The time its claim has left: none, and it is refused before it costs the upstream
        // anything; else the upstream is told, and waited for no longer.
        let mut bound_by_deadline = false;
        if let Some(claim) = request.extensions_mut().remove::<Claim>() {
            let now = tokio::time::Instant::now();
            let waited = now.saturating_duration_since(claim.arrived);
            let left = claim.left(now);
            if left.is_some_and(|left| left.is_zero()) {
                let grpc = spillway_tower::grpc::is_grpc(request.headers());
                let refusal = self.tally.deadline_passed(waited, grpc);
                return Box::pin(std::future::ready(Ok(refusal)));
            }
            if let Some(left) = left {
                bound_by_deadline = left < timeouts.upstream;
                timeouts.upstream = timeouts.upstream.min(left);
                crate::claims::tell_upstream(request.headers_mut(), &claim, left);
            }
            self.tally.admitted_class(claim.criticality, waited);
        }
        // Admitted: a pass, unless only shadow mode let it through.
        let extensions = request.extensions();
        if let Some(ShadowBlock(err)) = extensions.get::<ShadowBlock>() {
            self.tally.shadowed(err.kind().as_str(), &err.to_string());
        } else if let Some(ShadowRefusal { rule }) = extensions.get::<ShadowRefusal>() {
            let kind = spillway::BlockKind::Flow.as_str();
            self.tally.shadowed(kind, &format!("shadow rule {rule}"));
        } else {
            self.tally.passed();
        }
        let (upstream, peer) = (Arc::clone(&self.upstream), self.peer.clone());
        let grpc = bound_by_deadline && spillway_tower::grpc::is_grpc(request.headers());
        Box::pin(async move {
            let Some(peer) = peer else {
                // Every clone that serves a request is given its peer first.
                tracing::error!("a request reached the forwarder without its peer");
                return Ok(failed(Failure::Upstream(StatusCode::BAD_GATEWAY)));
            };
            Ok(
                match forward::send(&upstream, request, &peer, timeouts).await {
                    Ok(response) => response.map(Either::Left),
                    // Its deadline, not the listener's timeout, ran out.
                    Err(Failure::Upstream(StatusCode::GATEWAY_TIMEOUT)) if bound_by_deadline => {
                        deadline_ran_out(grpc)
                    }
                    Err(failure) => failed(failure),
                },
            )
        })
    }
}

/// The answer to a request whose deadline ran out while the upstream worked on it: gRPC
/// `DEADLINE_EXCEEDED` to a gRPC call, else 504; a drop, to an adaptive limit (the upstream
/// was too slow for it).
fn deadline_ran_out(grpc: bool) -> Response<ForwardBody> {
    let err = spillway::BlockError::custom(spillway::BlockKind::Deadline, "upstream", 0.0, 0.0);
    let (parts, body) = spillway_tower::protect::deadline_exceeded(&err, grpc).into_parts();
    let mut response = Response::from_parts(parts, Either::Right(Full::new(body)));
    if !grpc {
        *response.body_mut() = Either::Right(Full::new(Bytes::from_static(
            b"the request's deadline passed before the upstream answered\n",
        )));
    }
    response.extensions_mut().insert(Verdict::Dropped);
    response.extensions_mut().insert(Failure::Deadline);
    response
}

/// The proxy's answer to `failure`, marked with it and with the call's verdict: the upstream's
/// failure is an error (a timeout also a drop, to an adaptive limit); anything else, nobody's.
fn failed(failure: Failure) -> Response<ForwardBody> {
    let (status, text, verdict) = match failure {
        // Out of places for upstream connections: this process's limit, not the upstream's
        // failure.
        Failure::NoUpstreamSeat => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no upstream connection available\n",
            Verdict::Abandoned,
        ),
        Failure::BadTarget => (
            StatusCode::BAD_REQUEST,
            "bad request target\n",
            Verdict::Abandoned,
        ),
        // The client's body stalled, ran past the cap, was malformed or cut short: the
        // client's fault, never the upstream's.
        Failure::Client(fault) => (fault.status(), fault.message(), Verdict::Abandoned),
        Failure::Deadline => return deadline_ran_out(false),
        Failure::Upstream(status) => (
            status,
            status.canonical_reason().unwrap_or("error"),
            if status == StatusCode::GATEWAY_TIMEOUT {
                Verdict::Dropped
            } else {
                Verdict::Error
            },
        ),
    };
    let mut response = Response::new(Either::Right(Full::new(Bytes::from_static(
        text.as_bytes(),
    ))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response.extensions_mut().insert(verdict);
    response.extensions_mut().insert(failure);
    response
}
