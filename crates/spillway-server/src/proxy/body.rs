//! The proxy's response body: a route's stack's (the upstream's, holding the request's entry
//! and places until it ends), or a short text of the proxy's own; read ahead, or sent by a task
//! of its own on HTTP/2.

use super::stack::StackBody;
use crate::metrics::ResourceMetrics;
use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Largest upstream body the proxy reads ahead of its head (see [`ProxyBody::read_ahead`]).
pub(crate) const READ_AHEAD_MAX: u64 = 64 * 1024;

/// The outcome of a gRPC call whose status comes in its trailers, for
/// `spillway_requests_total`: counted when the body ends or is dropped, as a success if a
/// trailer said OK and as an error otherwise (a status other than OK, no status at all, a
/// failed stream, or a client that went away first).
#[derive(Debug)]
pub(crate) struct GrpcOutcome {
    counters: ResourceMetrics,
    ok: bool,
}

impl GrpcOutcome {
    pub(crate) fn new(counters: ResourceMetrics) -> Self {
        Self {
            counters,
            ok: false,
        }
    }
}

impl Drop for GrpcOutcome {
    fn drop(&mut self) {
        self.counters.completed(!self.ok);
    }
}

/// A response body of the proxy.
#[derive(Debug)]
pub struct ProxyBody {
    kind: Kind,
    /// Counts the request as in flight on its connection until the body is dropped.
    busy: Option<crate::idle::Busy>,
    /// The access log's line of its request, written when the body is dropped.
    logged: Option<Box<crate::access_log::Entry>>,
}

#[derive(Debug)]
enum Kind {
    Upstream {
        body: StackBody,
        /// For a gRPC call whose status is in its trailers (boxed: most responses have none),
        /// counted when the body ends.
        outcome: Option<Box<GrpcOutcome>>,
        /// The first frame, read ahead by [`ProxyBody::read_ahead`].
        first: Option<Result<Frame<Bytes>, BoxError>>,
    },
    Full(Option<Bytes>),
    /// An upstream body sent on by a task of its own ([`ProxyBody::watched`]).
    Pumped {
        frames: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
        /// Set by the task when it gave up on a client that took nothing.
        stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
        hint: SizeHint,
        done: bool,
    },
}

/// The errors of a [`ProxyBody`]: the upstream's, or a client that took nothing for the send
/// timeout.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An HTTP/2 client took none of a response for the send timeout.
#[derive(Debug)]
struct StreamStalled;

impl std::fmt::Display for StreamStalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client took none of the response for the send timeout")
    }
}

impl std::error::Error for StreamStalled {}

impl ProxyBody {
    /// A route's stack's `body`; for a gRPC response whose status comes in its trailers,
    /// counting `outcome` when it ends.
    pub(crate) fn upstream(body: StackBody, outcome: Option<GrpcOutcome>) -> Self {
        Self {
            kind: Kind::Upstream {
                body,
                outcome: outcome.map(Box::new),
                first: None,
            },
            busy: None,
            logged: None,
        }
    }

