//! An upgraded connection (a WebSocket): bytes copied both ways between the client and the
//! upstream until either side closes, or until no byte has gone either way for the tunnel
//! idle timeout.

use super::stack::StackBody;
use crate::conn::ListenerCounts;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// What a tunnel holds while open, and how long it may idle.
pub(super) struct Tunnel {
    /// The response's body: the request's entry and places, held until the tunnel closes.
    pub(super) held: StackBody,
    /// The request's access log line, written when the tunnel closes.
    pub(super) logged: Option<crate::access_log::Entry>,
    pub(super) resource: String,
    /// The longest no byte may go either way.
    pub(super) idle: Duration,
    /// Where an idle close is counted.
    pub(super) counts: ListenerCounts,
    /// A place of its client's under `max_connections_per_client` (its connection's is given
    /// back when hyper hands the connection over), until it closes.
    pub(super) _client: crate::per_client::ClientSeat,
}

impl Tunnel {
    /// Copies bytes both ways between `client` and `upstream` once both have switched, until
    /// either side closes or the tunnel idles for its timeout; then gives back what it holds.
    pub(super) async fn run(
        mut self,
        client: hyper::upgrade::OnUpgrade,
        upstream: hyper::upgrade::OnUpgrade,
    ) {
        let (client, upstream) = tokio::join!(client, upstream);
        // The session's length is its client's (and its upstream's), no latency of the
        // upstream's: its end is no sample for an adaptive limit, nor slow to a breaker.
        if let Some(body) = self.held.inner_mut() {
            body.set_waiting_on_caller(true);
        }
        let result = match (client, upstream) {
            (Ok(client), Ok(upstream)) => self.copy(client, upstream).await,
            (Err(err), _) | (_, Err(err)) => Err(std::io::Error::other(err)),
        };
        if let Err(err) = result {
            tracing::debug!(resource = %self.resource, error = %err, "upgraded connection failed");
            if let Some(body) = self.held.inner_mut() {
                body.mark_error();
            }
        }
        // The places go back, then the line is written.
        let Self { held, logged, .. } = self;
        drop(held);
        drop(logged);
    }

    async fn copy(
        &self,
        client: hyper::upgrade::Upgraded,
        upstream: hyper::upgrade::Upgraded,
    ) -> std::io::Result<()> {
        let last = Arc::new(Activity::new());
        let mut client = Touched::new(hyper_util::rt::TokioIo::new(client), &last);
        let mut upstream = Touched::new(hyper_util::rt::TokioIo::new(upstream), &last);
        let copied = tokio::io::copy_bidirectional(&mut client, &mut upstream);
        tokio::select! {
            copied = copied => copied.map(|_| ()),
            () = last.idle_for(self.idle) => {
                // Dropping both sides closes them.
                self.counts.count_tunnel_idle_close();
                tracing::debug!(resource = %self.resource, "upgraded connection closed: idle");
                Ok(())
            }
        }
    }
}

/// When a byte last came from either side.
struct Activity {
    base: Instant,
    /// Nanoseconds from `base`.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            base: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let nanos = self.base.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        self.last.store(nanos, Ordering::Relaxed);
    }

    /// Completes once no byte has come for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last = self.base + Duration::from_nanos(self.last.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// One side of a tunnel, noting in its [`Activity`] each read that brings bytes and each write
/// that takes some.
struct Touched<T> {
    io: T,
    activity: Arc<Activity>,
}

impl<T> Touched<T> {
    fn new(io: T, activity: &Arc<Activity>) -> Self {
        Self {
            io,
            activity: Arc::clone(activity),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Touched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Touched<T> {
    /// A write that takes bytes is activity too: a slow but steady reader keeps the copy's
    /// buffer full, so that nothing new is read while it takes what was.
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
