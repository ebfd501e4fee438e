//! What the proxy's and the admin API's listeners share: accepting with a back-off on errors,
//! and serving each connection with `TCP_NODELAY` and a deadline for each request head.

use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// First pause after an accept error; it doubles up to [`MAX_BACKOFF`] while errors go on.
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
/// Longest pause between accept attempts while they fail.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Counts of one listener's troubles, for metrics; cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListenerCounts {
    inner: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    accept_errors: AtomicU64,
    header_timeouts: AtomicU64,
    body_timeouts: AtomicU64,
    send_timeouts: AtomicU64,
    tunnel_idle_closes: AtomicU64,
    go_aways: AtomicU64,
    clients_left: AtomicU64,
    /// Requests running on after their client left, each holding a [`RunningOn`].
    running_on: AtomicU64,
    upstream_refusals: AtomicU64,
    /// The workers' open connections, once the proxy serves on workers.
    worker_loads: std::sync::OnceLock<Arc<crate::workers::Loads>>,
    /// The listener's open connections and cap, once it is bound.
    accepts: std::sync::OnceLock<Arc<dyn Occupied>>,
    /// Its connections by client, under their cap, once it is bound (the proxy's).
    clients: std::sync::OnceLock<Arc<crate::per_client::ClientConnections>>,
    /// The admin API's: connections closed to make room before they showed the token,
    /// newcomers answered 503 because every place held the token, streams refused at their cap.
    evictions: AtomicU64,
    full_refusals: AtomicU64,
    stream_refusals: AtomicU64,
}

/// What counts a listener's open connections.
pub(crate) trait Occupied: Send + Sync + std::fmt::Debug {
    /// Its connections now.
    fn occupancy(&self) -> Occupancy;

    /// One more place under its cap for work that outlives its connection, if the cap allows
    /// (see [`AcceptLimit::hold_over`](spillway_tower::AcceptLimit::hold_over)); `None` from
    /// a listener that holds none.
    fn hold_over(&self) -> Option<spillway_tower::HeldPlace> {
        None
    }
}

impl Occupied for spillway_tower::AcceptLimit {
    fn hold_over(&self) -> Option<spillway_tower::HeldPlace> {
        spillway_tower::AcceptLimit::hold_over(self)
    }

    fn occupancy(&self) -> Occupancy {
        let state = self.state();
        Occupancy {
            open: state.open,
            max: state.max,
            paused: state.paused,
            ..Occupancy::default()
        }
    }
}

/// A listener's open connections and its cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Occupancy {
    /// Open now.
    pub(crate) open: usize,
    /// The cap (0: none).
    pub(crate) max: usize,
    /// Whether an accept waits at the cap now.
    pub(crate) paused: bool,
    /// Of the open ones, those that have not shown the admin token yet (the admin API's).
    pub(crate) pending: usize,
    /// Live streams open (the admin API's).
    pub(crate) streams: usize,
}

impl ListenerCounts {
    /// Accept errors (out of file descriptors, and the like).
    pub(crate) fn accept_errors(&self) -> u64 {
        self.inner.accept_errors.load(Ordering::Relaxed)
    }

    /// Connections closed because a request head did not arrive in time.
    pub(crate) fn header_timeouts(&self) -> u64 {
        self.inner.header_timeouts.load(Ordering::Relaxed)
    }

    /// Requests whose body stalled past the body timeout.
    pub(crate) fn body_timeouts(&self) -> u64 {
        self.inner.body_timeouts.load(Ordering::Relaxed)
    }

    /// Each worker's open connections, if the listener is served by workers.
    pub(crate) fn worker_loads(&self) -> Option<Vec<usize>> {
        self.inner.worker_loads.get().map(|loads| loads.get())
    }

    /// Reports the workers' loads from now on (the first workers to serve the listener).
    pub(crate) fn set_worker_loads(&self, loads: Arc<crate::workers::Loads>) {
        let _ = self.inner.worker_loads.set(loads);
    }

