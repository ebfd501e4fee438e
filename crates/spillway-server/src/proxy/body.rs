//! The proxy's response body: the upstream's, holding the request's entry and permits until it
//! ends, or a short text of the proxy's own.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use spillway::dubbo::{ActivePermit, ExecutePermit};
use spillway::OwnedEntry;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Largest upstream body the proxy reads ahead of its head (see [`ProxyBody::read_ahead`]).
pub(crate) const READ_AHEAD_MAX: u64 = 64 * 1024;

/// Places a request holds under Dubbo limits, given back with the body.
#[derive(Debug, Default)]
pub(crate) struct Permits {
    pub(crate) execute: Option<ExecutePermit>,
    pub(crate) active: Option<ActivePermit>,
}

/// A response body of the proxy.
#[derive(Debug)]
pub struct ProxyBody {
    kind: Kind,
    /// Counts the request as in flight on its connection until the body is dropped.
    busy: Option<crate::idle::Busy>,
}

#[derive(Debug)]
enum Kind {
    Upstream {
        body: Incoming,
        /// Dropped (ending the entry and giving the permits back) when the body ends. No
        /// entry in shadow mode when the rules would have blocked.
        held: Option<(Option<OwnedEntry>, Permits)>,
        /// A gRPC response: a status other than OK in its trailers is an error.
        grpc: bool,
        /// The first frame, read ahead by [`ProxyBody::read_ahead`].
        first: Option<Result<Frame<Bytes>, hyper::Error>>,
    },
    Full(Option<Bytes>),
}

impl ProxyBody {
    pub(crate) fn upstream(
        body: Incoming,
        entry: Option<OwnedEntry>,
        permits: Permits,
        grpc: bool,
    ) -> Self {
        Self {
            kind: Kind::Upstream {
                body,
                held: Some((entry, permits)),
                grpc,
                first: None,
            },
            busy: None,
        }
    }

    pub(crate) fn full(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Full((!bytes.is_empty()).then_some(bytes)),
            busy: None,
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
    pub(crate) fn busy_until_sent(mut self, busy: crate::idle::Busy) -> Self {
        self.busy = Some(busy);
        self
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

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match &mut self.kind {
            Kind::Upstream {
                body,
                held,
                grpc,
                first,
            } => {
                let polled = match first.take() {
                    Some(frame) => Poll::Ready(Some(frame)),
                    None => Pin::new(body).poll_frame(cx),
                };
                match &polled {
                    Poll::Ready(Some(Ok(frame))) if *grpc => {
                        let failed = frame
                            .trailers_ref()
                            .is_some_and(spillway_tower::grpc::has_error_status);
                        if let (true, Some((Some(entry), _))) = (failed, held.as_mut()) {
                            entry.mark_error();
                        }
                    }
                    Poll::Ready(None) => drop(held.take()),
                    Poll::Ready(Some(Err(_))) => {
                        if let Some((mut entry, permits)) = held.take() {
                            if let Some(entry) = entry.as_mut() {
                                entry.mark_error();
                            }
                            drop((entry, permits));
                        }
                    }
                    _ => {}
                }
                polled
            }
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Upstream { body, first, .. } => first.is_none() && body.is_end_stream(),
            Kind::Full(bytes) => bytes.is_none(),
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
        }
    }
}
