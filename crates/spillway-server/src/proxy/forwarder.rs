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
use spillway::{BlockError, BlockKind};
use spillway_tower::protect::{Blocked, ShadowBlock, ShadowRefusal, Verdict};
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
        // What to answer if its deadline, not the listener's timeout, runs out at the upstream.
        let mut missed = None;
        if let Some(claim) = request.extensions_mut().remove::<Claim>() {
            let now = tokio::time::Instant::now();
            let waited = now.saturating_duration_since(claim.arrived);
            let given = claim
                .left(claim.arrived)
                .map(|left| left.as_secs_f64() * 1e3);
            let refusal = |observed: f64, threshold: f64| {
                let resource = self.tally.resource();
                BlockError::custom(BlockKind::Deadline, resource, observed, threshold)
                    .with_criticality(claim.criticality)
            };
            match (claim.left(now), given) {
                (Some(left), Some(given)) if left.is_zero() => {
                    // Waited in the proxy past its deadline: refused before it costs the
                    // upstream anything.
                    let grpc = spillway_tower::grpc::is_grpc(request.headers());
                    let err = refusal(waited.as_secs_f64() * 1e3, given);
                    return Box::pin(std::future::ready(Ok(no_time_left(err, grpc))));
                }
                (Some(left), Some(given)) => {
                    if left < timeouts.upstream {
                        missed = Some(refusal(given, given));
                    }
                    timeouts.upstream = timeouts.upstream.min(left);
                    crate::claims::tell_upstream(request.headers_mut(), &claim, left);
                }
                _ => {}
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
        let grpc = spillway_tower::grpc::is_grpc(request.headers());
        Box::pin(async move {
            let Some(peer) = peer else {
                // Every clone that serves a request is given its peer first.
                tracing::error!("a request reached the forwarder without its peer");
                return Ok(failed(Failure::Upstream(StatusCode::BAD_GATEWAY)));
            };
            Ok(
                match (
                    forward::send(&upstream, request, &peer, timeouts).await,
                    &missed,
                ) {
                    (Ok(response), _) => response.map(Either::Left),
                    // Its deadline, not the listener's timeout, ran out.
                    (Err(Failure::Upstream(StatusCode::GATEWAY_TIMEOUT)), Some(err)) => {
                        ran_out(err, grpc)
                    }
                    (Err(failure), _) => failed(failure),
                },
            )
        })
    }
}

/// The refusal `err` of a request whose deadline passed before it could be forwarded: 504, or
/// gRPC `DEADLINE_EXCEEDED`, marked as a refusal for its deadline, and no verdict of the
/// upstream's (it never saw the request).
fn no_time_left(err: BlockError, grpc: bool) -> Response<ForwardBody> {
    let (parts, body) = spillway_tower::protect::deadline_exceeded(&err, grpc).into_parts();
    let mut response = Response::from_parts(parts, Either::Right(Full::new(body)));
    response.extensions_mut().insert(Verdict::Abandoned);
    response.extensions_mut().insert(Blocked(err));
    response
}

/// The answer to a request whose deadline ran out while the upstream worked on it (`err` says
/// which and how long it had): gRPC `DEADLINE_EXCEEDED` to a gRPC call, else 504; a drop, to
/// an adaptive limit (the upstream was too slow for it).
fn ran_out(err: &BlockError, grpc: bool) -> Response<ForwardBody> {
    let (parts, body) = spillway_tower::protect::deadline_exceeded(err, grpc).into_parts();
    let mut response = Response::from_parts(parts, Either::Right(Full::new(body)));
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
        Failure::Deadline => (
            StatusCode::GATEWAY_TIMEOUT,
            "the request's deadline passed before the upstream answered\n",
            Verdict::Dropped,
        ),
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
