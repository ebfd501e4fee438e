//! Dubbo's `accepts`: a cap on concurrently open accepted connections.

mod stream;

pub use stream::{DetachedStream, LimitedStream};

use spillway::{BlockError, BlockKind};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// What a [`LimitedListener`] does while its cap is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtCapacity {
    /// Stop accepting until a connection closes (backpressure): new connections wait in the
    /// kernel's accept backlog, and past the backlog the kernel refuses or drops them.
    #[default]
    Pause,
    /// Accept and close at once (Dubbo's behavior): the client sees the connection closed, and
    /// the refusal is counted and reported.
    Close,
}

/// A [`TcpListener`] that holds at most `max` accepted connections open at a time.
///
/// Each accepted [`LimitedStream`] holds one place until it is dropped (the connection closes).
/// At the cap the listener pauses or closes newcomers, as [`AtCapacity`] says. A `max` of 0
/// means no cap (Dubbo's `accepts=0`); connections are still counted.
///
/// [`limit`](Self::limit) returns a handle for metrics ([`AcceptsState`]: open, refused,
/// paused). Refused connections are reported as [`BlockKind::Accepts`] errors to the hook set
/// with [`on_refused`](Self::on_refused).
///
/// # Examples
///
/// ```
/// use spillway_tower::{AtCapacity, LimitedListener};
/// use tokio::io::AsyncWriteExt;
/// use tokio::net::{TcpListener, TcpStream};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let listener = LimitedListener::new(TcpListener::bind("127.0.0.1:0").await?, 100)
///     .at_capacity(AtCapacity::Pause);
/// let addr = listener.local_addr()?;
/// let _client = TcpStream::connect(addr).await?;
/// let (mut stream, _peer) = listener.accept().await?;
/// assert_eq!(listener.limit().state().open, 1);
/// stream.write_all(b"hello").await?;
/// drop(stream);
/// assert_eq!(listener.limit().state().open, 0);
/// # Ok(())
/// # }
/// ```
pub struct LimitedListener {
    listener: TcpListener,
    gate: Arc<Gate>,
    at_capacity: AtCapacity,
    on_refused: Option<RefusalHook>,
}

type RefusalHook = Arc<dyn Fn(&BlockError, SocketAddr) + Send + Sync>;

/// A handle on a [`LimitedListener`]'s counts, for metrics; cheap to clone.
#[derive(Clone)]
pub struct AcceptLimit {
    gate: Arc<Gate>,
}

/// A [`LimitedListener`]'s counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcceptsState {
    /// The cap (0: none).
    pub max: usize,
    /// Accepted connections open now.
    pub open: usize,
    /// Connections accepted and closed at once because the cap was reached
    /// ([`AtCapacity::Close`]).
    pub refused: u64,
    /// Whether an accept is paused at the cap now ([`AtCapacity::Pause`]).
    pub paused: bool,
}

/// The shared counts: open places, refusals, and a wake-up for paused accepts.
struct Gate {
    name: String,
    max: usize,
    open: AtomicUsize,
    refused: AtomicU64,
    /// Accepts now paused at the cap.
    paused: AtomicUsize,
    /// Places taken by accepts still waiting for a connection (not open connections).
    accepting: AtomicUsize,
    freed: Notify,
}

/// Counts a place as held by a waiting accept while it lives (also when the accept is
/// cancelled), so that the state's `open` counts connections only.
struct Accepting<'a>(&'a Gate);

impl<'a> Accepting<'a> {
    fn new(gate: &'a Gate) -> Self {
        gate.accepting.fetch_add(1, Ordering::AcqRel);
        Self(gate)
    }
}

impl Drop for Accepting<'_> {
    fn drop(&mut self) {
        self.0.accepting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One open place; given back (waking a paused accept) when dropped.
struct Place {
    gate: Arc<Gate>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.gate.open.fetch_sub(1, Ordering::AcqRel);
        // Stores a wake-up if no accept waits yet, so a pause that starts later sees it.
        self.gate.freed.notify_one();
    }
}

