//! An upstream's response body, holding its HTTP/2 stream's place on its connection until it
//! ends or is dropped (see [`super::http2_conns`]).

use super::http2_conns::OpenStream;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The body of an upstream's response, as hyper reads it, with its stream's place on an HTTP/2
/// connection (none over HTTP/1.1).
pub(crate) struct UpstreamBody {
    body: Incoming,
    stream: Option<OpenStream>,
}

impl UpstreamBody {
    /// `body`, holding `stream` until it ends.
    pub(crate) fn new(body: Incoming, stream: Option<OpenStream>) -> Self {
        Self { body, stream }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        let over = match &polled {
            Poll::Ready(None | Some(Err(_))) => true,
            // Its last frame: over, though its reader may take long to be given it.
            Poll::Ready(Some(Ok(_))) => self.body.is_end_stream(),
            Poll::Pending => false,
        };
        if over {
            // The stream is over: its place is free.
            self.stream = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