    /// The proxy's own answer that came through a route's stack (a refusal's text, a failure's):
    /// read now, so that what the body held (the entry, the places) is given back at once and
    /// the text needs no task to send it. Such a body is made in memory and ready whole (were
    /// one not, what is left of it would stream as it comes).
    pub(crate) fn answered(body: StackBody) -> Self {
        let mut body = body;
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        let text = match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(text) => text,
                Err(frame) => return Self::upstream(body, None).with_first(Ok(frame)),
            },
            Poll::Ready(Some(Err(err))) => return Self::upstream(body, None).with_first(Err(err)),
            Poll::Ready(None) => Bytes::new(),
            Poll::Pending => return Self::upstream(body, None),
        };
        if body.is_end_stream() {
            // Dropping it gives back what it held.
            return Self::full(text);
        }
        Self::upstream(body, None).with_first(Ok(Frame::data(text)))
    }

    /// With `frame`, taken from the upstream body already, sent first.
    fn with_first(mut self, frame: Result<Frame<Bytes>, BoxError>) -> Self {
        if let Kind::Upstream { first, .. } = &mut self.kind {
            *first = Some(frame);
        }
        self
    }

    pub(crate) fn full(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Full((!bytes.is_empty()).then_some(bytes)),
            busy: None,
            logged: None,
        }
    }

    /// For a small upstream body of known length (at most [`READ_AHEAD_MAX`] bytes), waits up
    /// to `within` for its first frame, so that the response's head and its first bytes leave
    /// in one write: one TCP segment instead of two, which halves the work of the proxy's and
    /// the client's network stacks for small responses. A body that does not come in time
    /// is left to stream as it comes; any other body streams at once.
    pub(crate) async fn read_ahead(&mut self, within: Duration) {
        let Kind::Upstream { body, first, .. } = &mut self.kind else {
            return;
        };
        let small = body
            .size_hint()
            .exact()
            .is_some_and(|len| len > 0 && len <= READ_AHEAD_MAX);
        if !small || first.is_some() || body.is_end_stream() {
            return;
        }
        let next = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx));
        // Nothing is lost if it times out: no frame was taken.
        if let Ok(Some(frame)) = tokio::time::timeout(within, next).await {
            *first = Some(frame);
        }
    }

    /// Keeps `busy` (its request in flight on the connection) until the body is dropped.
    /// With the access log's line of its request, written when it is dropped (after the
    /// last byte is sent, or the client went away).
    pub(crate) fn logging(mut self, entry: crate::access_log::Entry) -> Self {
        self.logged = Some(Box::new(entry));
        self
    }

    pub(crate) fn busy_until_sent(mut self, busy: crate::idle::Busy) -> Self {
        self.busy = Some(busy);
        self
    }

    /// An upstream body sent on an HTTP/2 stream within `send_timeout`: a task reads it and
    /// hands it on one frame at a time, and when the client takes none for `send_timeout`
    /// (it grants the stream no flow-control window, so that the connection's socket never
    /// fills and no write ever waits), it drops the upstream body with everything it holds (the
    /// upstream connection, the entry, the permits, the request's place on the connection) and
    /// fails the stream. Only the time spent waiting for the client counts. `on_stall` is
    /// called then. Any other body is returned as it is.
    pub(crate) fn watched(
        self,
        send_timeout: Duration,
        on_stall: impl FnOnce() + Send + 'static,
    ) -> Self {
        if !matches!(self.kind, Kind::Upstream { .. }) {
            return self;
        }
        let hint = self.size_hint();
        let (tx, frames) = tokio::sync::mpsc::channel(1);
        let stalled = std::sync::Arc::default();
        let pumped = Pumped {
            tx,
            stalled: std::sync::Arc::clone(&stalled),
        };
        tokio::spawn(pump(self, pumped, send_timeout, on_stall));
        Self {
            kind: Kind::Pumped {
                frames,
                stalled,
                hint,
                done: false,
            },
            busy: None,
            logged: None,
        }
    }

    /// A plain-text response of the proxy's own.
    pub(crate) fn text(status: StatusCode, text: impl Into<Bytes>) -> Response<Self> {
        let mut response = Response::new(Self::full(text.into()));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

/// Where a pumped body goes: its frames, and whether it was given up.
struct Pumped {
    tx: tokio::sync::mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// Sends `body` on a frame at a time, giving up (dropping `body` and what it holds) when the
/// receiver takes nothing for `send_timeout`, the receiver then failing the stream, or when the
/// stream is gone, even while the upstream sends nothing (an event stream between events): a
/// client that reset such streams held their places and upstream requests for good.
async fn pump(mut body: ProxyBody, to: Pumped, send_timeout: Duration, on_stall: impl FnOnce()) {
    use http_body_util::BodyExt;
    loop {
        // Room first, so that only the wait for the client is timed.
        let permit = match tokio::time::timeout(send_timeout, to.tx.reserve()).await {
            Ok(Ok(permit)) => permit,
            // The stream is gone (reset, or its connection closed).
            Ok(Err(_closed)) => return,
            Err(_elapsed) => {
                on_stall();
                // Before the sender goes: the receiver fails once it has taken what is queued.
                to.stalled.store(true, std::sync::atomic::Ordering::Release);
                return;
            }
        };
        let frame = tokio::select! {
            biased;
            frame = body.frame() => frame,
            () = to.tx.closed() => return,
        };
        match frame {
            Some(frame) => permit.send(frame),
            None => return,
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.kind {
            Kind::Upstream {
                body,
                outcome,
                first,
            } => {
                let polled = match first.take() {
                    Some(frame) => Poll::Ready(Some(frame)),
                    None => Pin::new(body).poll_frame(cx),
                };
                // Trailers are a body's last frame: a deferred outcome is counted from them, as
                // a success unless their status is the server's fault (see
                // `grpc::has_error_status`); anything else that ends the body (no status, a
                // failed stream, a client gone) counts it as an error.
                if let (Poll::Ready(Some(Ok(frame))), Some(outcome)) = (&polled, outcome.as_mut()) {
                    if let Some(trailers) = frame.trailers_ref() {
                        outcome.ok = trailers.contains_key(spillway_tower::grpc::GRPC_STATUS)
                            && !spillway_tower::grpc::has_error_status(trailers);
                    }
                }
                if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
                    drop(outcome.take());
                }
                polled
            }
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Pumped {
                frames,
                stalled,
                hint,
                done,
            } => {
                let polled = frames.poll_recv(cx);
                match &polled {
                    Poll::Ready(None)
                        if stalled.swap(false, std::sync::atomic::Ordering::AcqRel) =>
                    {
                        return Poll::Ready(Some(Err(Box::new(StreamStalled))));
                    }
                    Poll::Ready(None) => *done = true,
                    Poll::Ready(Some(Ok(frame))) => {
                        // What is left to come.
                        let len = frame.data_ref().map_or(0, |data| data.len() as u64);
                        // The lower bound first: an upper bound below it would panic.
                        hint.set_lower(hint.lower().saturating_sub(len));
                        if let Some(upper) = hint.upper() {
                            hint.set_upper(upper.saturating_sub(len));
                        }
                    }
                    _ => {}
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Upstream { body, first, .. } => first.is_none() && body.is_end_stream(),
            Kind::Full(bytes) => bytes.is_none(),
            Kind::Pumped { done, .. } => *done,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Upstream { body, first, .. } => {
                let ahead = match first {
                    Some(Ok(frame)) => frame.data_ref().map_or(0, |data| data.len() as u64),
                    _ => 0,
                };
                let mut hint = body.size_hint();
                // The upper bound first: a lower bound above it would panic.
                if let Some(upper) = hint.upper() {
                    hint.set_upper(upper + ahead);
                }
                hint.set_lower(hint.lower() + ahead);
                hint
            }
            Kind::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Pumped { hint, .. } => *hint,
        }
    }
}
