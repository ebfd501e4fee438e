use super::Place;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A connection accepted by a [`LimitedListener`](super::LimitedListener): a [`TcpStream`] that
/// holds one of the listener's places until it is dropped.
pub struct LimitedStream {
    stream: TcpStream,
    place: Place,
}

impl LimitedStream {
    pub(super) fn new(stream: TcpStream, place: Place) -> Self {
        Self { stream, place }
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &TcpStream {
        &self.stream
    }

    /// The underlying stream, mutably.
    pub fn get_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// The remote address.
    ///
    /// # Errors
    ///
    /// As [`TcpStream::peer_addr`].
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// Takes the connection off the runtime it was accepted on, keeping its place, so that
    /// another thread's runtime can serve it ([`DetachedStream::attach`]).
    ///
    /// # Errors
    ///
    /// As [`TcpStream::into_std`]; the connection is closed then (its place given back).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway_tower::LimitedListener;
    /// use tokio::net::{TcpListener, TcpStream};
    ///
    /// # fn main() -> std::io::Result<()> {
    /// let accepting = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let (listener, detached, _client) = accepting.block_on(async {
    ///     let listener = LimitedListener::new(TcpListener::bind("127.0.0.1:0").await?, 10);
    ///     let client = TcpStream::connect(listener.local_addr()?).await?;
    ///     let (stream, _peer) = listener.accept().await?;
    ///     std::io::Result::Ok((listener, stream.detach()?, client))
    /// })?;
    /// assert_eq!(listener.limit().state().open, 1);
    /// // Served on another thread, with a runtime of its own.
    /// std::thread::spawn(move || -> std::io::Result<()> {
    ///     let serving = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    ///     serving.block_on(async { detached.attach().map(drop) })
    /// })
    /// .join()
    /// .unwrap()?;
    /// // Its place was given back when it was dropped, over there.
    /// assert_eq!(listener.limit().state().open, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn detach(self) -> io::Result<DetachedStream> {
        Ok(DetachedStream {
            stream: self.stream.into_std()?,
            place: self.place,
        })
    }
}

/// A [`LimitedStream`] off any runtime, holding its listener's place: what
/// [`LimitedStream::detach`] gives, to move to another thread.
pub struct DetachedStream {
    stream: std::net::TcpStream,
    place: Place,
}

impl DetachedStream {
    /// Registers the connection with the calling thread's runtime.
    ///
    /// # Errors
    ///
    /// As [`TcpStream::from_std`] (outside a runtime, or the runtime cannot register it); the
    /// connection is closed then (its place given back).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with I/O enabled, as [`TcpStream::from_std`].
    pub fn attach(self) -> io::Result<LimitedStream> {
        Ok(LimitedStream::new(
            TcpStream::from_std(self.stream)?,
            self.place,
        ))
    }
}

impl fmt::Debug for DetachedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DetachedStream")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl fmt::Debug for LimitedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitedStream")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}
