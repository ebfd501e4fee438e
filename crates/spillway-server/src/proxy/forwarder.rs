//! The innermost service of a route's stack: counts the admission, forwards the request to the
//! route's upstream, and answers a failure with the proxy's own response, marked with what
//! failed ([`Failure`]) and the call's [`Verdict`] for the spillway layer around it.

use super::client::Upstream;
use super::forward::{self, Failure, Peer, Timeouts};
use super::forwarding::Forwarding;
use super::shadowed::Shadowed;
use super::tally::Tally;
use super::upstream_body::UpstreamBody;
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
use std::time::Duration;

/// A forwarded response's body: the upstream's, or the proxy's text after a failure.
pub(crate) type ForwardBody = Either<UpstreamBody, Full<Bytes>>;

/// Forwards a route's requests to its upstream.
#[derive(Debug, Clone)]
pub(crate) struct Forwarder {
    upstream: Arc<Upstream>,
    timeouts: Timeouts,
    tally: Arc<Tally>,
    /// The client connection's peer, set on the clone that serves its request.
    peer: Option<Arc<Peer>>,
    /// The mark of the request this clone serves, if its call may run on after its client
    /// leaves (see `finishing`).
    forwarding: Option<Forwarding>,
    /// Shadow mode: a request whose deadline passed is forwarded anyway, as if it had none.
    shadow: bool,
}

/// What a request's deadline does to its forwarding.
pub(super) enum Deadline {
    /// None: forwarded as it is.
    None,
    /// It passed while the request waited in the proxy: refused with this, unforwarded.
    Passed(BlockError),
    /// It comes before the listener's upstream timeout: answered with this if it runs out.
    Bounds(BlockError),
}

impl Forwarder {
    pub(crate) fn new(
        upstream: Arc<Upstream>,
        timeouts: Timeouts,
        tally: Arc<Tally>,
        shadow: bool,
    ) -> Self {
        Self {
            upstream,
            timeouts,
            tally,
            peer: None,
            forwarding: None,
            shadow,
        }
    }

    /// Serves requests from `peer` (named in the forwarding headers).
    pub(crate) fn set_peer(&mut self, peer: Arc<Peer>) {
        self.peer = Some(peer);
    }

    /// Marks `forwarding` when it sends its request on (the clone that serves one request).
    pub(crate) fn set_forwarding(&mut self, forwarding: Option<Forwarding>) {
        self.forwarding = forwarding;
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
        // Admitted: once sent on, with the client's whole body, the call may run on if its
        // client leaves.
        let forwarding = self.forwarding.take();
        let mut timeouts = self.timeouts;
        // The first refusal shadow mode let it through with, if any: the route's limits' and
        // the layer's ran before its deadline's.
        let mut shadowed = Shadowed::first(request.extensions());
        let mut deadline_shadowed = false;
        // What to answer if its deadline, not the listener's timeout, runs out at the upstream.
        let mut missed = None;
        if let Some(claim) = request.extensions_mut().remove::<Claim>() {
            let resource = self.tally.resource();
            match apply(&claim, resource, &mut request, &mut timeouts.upstream) {
                Deadline::Passed(err) if self.shadow => {
                    // Shadow mode: counted and logged, forwarded as if it had no deadline.
                    self.tally.shadowed(err.kind().as_str(), &err.to_string());
                    shadowed.get_or_insert_with(|| Shadowed::of(&err));
                    deadline_shadowed = true;
                }
                Deadline::Passed(err) => {
                    let grpc = spillway_tower::grpc::is_grpc(request.headers());
                    return Box::pin(std::future::ready(Ok(no_time_left(err, grpc))));
                }
                Deadline::Bounds(err) => missed = Some((err, claim.configured)),
                Deadline::None => {}
            }
            let waited = tokio::time::Instant::now().saturating_duration_since(claim.arrived);
            self.tally.admitted_class(claim.criticality, waited);
        }
        // Admitted: a pass, unless only shadow mode let it through.
        let extensions = request.extensions();
        if let Some(ShadowBlock(err)) = extensions.get::<ShadowBlock>() {
            self.tally.shadowed(err.kind().as_str(), &err.to_string());
        } else if let Some(ShadowRefusal { rule }) = extensions.get::<ShadowRefusal>() {
            let kind = spillway::BlockKind::Flow.as_str();
            self.tally.shadowed(kind, &format!("shadow rule {rule}"));
        } else if !deadline_shadowed {
            self.tally.passed();
        }
        let grpc = spillway_tower::grpc::is_grpc(request.headers());
        // The response to what the upstream did, marked with what shadow mode let through.
        let answer = move |sent: Result<Response<UpstreamBody>, Failure>| {
            let mut response = match (sent, &missed) {
                (Ok(response), _) => response.map(Either::Left),
                // Its deadline, not the listener's timeout, ran out.
                (Err(Failure::Upstream(StatusCode::GATEWAY_TIMEOUT)), Some((err, drop))) => {
                    ran_out(err, grpc, *drop)
                }
                (Err(failure), _) => failed(failure),
            };
            if let Some(shadowed) = shadowed {
                response.extensions_mut().insert(shadowed);
            }
            Ok(response)
        };
        let Some(peer) = self.peer.as_deref() else {
            // Every clone that serves a request is given its peer first.
            tracing::error!("a request reached the forwarder without its peer");
            return Box::pin(std::future::ready(Ok(failed(Failure::Upstream(
                StatusCode::BAD_GATEWAY,
            )))));
        };
        // Rewritten now, so that the future below holds the request as it goes out only.
        match forward::prepare(
            &self.upstream,
            request,
            peer,
            timeouts.body,
            forwarding.clone(),
        ) {
            Ok(outgoing) => {
                if let Some(forwarding) = forwarding {
                    forwarding.forwarded();
                }
                let upstream = Arc::clone(&self.upstream);
                Box::pin(async move {
                    answer(forward::send(&upstream, outgoing, timeouts.upstream).await)
                })
            }
            Err(failure) => Box::pin(std::future::ready(answer(Err(failure)))),
        }
    }
}

