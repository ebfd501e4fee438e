//! A client connection whose writes may wait only so long for the client to read (nginx's
//! `send_timeout`): a client that stops reading cannot hold its connection, and the upstream
//! response it was being sent, for good.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `io`, whose writes fail with [`io::ErrorKind::TimedOut`] once one has waited `timeout`
/// without a byte taken. Only time spent unable to write counts: the deadline is armed when a
/// write finds the socket full and disarmed by the next write that takes bytes.
pub(crate) struct SendTimed<I> {
    io: I,
    timeout: Duration,
    /// Armed while a write waits.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<I> SendTimed<I> {
    /// `io` with `timeout`.
    pub(crate) fn new(io: I, timeout: Duration) -> Self {
        Self {
            io,
            timeout,
            waiting: None,
        }
    }

    /// What a write's poll returned, with the deadline kept: progress disarms it, a wait arms
    /// it (once), and a wait past it fails.
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        let timeout = self.timeout;
        let waiting = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match waiting.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the send timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for SendTimed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for SendTimed<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.timed(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.timed(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.timed(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_does_not_read_fails_at_the_timeout_and_progress_disarms_it() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut near = SendTimed::new(near, Duration::from_secs(5));
        // Fills the pipe, then the peer reads a little every 4 s: each read is progress.
        near.write_all(&[0; 64]).await.unwrap();
        let start = tokio::time::Instant::now();
        let reader = tokio::spawn(async move {
            let mut buf = [0; 16];
            for _ in 0..4 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                far.read_exact(&mut buf).await.unwrap();
            }
            far
        });
        near.write_all(&[1; 64]).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(16));
        let _far = reader.await.unwrap();
        // Now the peer reads nothing: the next write that waits fails 5 s later.
        let start = tokio::time::Instant::now();
        let err = near.write_all(&[2; 64]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