    /// Reports the open connections and the cap of `limit` from now on (the first listener
    /// bound with these counts).
    pub(crate) fn set_accepts(&self, counter: Arc<dyn Occupied>) {
        let _ = self.inner.accepts.set(counter);
    }

    /// Counts the listener's connections by client, under their cap, from now on.
    pub(crate) fn set_clients(&self, clients: Arc<crate::per_client::ClientConnections>) {
        let _ = self.inner.clients.set(clients);
    }

    /// The listener's connections by client, once it is bound (the proxy's).
    pub(crate) fn clients(&self) -> Option<&Arc<crate::per_client::ClientConnections>> {
        self.inner.clients.get()
    }

    /// A place for a new connection from `ip` under its client's cap (always, with no cap or
    /// before the listener is bound); `None` if its client holds its cap.
    pub(crate) fn admit_client(
        &self,
        ip: std::net::IpAddr,
    ) -> Option<crate::per_client::ClientSeat> {
        match self.inner.clients.get() {
            Some(clients) => clients.admit(ip),
            None => Some(crate::per_client::ClientSeat::none()),
        }
    }

    /// Connections closed at once because their client held its cap.
    pub(crate) fn client_refusals(&self) -> u64 {
        self.inner
            .clients
            .get()
            .map_or(0, |clients| clients.refused())
    }

    /// The listener's open connections and cap (0: none), once it is bound.
    pub(crate) fn accepts(&self) -> Option<Occupancy> {
        self.inner.accepts.get().map(|counter| counter.occupancy())
    }