/// Applies `claim`'s deadline to `request` to `resource`, about to be forwarded to wait
/// `upstream` for its upstream: with time left, the upstream is told how much, and waited for
/// no longer (`spillway replay` holds a recorded call no longer, in the same code).
pub(super) fn apply<B>(
    claim: &Claim,
    resource: &str,
    request: &mut Request<B>,
    upstream: &mut Duration,
) -> Deadline {
    let now = tokio::time::Instant::now();
    let (Some(left), Some(given)) = (claim.left(now), claim.left(claim.arrived)) else {
        crate::claims::forget_unread(request.headers_mut(), claim);
        return Deadline::None;
    };
    let millis = |time: Duration| time.as_secs_f64() * 1e3;
    let refusal = |observed: f64| {
        BlockError::custom(BlockKind::Deadline, resource, observed, millis(given))
            .with_criticality(claim.criticality)
    };
    if left.is_zero() {
        return Deadline::Passed(refusal(millis(now - claim.arrived)));
    }
    crate::claims::tell_upstream(request.headers_mut(), claim, left);
    // A deadline the client gave is told to the upstream, not enforced at it: the client
    // leaves at its deadline (and its call runs on, holding its places, while the upstream
    // works), and an upstream that honours the deadline stops. Cut short here, the wait would
    // free the call's places while the upstream still worked: a client could send the
    // upstream past every limit with tiny deadlines (found by an attack).
    if !claim.configured || left >= *upstream {
        return Deadline::None;
    }
    *upstream = left;
    Deadline::Bounds(refusal(millis(given)))
}

/// The refusal `err` of a request whose deadline passed before it could be forwarded: 504, or
/// gRPC `DEADLINE_EXCEEDED`, marked as a refusal for its deadline, and no verdict of the
/// upstream's (it never saw the request).
pub(super) fn no_time_left(err: BlockError, grpc: bool) -> Response<ForwardBody> {
    let (parts, body) = spillway_tower::protect::deadline_exceeded(&err, grpc).into_parts();
    let mut response = Response::from_parts(parts, Either::Right(Full::new(body)));
    response.extensions_mut().insert(Verdict::Abandoned);
    response.extensions_mut().insert(Blocked(err));
    response
}

/// The answer to a request whose deadline ran out while the upstream worked on it (`err` says
/// which and how long it had): gRPC `DEADLINE_EXCEEDED` to a gRPC call, else 504. For a
/// deadline the configuration set (`drop`), a drop to an adaptive limit and an error (the
/// upstream was too slow for the operator's deadline); for one the client gave, nobody's
/// verdict (a client could otherwise make a healthy upstream fail with tiny deadlines).
pub(super) fn ran_out(err: &BlockError, grpc: bool, drop: bool) -> Response<ForwardBody> {
    let (parts, body) = spillway_tower::protect::deadline_exceeded(err, grpc).into_parts();
    let mut response = Response::from_parts(parts, Either::Right(Full::new(body)));
    let verdict = if drop {
        Verdict::Dropped
    } else {
        Verdict::Abandoned
    };
    response.extensions_mut().insert(verdict);
    response
        .extensions_mut()
        .insert(Failure::Deadline { error: drop });
    response
}

/// The proxy's answer to `failure`, marked with it and with the call's verdict: the upstream's
/// failure is an error (a timeout also a drop, to an adaptive limit); anything else, nobody's.
pub(super) fn failed(failure: Failure) -> Response<ForwardBody> {
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
        Failure::Deadline { error } => (
            StatusCode::GATEWAY_TIMEOUT,
            "the request's deadline passed before the upstream answered\n",
            if error {
                Verdict::Dropped
            } else {
                Verdict::Abandoned
            },
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