/// Counts an accept as paused while it lives (also when the accept is cancelled).
struct Paused<'a>(&'a Gate);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.paused.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Gate {
    /// One place, if the cap allows it: one compare-and-swap, so the cap is never exceeded.
    fn try_take(self: &Arc<Self>) -> Option<Place> {
        let max = if self.max == 0 { usize::MAX } else { self.max };
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            })
            .ok()
            .map(|_| Place { gate: self.clone() })
    }

    /// A place, waiting for a connection to close if none is free.
    async fn take(self: &Arc<Self>) -> Place {
        loop {
            if let Some(place) = self.try_take() {
                return place;
            }
            let mut freed = pin!(self.freed.notified());
            // Registered before the re-check, so a close in between is not missed.
            freed.as_mut().enable();
            if let Some(place) = self.try_take() {
                return place;
            }
            self.paused.fetch_add(1, Ordering::AcqRel);
            let _paused = Paused(self);
            freed.await;
        }
    }

    fn state(&self) -> AcceptsState {
        // A place taken for an accept that still waits is no open connection.
        let accepting = self.accepting.load(Ordering::Acquire);
        AcceptsState {
            max: self.max,
            open: self.open.load(Ordering::Acquire).saturating_sub(accepting),
            refused: self.refused.load(Ordering::Acquire),
            paused: self.paused.load(Ordering::Acquire) > 0,
        }
    }
}

impl LimitedListener {
    /// Wraps `listener`, holding at most `max` accepted connections open (0: no cap), pausing
    /// at the cap.
    pub fn new(listener: TcpListener, max: usize) -> Self {
        let name = listener
            .local_addr()
            .map_or_else(|_| "listener".to_owned(), |addr| addr.to_string());
        Self {
            listener,
            gate: Arc::new(Gate {
                name,
                max,
                open: AtomicUsize::new(0),
                refused: AtomicU64::new(0),
                paused: AtomicUsize::new(0),
                accepting: AtomicUsize::new(0),
                freed: Notify::new(),
            }),
            at_capacity: AtCapacity::Pause,
            on_refused: None,
        }
    }

    /// What to do at the cap (default [`AtCapacity::Pause`]).
    #[must_use]
    pub fn at_capacity(mut self, at_capacity: AtCapacity) -> Self {
        self.at_capacity = at_capacity;
        self
    }

    /// Called with the refusal (a [`BlockKind::Accepts`] error naming the listener's address,
    /// observed = open, threshold = the cap) and the peer, for each connection closed at the cap.
    #[must_use]
    pub fn on_refused(
        mut self,
        hook: impl Fn(&BlockError, SocketAddr) + Send + Sync + 'static,
    ) -> Self {
        self.on_refused = Some(Arc::new(hook));
        self
    }

    /// Accepts the next connection the cap allows.
    ///
    /// With [`AtCapacity::Pause`], waits for a connection to close before accepting at the cap;
    /// with [`AtCapacity::Close`], closes connections that arrive at the cap and goes on
    /// accepting. Cancellation-safe: dropped while it waits, it holds no place and loses no
    /// connection it accepted.
    ///
    /// # Errors
    ///
    /// The underlying [`TcpListener::accept`] error.
    pub async fn accept(&self) -> io::Result<(LimitedStream, SocketAddr)> {
        match self.at_capacity {
            AtCapacity::Pause => {
                let place = self.gate.take().await;
                // Dropped on error or cancellation, the place goes back.
                let accepting = Accepting::new(&self.gate);
                let (stream, peer) = self.listener.accept().await?;
                drop(accepting);
                Ok((LimitedStream::new(stream, place), peer))
            }
            AtCapacity::Close => loop {
                let (stream, peer) = self.listener.accept().await?;
                if let Some(place) = self.gate.try_take() {
                    return Ok((LimitedStream::new(stream, place), peer));
                }
                self.refuse(peer);
                drop(stream);
            },
        }
    }

