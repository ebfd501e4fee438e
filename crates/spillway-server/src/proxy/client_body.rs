//! The client's request body as the proxy forwards it, with what the client may not do with it:
//! stall past the body timeout, run past the size cap, break its framing or stop part-way. Each
//! is the client's fault, noted as a [`ClientFault`] so that the request is answered 408, 413 or
//! 400 and never counted against the upstream.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

use super::forwarding::Forwarding;

/// How a client's body failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientFault {
    /// No bytes came for the body timeout: 408.
    Stalled = 1,
    /// More bytes than `listener.max_body_size`: 413.
    TooLarge = 2,
    /// Its framing is broken (a bad chunk size, say): 400.
    Malformed = 3,
    /// The client closed or reset before its end: nobody is left to answer (400 if it is).
    Aborted = 4,
    /// Still coming when the upstream's time (its timeout, or the request's deadline) ran
    /// out, or ended so late that the upstream had less than half that time with it, or made
    /// the upstream wait on it for more than a quarter of that time: a client
    /// that sends its body slowly, byte by byte, makes the wait its own: 408.
    TooSlow = 5,
}

impl ClientFault {
    /// The status the client gets.
    pub(crate) fn status(self) -> http::StatusCode {
        match self {
            Self::Stalled | Self::TooSlow => http::StatusCode::REQUEST_TIMEOUT,
            Self::TooLarge => http::StatusCode::PAYLOAD_TOO_LARGE,
            Self::Malformed | Self::Aborted => http::StatusCode::BAD_REQUEST,
        }
    }

    /// The `reason` label of its `outcome="client_error"` series.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Stalled => "body_timeout",
            Self::TooLarge => "body_too_large",
            Self::Malformed => "bad_body",
            Self::Aborted => "client_gone",
            Self::TooSlow => "body_too_slow",
        }
    }

    /// What the client reads.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Self::Stalled => "request body timed out\n",
            Self::TooLarge => "request body too large\n",
            Self::Malformed => "malformed request body\n",
            Self::Aborted => "request body cut short\n",
            Self::TooSlow => "request body too slow: it had not ended when the time ran out\n",
        }
    }

    /// The fault of a body error from hyper: HTTP/1.1 framing that does not parse is
    /// malformed; a connection that ended early, or an HTTP/2 stream the client reset, is an
    /// abort.
    fn of(err: &hyper::Error) -> Self {
        if err.is_incomplete_message() || err.is_canceled() || err.is_closed() {
            return Self::Aborted;
        }
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            if let Some(io) = cause.downcast_ref::<std::io::Error>() {
                return match io.kind() {
                    std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => {
                        Self::Malformed
                    }
                    _ => Self::Aborted,
                };
            }
            source = cause.source();
        }
        Self::Aborted
    }
}

/// Where a [`ClientBody`] notes its fault, read by the request's handler once the upstream
/// request failed. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct FaultCell(Arc<Cell>);

#[derive(Debug)]
struct Cell {
    fault: AtomicU8,
    /// When the body ended, whole: nanoseconds from `made`, plus one (0: not yet).
    ended: AtomicU64,
    /// Nanoseconds the upstream request waited for the client's next bytes, summed.
    waited: AtomicU64,
    made: tokio::time::Instant,
}

impl Default for Cell {
    fn default() -> Self {
        Self {
            fault: AtomicU8::new(0),
            ended: AtomicU64::new(0),
            waited: AtomicU64::new(0),
            made: tokio::time::Instant::now(),
        }
    }
}

impl FaultCell {
    /// The first fault noted, if any.
    pub(crate) fn get(&self) -> Option<ClientFault> {
        match self.0.fault.load(Ordering::Acquire) {
            1 => Some(ClientFault::Stalled),
            2 => Some(ClientFault::TooLarge),
            3 => Some(ClientFault::Malformed),
            4 => Some(ClientFault::Aborted),
            5 => Some(ClientFault::TooSlow),
            _ => None,
        }
    }

    fn set(&self, fault: ClientFault) {
        // The first fault stays.
        let _ = self
            .0
            .fault
            .compare_exchange(0, fault as u8, Ordering::AcqRel, Ordering::Acquire);
    }

    /// When the body ended, whole, if it has.
    pub(crate) fn body_ended_at(&self) -> Option<tokio::time::Instant> {
        match self.0.ended.load(Ordering::Acquire) {
            0 => None,
            nanos => Some(self.0.made + Duration::from_nanos(nanos - 1)),
        }
    }

    /// The time the upstream request has waited for the client's body bytes so far: the
    /// client's time, which counts towards whether the client paced the call.
    pub(crate) fn caller_wait(&self) -> Duration {
        Duration::from_nanos(self.0.waited.load(Ordering::Acquire))
    }

    /// A wait for the client's next bytes that began at `since` ended now.
    fn waited_since(&self, since: tokio::time::Instant) {
        let nanos = since.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        let _ = (self.0.waited).fetch_update(Ordering::AcqRel, Ordering::Acquire, |waited| {
            Some(waited.saturating_add(nanos))
        });
    }

