//! A request body forwarded with a deadline on its progress: a client that stops sending its
//! body part-way cannot hold a place (and a connection to the upstream) for good.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

/// The body stalled: no data from the client for the body timeout.
#[derive(Debug)]
pub(crate) struct BodyTimedOut;

impl fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request body stalled past the body timeout")
    }
}

impl std::error::Error for BodyTimedOut {}

/// The client's body, failing with [`BodyTimedOut`] when the upstream waits for its next
/// bytes longer than `timeout`. Only the time spent waiting on the client counts: while the
/// upstream does not read, nothing is waited for.
pub(crate) struct TimedBody {
    body: Incoming,
    timeout: Duration,
    /// Armed when a read finds nothing yet; disarmed by the next frame.
    waiting: Option<Pin<Box<Sleep>>>,
    timed_out: Arc<AtomicBool>,
}

impl TimedBody {
    /// `body` with `timeout`; `timed_out` is set if it fires.
    pub(crate) fn new(body: Incoming, timeout: Duration, timed_out: Arc<AtomicBool>) -> Self {
        Self {
            body,
            timeout,
            waiting: None,
            timed_out,
        }
    }
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            this.waiting = None;
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let timeout = this.timeout;
        let waiting = this
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(waiting.as_mut().poll(cx));
        this.timed_out.store(true, Ordering::Release);
        Poll::Ready(Some(Err(Box::new(BodyTimedOut))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
