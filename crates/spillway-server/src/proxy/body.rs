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
            Kind::Upstream { body, held, grpc } => {
                let polled = Pin::new(body).poll_frame(cx);
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
            Kind::Upstream { body, .. } => body.is_end_stream(),
            Kind::Full(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Upstream { body, .. } => body.size_hint(),
            Kind::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}
