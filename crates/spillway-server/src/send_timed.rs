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

/// A connection that can be told to reset, rather than close gracefully, when it is dropped.
pub(crate) trait ResetOnClose {
    /// Sets `SO_LINGER` to 0 on its TCP socket.
    fn reset_on_close(&self) -> io::Result<()>;
}

impl ResetOnClose for tokio::net::TcpStream {
    fn reset_on_close(&self) -> io::Result<()> {
        self.set_zero_linger()
    }
}

impl ResetOnClose for spillway_tower::LimitedStream {
    fn reset_on_close(&self) -> io::Result<()> {
        self.get_ref().reset_on_close()
    }
}

impl<S: ResetOnClose> ResetOnClose for tokio_rustls::server::TlsStream<S> {
    fn reset_on_close(&self) -> io::Result<()> {
        self.get_ref().0.reset_on_close()
    }
}

/// `io`, whose writes fail with [`io::ErrorKind::TimedOut`] once one has waited `timeout`
/// without a byte taken. Only time spent unable to write counts: the deadline is armed when a
/// write finds the socket full and disarmed by the next write that takes bytes. When it fires,
/// the socket is set to reset on close (`SO_LINGER` 0, nginx's `reset_timedout_connection`):
/// what the client did not read is dropped at once, instead of lingering in the kernel's
/// send queue for as long as the client keeps its window shut. Each firing is counted.
pub(crate) struct SendTimed<I> {
    io: I,
    timeout: Duration,
    /// Armed while a write waits.
    waiting: Option<Pin<Box<Sleep>>>,
    counts: crate::conn::ListenerCounts,
}

impl<I: ResetOnClose> SendTimed<I> {
    /// `io` with `timeout`, counting each firing in `counts`.
    pub(crate) fn new(io: I, timeout: Duration, counts: crate::conn::ListenerCounts) -> Self {
        Self {
            io,
            timeout,
            waiting: None,
            counts,
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
            Poll::Ready(()) => {
                self.counts.count_send_timeout();
                if let Err(err) = self.io.reset_on_close() {
                    tracing::debug!(error = %err, "cannot set SO_LINGER on a timed-out connection");
                }
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client read nothing for the send timeout",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: ResetOnClose + AsyncRead + Unpin> AsyncRead for SendTimed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: ResetOnClose + AsyncWrite + Unpin> AsyncWrite for SendTimed<I> {
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
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// An in-memory pipe (no kernel, so paused time cannot race it) that says when it is told
    /// to reset.
    struct Pipe(DuplexStream, Arc<AtomicBool>);

    impl ResetOnClose for Pipe {
        fn reset_on_close(&self) -> io::Result<()> {
            self.1.store(true, Ordering::Release);
            Ok(())
        }
    }

    impl AsyncRead for Pipe {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Pipe {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.0).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_does_not_read_fails_at_the_timeout_and_progress_disarms_it() {
        let (near, mut far) = tokio::io::duplex(64);
        let reset = Arc::new(AtomicBool::new(false));
        let counts = crate::conn::ListenerCounts::default();
        let mut near = SendTimed::new(
            Pipe(near, Arc::clone(&reset)),
            Duration::from_secs(5),
            counts.clone(),
        );
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
        assert_eq!(counts.send_timeouts(), 0);
        let _far = reader.await.unwrap();
        // Now the peer reads nothing: the next write that waits fails 5 s later, counted, and
        // the connection is set to reset when it closes.
        let start = tokio::time::Instant::now();
        let err = near.write_all(&[2; 64]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(counts.send_timeouts(), 1);
        assert!(reset.load(Ordering::Acquire));
    }

    #[tokio::test]
    async fn a_tcp_connection_told_to_reset_has_no_linger() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _far = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (near, _) = listener.accept().await.unwrap();
        near.reset_on_close().unwrap();
        assert_eq!(near.linger().unwrap(), Some(Duration::ZERO));
    }
}