    /// Counts an admin connection closed to make room for a newcomer.
    pub(crate) fn count_eviction(&self) {
        self.inner.evictions.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an admin newcomer answered 503 because every place held the token.
    pub(crate) fn count_full_refusal(&self) {
        self.inner.full_refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a live stream refused at its cap.
    pub(crate) fn count_stream_refusal(&self) {
        self.inner.stream_refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// The admin API's refusals: (evictions, full, streams).
    pub(crate) fn admin_refusals(&self) -> (u64, u64, u64) {
        (
            self.inner.evictions.load(Ordering::Relaxed),
            self.inner.full_refusals.load(Ordering::Relaxed),
            self.inner.stream_refusals.load(Ordering::Relaxed),
        )
    }

    /// Requests refused because the process's cap on upstream connections was reached.
    pub(crate) fn upstream_refusals(&self) -> u64 {
        self.inner.upstream_refusals.load(Ordering::Relaxed)
    }

    pub(crate) fn count_upstream_refusal(&self) {
        self.inner.upstream_refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections closed, and HTTP/2 streams failed, because the client took nothing for the
    /// send timeout.
    pub(crate) fn send_timeouts(&self) -> u64 {
        self.inner.send_timeouts.load(Ordering::Relaxed)
    }

    pub(crate) fn count_send_timeout(&self) {
        self.inner.send_timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Upgraded connections (WebSocket tunnels) closed because no byte went either way for
    /// the tunnel idle timeout.
    pub(crate) fn tunnel_idle_closes(&self) -> u64 {
        self.inner.tunnel_idle_closes.load(Ordering::Relaxed)
    }

    pub(crate) fn count_tunnel_idle_close(&self) {
        self.inner
            .tunnel_idle_closes
            .fetch_add(1, Ordering::Relaxed);
    }

    /// One more place under the listener's cap, for a request that runs on after its client
    /// left, counted as running on until dropped; `None` if the cap allows none, or the
    /// listener is not bound yet. (Run on over the cap, requests reset by the hundred from
    /// one address took 800 MB and every upstream descriptor: found by an attack.)
    pub(crate) fn hold_over(&self) -> Option<RunningOn> {
        let place = self.inner.accepts.get()?.hold_over()?;
        self.inner.running_on.fetch_add(1, Ordering::Relaxed);
        Some(RunningOn {
            _place: place,
            counts: Arc::clone(&self.inner),
        })
    }

    /// Connections asked to go away because too many of their requests ran on after their
    /// client left.
    pub(crate) fn go_aways(&self) -> u64 {
        self.inner.go_aways.load(Ordering::Relaxed)
    }

    pub(crate) fn count_go_away(&self) {
        self.inner.go_aways.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests running on after their client left, now.
    pub(crate) fn running_on(&self) -> u64 {
        self.inner.running_on.load(Ordering::Relaxed)
    }

    /// Requests whose client left before their response head.
    pub(crate) fn clients_left(&self) -> u64 {
        self.inner.clients_left.load(Ordering::Relaxed)
    }

    pub(crate) fn count_client_left(&self) {
        self.inner.clients_left.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_body_timeout(&self) {
        self.inner.body_timeouts.fetch_add(1, Ordering::Relaxed);
    }
}

/// A request's place under its listener's cap while it runs on after its client left, and
/// its count in [`ListenerCounts::running_on`]: both given back when dropped.
#[derive(Debug)]
pub(crate) struct RunningOn {
    _place: spillway_tower::HeldPlace,
    counts: Arc<Counts>,
}

impl Drop for RunningOn {
    fn drop(&mut self) {
        self.counts.running_on.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts the next connection from `accept`, pausing after each error (5 ms, doubling up to
/// 1 s) instead of retrying at once: out of file descriptors, an accept loop that retries at
/// once spins a core and starves everything else. The first error of a run is logged as a
/// warning and the end of the run as a note; each is counted.
pub(crate) async fn accept_with_backoff<S, F, A>(
    name: &str,
    counts: &ListenerCounts,
    mut accept: F,
) -> (S, SocketAddr)
where
    F: FnMut() -> A,
    A: Future<Output = io::Result<(S, SocketAddr)>>,
{
    let mut failed = 0u64;
    let mut backoff = FIRST_BACKOFF;
    loop {
        match accept().await {
            Ok(accepted) => {
                if failed > 0 {
                    tracing::info!(listener = name, errors = failed, "accepting again");
                }
                return accepted;
            }
            Err(err) => {
                counts.inner.accept_errors.fetch_add(1, Ordering::Relaxed);
                if failed == 0 {
                    tracing::warn!(
                        listener = name,
                        error = %err,
                        "cannot accept connections; retrying with a back-off"
                    );
                }
                failed += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// What a client connection may do: how long it may take to send a head, how large the head
/// may be, and how long a write to it may wait for it to read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// From the opening, and between requests on a kept-alive connection.
    pub(crate) header_timeout: Duration,
    /// The most bytes of a request head: past it, 431 and the connection closed.
    pub(crate) max_header_size: usize,
    /// The longest a write may wait for the client to read.
    pub(crate) send_timeout: Duration,
}

/// The smallest buffer hyper's HTTP/1.1 connections take (it refuses less).
const HYPER_MIN_BUFFER: usize = 8 * 1024;

impl Limits {
    /// hyper's read buffer, which a head must fit in: at least hyper's smallest (8 KiB).
    fn read_buffer(self) -> usize {
        self.max_header_size.max(HYPER_MIN_BUFFER)
    }
}

/// HTTP/1.1 connections within `limits`: a head must come whole within the header timeout
/// (from the opening, and between requests on a kept-alive connection), and fit in
/// `max_header_size` bytes (past it, 431), else the connection is closed. The read buffer
/// never grows past that size, so that a connection costs at most that much while it waits.
pub(crate) fn http1_builder(limits: Limits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.read_buffer());
    builder
}

/// The proxy's connections: HTTP/1.1 as [`http1_builder`] sets it, and HTTP/2 with the same
/// cap on a head (its decoded header list), pings that close a connection whose peer stopped
/// answering, and hyper's caps on concurrent streams and on reset floods.
pub(crate) fn proxy_builder(limits: Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.read_buffer());
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_PING_INTERVAL)
        .keep_alive_timeout(H2_PING_INTERVAL)
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(u32::try_from(limits.max_header_size).unwrap_or(u32::MAX));
    builder
}

/// How often an HTTP/2 connection is pinged, and how long an answer may take.
const H2_PING_INTERVAL: Duration = Duration::from_secs(20);
/// Streams an HTTP/2 client may have open at once on one connection.
const H2_MAX_STREAMS: u32 = 256;

/// Sets `TCP_NODELAY` on an accepted connection: a response whose head and body leave in two
/// writes must not wait for the client's delayed ACK (about 40 ms a request).
pub(crate) fn prepare(stream: &tokio::net::TcpStream, peer: SocketAddr) {
    if let Err(err) = stream.set_nodelay(true) {
        tracing::debug!(%peer, error = %err, "cannot set TCP_NODELAY");
    }
}

/// Counts a connection closed because nothing (or no whole request head) came in time.
pub(crate) fn count_header_timeout(counts: &ListenerCounts) {
    counts.inner.header_timeouts.fetch_add(1, Ordering::Relaxed);
}

/// Notes how a connection ended: a request head that did not come in time is counted.
pub(crate) fn ended<E>(counts: &ListenerCounts, peer: SocketAddr, result: Result<(), E>)
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if let Err(err) = result {
        let err = err.into();
        let timeout = err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_timeout);
        if timeout {
            count_header_timeout(counts);
            tracing::debug!(%peer, "closed: no request head in time");
        } else {
            tracing::debug!(%peer, error = %err, "connection ended with an error");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use tokio::time::Instant;

    #[tokio::test]
    async fn an_accepted_connection_sends_without_delay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        assert!(!stream.nodelay().unwrap(), "Nagle is on by default");
        prepare(&stream, peer);
        assert!(stream.nodelay().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn accept_errors_back_off_doubling_and_are_counted() {
        // Seven errors (EMFILE), then a connection.
        let results: Mutex<VecDeque<io::Result<((), SocketAddr)>>> = Mutex::new(
            (0..7)
                .map(|_| Err(io::Error::from_raw_os_error(24)))
                .chain([Ok(((), "127.0.0.1:1".parse().unwrap()))])
                .collect(),
        );
        let attempts = Mutex::new(Vec::new());
        let start = Instant::now();
        let counts = ListenerCounts::default();
        let ((), peer) = accept_with_backoff("test", &counts, || {
            attempts.lock().unwrap().push(start.elapsed());
            let next = results.lock().unwrap().pop_front().unwrap();
            async move { next }
        })
        .await;
        assert_eq!(peer.port(), 1);
        assert_eq!(counts.accept_errors(), 7);
        let ms = |ms| Duration::from_millis(ms);
        // 5, 10, 20, 40, 80, 160, 320 ms apart: never at once.
        assert_eq!(
            *attempts.lock().unwrap(),
            [
                ms(0),
                ms(5),
                ms(15),
                ms(35),
                ms(75),
                ms(155),
                ms(315),
                ms(635)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_back_off_stops_growing_at_one_second() {
        let calls = AtomicU64::new(0);
        let start = Instant::now();
        let counts = ListenerCounts::default();
        let ((), _) = accept_with_backoff("test", &counts, || {
            let n = calls.fetch_add(1, Ordering::Relaxed);
            async move {
                if n < 20 {
                    Err(io::Error::from_raw_os_error(24))
                } else {
                    Ok(((), "127.0.0.1:1".parse().unwrap()))
                }
            }
        })
        .await;
        // 5 ms doubling to 640 ms (8 pauses, 1,275 ms in all), then 12 pauses of 1 s.
        assert_eq!(start.elapsed(), Duration::from_millis(1_275 + 12_000));
    }
}