    fn end(&self) {
        let nanos = self
            .0
            .made
            .elapsed()
            .as_nanos()
            .min(u128::from(u64::MAX - 1)) as u64;
        // The first end stays.
        let _ = self
            .0
            .ended
            .compare_exchange(0, nanos + 1, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// The client's body failed ([`ClientFault`]), as the upstream request's body error.
#[derive(Debug)]
pub(crate) struct ClientBodyError(ClientFault);

impl fmt::Display for ClientBodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the client's request body failed: {}", self.0.as_str())
    }
}

impl std::error::Error for ClientBodyError {}

/// The limits on a client's body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits {
    /// Longest wait for its next bytes while the upstream reads.
    pub(crate) timeout: Duration,
    /// Most bytes (0: no cap).
    pub(crate) max_size: u64,
}

/// The client's body, failing with a [`ClientBodyError`] (and noting its fault) when the
/// upstream waits for its next bytes longer than the timeout, when it runs past the size cap,
/// or when hyper finds it malformed or cut short. Only the time spent waiting on the client
/// counts: while the upstream does not read, nothing is waited for.
pub(crate) struct ClientBody {
    body: Incoming,
    limits: BodyLimits,
    /// Bytes read so far.
    read: u64,
    /// The length it announced, if any: an end short of it is the client's abort.
    announced: Option<u64>,
    /// Armed when a read finds nothing yet; disarmed by the next frame.
    waiting: Option<Pin<Box<Sleep>>>,
    fault: FaultCell,
    /// Told when the body has ended, if its call may run on after the client leaves; tells
    /// when the client left.
    forwarding: Option<Forwarding>,
    /// The client left with its body still coming, and its call runs on: the body waits out
    /// the body timeout, as a body that stalls.
    stalling: bool,
}

impl ClientBody {
    /// `body` within `limits`; its fault, if any, is noted in `fault`, and its end told to
    /// `forwarding`.
    pub(crate) fn new(
        body: Incoming,
        limits: BodyLimits,
        fault: FaultCell,
        forwarding: Option<Forwarding>,
    ) -> Self {
        if body.is_end_stream() {
            fault.end();
            if let Some(forwarding) = &forwarding {
                forwarding.body_ended();
            }
        }
        Self {
            announced: body.size_hint().exact(),
            body,
            limits,
            read: 0,
            waiting: None,
            fault,
            forwarding,
            stalling: false,
        }
    }

    /// Whether a body cut short by its client (gone) waits out the body timeout instead of
    /// failing at once: when its call runs on after the client leaves. An upstream that works
    /// before it has read its whole body goes on working when the body fails; the call holds
    /// its places until the upstream answers or the timeout passes, as for a client whose body
    /// stalls. Failed at once, it would free them while the upstream worked: a client could
    /// send the upstream any number of requests past its limits (found by an attack: 2,630 at
    /// once under a concurrency limit of 10).
    fn stalls_when_gone(&self) -> bool {
        self.forwarding.is_some()
    }

    /// The client is gone with its body still coming: waits out the body timeout (counted
    /// from the last bytes), then fails as stalled (its first fault, the abort, stays).
    fn stall(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if !self.stalling {
            self.stalling = true;
            self.fault.set(ClientFault::Aborted);
        }
        let timeout = self.limits.timeout;
        let waiting = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(waiting.as_mut().poll(cx));
        self.fail(ClientFault::Stalled)
    }

    /// The body has ended, whole: its call may run on if its client leaves.
    fn ended(&self) {
        self.fault.end();
        if let Some(forwarding) = &self.forwarding {
            forwarding.body_ended();
        }
    }

    fn fail(&mut self, fault: ClientFault) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.fault.set(fault);
        Poll::Ready(Some(Err(Box::new(ClientBodyError(fault)))))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let gone = (this.forwarding.as_ref())
            .is_some_and(|forwarding| forwarding.client_gone() && !forwarding.body_has_ended());
        if this.stalling || gone {
            return this.stall(cx);
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            // The wait for these bytes, if there was one, was the client's.
            if let Some(waiting) = this.waiting.take() {
                if let Some(since) = waiting.deadline().checked_sub(this.limits.timeout) {
                    this.fault.waited_since(since);
                }
            }
            return match frame {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        this.read = this.read.saturating_add(data.len() as u64);
                        if this.limits.max_size != 0 && this.read > this.limits.max_size {
                            return this.fail(ClientFault::TooLarge);
                        }
                    }
                    // The sender asks no further once the body says it has ended.
                    if this.is_end_stream() {
                        this.ended();
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Some(Err(err)) => match ClientFault::of(&err) {
                    ClientFault::Aborted if this.stalls_when_gone() => this.stall(cx),
                    fault => this.fail(fault),
                },
                // An HTTP/2 client that resets its stream with NO_ERROR ends the body early
                // without an error: short of its announced length, it was cut short.
                None if this.announced.is_some_and(|length| this.read < length) => {
                    if this.stalls_when_gone() {
                        this.stall(cx)
                    } else {
                        this.fail(ClientFault::Aborted)
                    }
                }
                None => {
                    this.ended();
                    Poll::Ready(None)
                }
            };
        }
        let timeout = this.limits.timeout;
        let waiting = this
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(waiting.as_mut().poll(cx));
        this.fail(ClientFault::Stalled)
    }

    /// Ended as the client's body says, and not short of its announced length: a body that
    /// stops short is read to its end, where it fails as cut short.
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream() && self.announced.is_none_or(|length| self.read >= length)
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