    #[cold]
    fn refuse(&self, peer: SocketAddr) {
        self.gate.refused.fetch_add(1, Ordering::AcqRel);
        if let Some(hook) = &self.on_refused {
            let err = BlockError::custom(
                BlockKind::Accepts,
                self.gate.name.clone(),
                self.gate.open.load(Ordering::Acquire) as f64,
                self.gate.max as f64,
            );
            hook(&err, peer);
        }
    }

    /// Another listener under this one's cap, with its setting and hook: for a clone of the
    /// same socket registered with another runtime, so that several threads, each with its
    /// own runtime, accept from one socket while the cap counts the connections of all.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway_tower::LimitedListener;
    /// use std::os::fd::AsFd;
    /// use tokio::net::{TcpListener, TcpStream};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let first = LimitedListener::new(TcpListener::bind("127.0.0.1:0").await?, 1);
    /// // A clone of the socket, as another thread's runtime would register it.
    /// let clone = first.get_ref().as_fd().try_clone_to_owned()?;
    /// let second = first.share(TcpListener::from_std(clone.into())?);
    /// let _client = TcpStream::connect(first.local_addr()?).await?;
    /// let (_stream, _peer) = second.accept().await?;
    /// // One place taken under the cap of 1 that both share.
    /// assert_eq!(first.limit().state().open, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn share(&self, listener: TcpListener) -> Self {
        Self {
            listener,
            gate: self.gate.clone(),
            at_capacity: self.at_capacity,
            on_refused: self.on_refused.clone(),
        }
    }

    /// A handle on the counts, for metrics.
    pub fn limit(&self) -> AcceptLimit {
        AcceptLimit {
            gate: self.gate.clone(),
        }
    }

    /// The local address the listener is bound to.
    ///
    /// # Errors
    ///
    /// As [`TcpListener::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The wrapped listener.
    pub fn get_ref(&self) -> &TcpListener {
        &self.listener
    }
}

impl AcceptLimit {
    /// The counts now.
    pub fn state(&self) -> AcceptsState {
        self.gate.state()
    }

    /// One more place under the cap, for work that outlives the connection it came on (a
    /// proxied request whose client left, run on to the upstream's answer, as nginx counts
    /// such a request against its `worker_connections`), if one is free, as an accept takes
    /// one: `None` at the cap, where the work should end with its connection. With no cap,
    /// always a place. A held place counts in [`AcceptsState::open`] and keeps a paused accept
    /// waiting, as a connection does, until it is dropped. With [`AtCapacity::Pause`] each
    /// accept that waits for a connection holds a place already, so that a listener served by
    /// several accept loops has fewer to give.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway_tower::LimitedListener;
    /// use tokio::net::{TcpListener, TcpStream};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let listener = LimitedListener::new(TcpListener::bind("127.0.0.1:0").await?, 1);
    /// let _client = TcpStream::connect(listener.local_addr()?).await?;
    /// let (stream, _peer) = listener.accept().await?;
    /// let limit = listener.limit();
    /// // The one place is the connection's.
    /// assert!(limit.hold_over().is_none());
    /// // It closed, its work goes on: the place is the work's now.
    /// drop(stream);
    /// let held = limit.hold_over().expect("a free place");
    /// assert_eq!(limit.state().open, 1);
    /// drop(held);
    /// assert_eq!(limit.state().open, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_over(&self) -> Option<HeldPlace> {
        self.gate
            .try_take()
            .map(|place| HeldPlace { _place: place })
    }
}

/// A place under a [`LimitedListener`]'s cap held by work that outlived its connection
/// ([`AcceptLimit::hold_over`]); given back when dropped.
pub struct HeldPlace {
    _place: Place,
}

impl fmt::Debug for HeldPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldPlace").finish_non_exhaustive()
    }
}

impl fmt::Debug for LimitedListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitedListener")
            .field("listener", &self.listener)
            .field("state", &self.gate.state())
            .field("at_capacity", &self.at_capacity)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for AcceptLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcceptLimit")
            .field("listener", &self.gate.name)
            .field("state", &self.gate.state())
            .finish()
    }
}
