//! A worker's HTTP/2 connections to one upstream, and the streams each carries: a request goes
//! on the oldest connection with fewer than [`STREAMS_PER_CONNECTION`] streams open, and a new
//! connection is made when none has room, so that streams nobody finishes (downloads their
//! clients stopped reading) cannot hold every stream the upstream takes on one connection while
//! the other requests queue behind them. A connection other than the first is closed once it
//! has carried no stream for [`IDLE_TIMEOUT`](super::pool::IDLE_TIMEOUT) (at the idle reaper's
//! next round).

use super::client_body::ClientBody;
use crate::descriptors::UpstreamSeat;
use hyper::client::conn::http2;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The most streams a request finds open on a connection it is sent on: hyper's count of the
/// streams an upstream takes at once until its SETTINGS say otherwise (100), and as many as
/// most servers take (100 to 256).
pub(crate) const STREAMS_PER_CONNECTION: usize = 100;

/// One HTTP/2 connection and its streams.
pub(crate) struct Http2Conn {
    sender: http2::SendRequest<ClientBody>,
    streams: Arc<Streams>,
}

/// The streams open on a connection, and since when it has had none; with the connection's
/// place under the cap on upstream connections, given back once neither the connection's task
/// nor a stream's body holds this (hyper's task for the connection ends at the upstream's
/// GOAWAY, while the streams under way go on over it).
struct Streams {
    open: AtomicUsize,
    /// When the last stream closed (or the connection was made).
    idle_since: Mutex<Instant>,
    _seat: UpstreamSeat,
}

/// What the connection's task holds for as long as it runs: its place under the cap.
pub(crate) struct ConnectionHold {
    _streams: Arc<Streams>,
}

/// A stream open on a connection, until it is dropped: with the response's body, when it ends
/// or its client goes, or with the request that failed.
pub(crate) struct OpenStream(Arc<Streams>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        let streams = &self.0;
        if streams.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            // A reaper between the two reads the time of an earlier close, and may close a
            // connection that has just carried its last stream a little early: no harm.
            *lock(&streams.idle_since) = Instant::now();
        }
    }
}

impl Http2Conn {
    /// A connection just made, with no stream yet, holding `seat`.
    pub(crate) fn new(sender: http2::SendRequest<ClientBody>, seat: UpstreamSeat) -> Self {
        Self {
            sender,
            streams: Arc::new(Streams {
                open: AtomicUsize::new(0),
                idle_since: Mutex::new(Instant::now()),
                _seat: seat,
            }),
        }
    }

    /// For the connection's task to hold while it runs.
    pub(crate) fn hold(&self) -> ConnectionHold {
        ConnectionHold {
            _streams: self.streams.clone(),
        }
    }

    /// Waits until it can take a request.
    pub(crate) async fn ready(&mut self) -> Result<(), hyper::Error> {
        self.sender.ready().await
    }

    /// A stream on it, counted until the returned [`OpenStream`] is dropped.
    pub(crate) fn open(&self) -> (http2::SendRequest<ClientBody>, OpenStream) {
        self.streams.open.fetch_add(1, Ordering::SeqCst);
        (self.sender.clone(), OpenStream(self.streams.clone()))
    }

    /// Whether it has room for another stream.
    fn has_room(&self) -> bool {
        self.streams.open.load(Ordering::SeqCst) < STREAMS_PER_CONNECTION
    }

    /// Whether it has carried no stream for `idle`.
    fn idle_for(&self, idle: Duration, now: Instant) -> bool {
        self.streams.open.load(Ordering::SeqCst) == 0
            && now.duration_since(*lock(&self.streams.idle_since)) >= idle
    }
}

/// A worker's HTTP/2 connections to one upstream, the oldest first.
#[derive(Default)]
pub(crate) struct Http2Conns {
    conns: Mutex<Vec<Http2Conn>>,
}

impl Http2Conns {
    /// A stream on the oldest open connection with room for one, if any.
    pub(crate) fn stream(&self) -> Option<(http2::SendRequest<ClientBody>, OpenStream)> {
        let mut conns = lock(&self.conns);
        conns.retain(|conn| !conn.sender.is_closed());
        conns
            .iter()
            .find(|conn| conn.has_room())
            .map(Http2Conn::open)
    }

    /// Keeps `conn`, made because none had room, and opens a stream on it.
    pub(crate) fn add(&self, conn: Http2Conn) -> (http2::SendRequest<ClientBody>, OpenStream) {
        let stream = conn.open();
        lock(&self.conns).push(conn);
        stream
    }

    /// Closes the connections after the first that carried no stream for `idle` (each closes
    /// once dropped here and by the requests that hold its sender), and forgets closed ones.
    pub(crate) fn reap(&self, idle: Duration, now: Instant) {
        let expired: Vec<Http2Conn> = {
            let mut conns = lock(&self.conns);
            conns.retain(|conn| !conn.sender.is_closed());
            let mut kept = Vec::with_capacity(conns.len());
            let mut expired = Vec::new();
            for (index, conn) in conns.drain(..).enumerate() {
                if index > 0 && conn.idle_for(idle, now) {
                    expired.push(conn);
                } else {
                    kept.push(conn);
                }
            }
            *conns = kept;
            expired
        };
        // Closed outside the lock.
        drop(expired);
    }
}

/// The lock, even if a thread panicked while holding it: each step leaves the data valid.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
