//! The connections to one upstream, on hyper's connection API: a stack of idle HTTP/1.1
//! connections, each carrying one request at a time, and HTTP/2 connections shared by every
//! request, as few as carry them ([`super::http2_conns`]).
//!
//! It does what hyper-util's general-purpose client did for the proxy, for one upstream only: no
//! pool key to hash, no checkout racing a connect, no waiter lists.
//! - Each worker thread ([`crate::workers`]) has a lane of its own: its idle connections and
//!   its HTTP/2 connections, driven by its runtime. A request takes its worker's, so that its
//!   exchange never wakes another thread.
//! - A request takes a stream on an HTTP/2 connection with room for one, or the most recently
//!   idle HTTP/1.1 connection, or a new connection. What a new connection speaks is the
//!   configured protocol; with `auto` over TLS, ALPN decides, and a connection that comes up
//!   as HTTP/2 is shared from then on.
//! - An HTTP/1.1 connection goes back on the stack once its response has been read (at once, for
//!   the usual small response read with its head; else when its body ends).
//! - A request that a reused connection closed under before sending it (the upstream's
//!   keep-alive timeout racing the request) is sent again on another connection, once per
//!   connection that fails that way; a request on a new connection never is.
//! - Idle connections are kept for [`IDLE_TIMEOUT`], at most [`MAX_IDLE`] of them per worker;
//!   a worker's first HTTP/2 connection is kept for good, the others while they carry streams
//!   and for [`IDLE_TIMEOUT`] after.
//! - Every connection holds a place under the process's cap on upstream connections
//!   ([`crate::descriptors`]); with none left, a request that needs a new one is refused.

use super::client_body::ClientBody;
use super::http2_conns::{Http2Conn, Http2Conns, OpenStream};
use super::upstream_body::UpstreamBody;
use crate::config::UpstreamProtocol;
use http::uri::{self, Uri};
use http::{Method, Request, Response};
use hyper::client::conn::{http1, http2};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tower::ServiceExt;

/// The most bytes an upstream HTTP/1.1 connection buffers each way (hyper's default is about
/// 400 KiB): a response head must fit in it, and a client that stops reading holds at most
/// this much of its response here (with as much again queued to it), until the send timeout.
const UPSTREAM_BUFFER: usize = 64 * 1024;

/// The flow-control window of each HTTP/2 stream to the upstream, as much as an HTTP/1.1
/// connection buffers: what the upstream may send of a response that is not read on.
const STREAM_WINDOW: u32 = UPSTREAM_BUFFER as u32;

/// The flow-control window of an HTTP/2 connection to the upstream: 256 streams' windows
/// (16 MiB), more than the streams a connection carries at once
/// ([`STREAMS_PER_CONNECTION`](super::http2_conns::STREAMS_PER_CONNECTION)), so that streams
/// whose clients stop reading hold their own windows, not the connection's. With hyper's
/// defaults (2 MiB a stream, 5 MiB the connection), three unread downloads stopped every other
/// response on the connection until their clients' send timeouts. Not larger: h2 also bounds
/// the connection's small DATA frames by half of it.
const CONNECTION_WINDOW: u32 = 256 * STREAM_WINDOW;

/// How long an idle HTTP/1.1 connection is kept (hyper-util's client default).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle HTTP/1.1 connections kept per upstream and worker; one more is closed when it becomes
/// idle.
pub(crate) const MAX_IDLE: usize = 1024;

/// An error on the way to the upstream: connecting, a handshake, or the exchange.
pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

type Io = MaybeHttpsStream<TokioIo<TcpStream>>;

/// The connections to one upstream.
pub(crate) struct Pool {
    connector: HttpsConnector<HttpConnector>,
    /// The upstream's scheme and authority.
    origin: Uri,
    protocol: UpstreamProtocol,
    shared: Arc<Shared>,
}

/// What the requests and the idle reaper share.
struct Shared {
    /// One for each worker thread.
    lanes: Box<[Lane]>,
    /// Whether the reaper of idle connections runs.
    reaping: AtomicBool,
}

/// One worker's connections.
#[derive(Default)]
struct Lane {
    /// Idle HTTP/1.1 connections, the most recently used last.
    idle: Mutex<Vec<Idle>>,
    /// The HTTP/2 connections, if any is up.
    http2: Http2Conns,
    /// Held while an HTTP/2 connection is made, so that a burst makes one.
    connecting: tokio::sync::Mutex<()>,
}

struct Idle {
    sender: http1::SendRequest<ClientBody>,
    since: Instant,
}

enum Sender {
    Http1(http1::SendRequest<ClientBody>),
    /// A stream on an HTTP/2 connection.
    Http2(http2::SendRequest<ClientBody>, OpenStream),
}

impl Pool {
    /// A pool for `origin` (its scheme and authority are used), connecting with `connector`,
    /// with a lane for each of `workers` threads.
    pub(crate) fn new(
        connector: HttpsConnector<HttpConnector>,
        origin: &Uri,
        protocol: UpstreamProtocol,
        workers: std::num::NonZeroUsize,
    ) -> Self {
        let mut parts = uri::Parts::default();
        parts.scheme = origin.scheme().cloned();
        parts.authority = origin.authority().cloned();
        parts.path_and_query = Some(uri::PathAndQuery::from_static("/"));
        Self {
            connector,
            origin: Uri::from_parts(parts).unwrap_or_else(|_| origin.clone()),
            protocol,
            shared: Arc::new(Shared {
                lanes: (0..workers.get()).map(|_| Lane::default()).collect(),
                reaping: AtomicBool::new(false),
            }),
        }
    }

    /// Sends `request` (with an absolute URI at this upstream) and returns the response's head.
    ///
    /// # Errors
    ///
    /// The upstream cannot be reached, or the exchange failed.
    pub(crate) async fn send(
        &self,
        mut request: Request<ClientBody>,
    ) -> Result<Response<UpstreamBody>, Error> {
        let uri = request.uri().clone();
        // An HTTP/2 send moves `Host` into the authority: a request sent again gets it back.
        let host = request.headers().get(http::header::HOST).cloned();
        loop {
            let (sender, reused) = self.checkout().await?;
            let unsent = match sender {
                Sender::Http2(mut sender, stream) => {
                    authority_form(&mut request);
                    match sender.try_send_request(request).await {
                        Ok(response) => {
                            return Ok(response.map(|body| UpstreamBody::new(body, Some(stream))))
                        }
                        Err(mut err) => err.take_message().ok_or_else(|| err.into_error())?,
                    }
                }
                Sender::Http1(mut sender) => {
                    request_line_form(&mut request);
                    match sender.try_send_request(request).await {
                        Ok(response) => {
                            self.shared.give_back(sender);
                            return Ok(response.map(|body| UpstreamBody::new(body, None)));
                        }
                        Err(mut err) => err.take_message().ok_or_else(|| err.into_error())?,
                    }
                }
            };
            // Closed before the request went out: only a reused connection may be tried again,
            // since a new one failing says the upstream cannot take it.
            if !reused {
                return Err(
                    "the upstream closed a new connection before the request was sent".into(),
                );
            }
            request = unsent;
            *request.uri_mut() = uri.clone();
            if let Some(host) = &host {
                request
                    .headers_mut()
                    .insert(http::header::HOST, host.clone());
            }
        }
    }

    /// A connection to send on, and whether it was used before.
    async fn checkout(&self) -> Result<(Sender, bool), Error> {
        let lane = self.shared.lane();
        if let Some((sender, stream)) = lane.http2.stream() {
            return Ok((Sender::Http2(sender, stream), true));
        }
        if self.protocol != UpstreamProtocol::Http2 {
            if let Some(sender) = lane.take_idle() {
                return Ok((Sender::Http1(sender), true));
            }
        }
        if self.protocol == UpstreamProtocol::Http2 {
            // One connection for a burst: the first makes it, the others then share it.
            let _connecting = lane.connecting.lock().await;
            if let Some((sender, stream)) = lane.http2.stream() {
                return Ok((Sender::Http2(sender, stream), true));
            }
            return Ok((self.connect().await?, false));
        }
        Ok((self.connect().await?, false))
    }

    /// A new connection: [`open`](Self::open), boxed. Opening a connection (TCP, TLS, the
    /// HTTP handshake) is the rare path, and its state, about 6.5 KB, would otherwise be part
    /// of every request's future, for which hyper keeps room in each client connection for as
    /// long as it is open.
    fn connect(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Sender, Error>> + Send + '_>>
    {
        Box::pin(self.open())
    }

    /// A new connection, HTTP/2 if configured or negotiated, which is then shared.
    async fn open(&self) -> Result<Sender, Error> {
        // A place under the process's cap on upstream connections, held by the connection's
        // task until it closes.
        let seat = crate::descriptors::upstream_seat()?;
        let io: Io = self.connector.clone().oneshot(self.origin.clone()).await?;
        let negotiated_h2 = io.connected().is_negotiated_h2();
        if self.protocol == UpstreamProtocol::Http2 || negotiated_h2 {
            let (sender, connection) = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .initial_stream_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .handshake(io)
                .await?;
            let mut conn = Http2Conn::new(sender, seat);
            let hold = conn.hold();
            tokio::spawn(async move {
                let _hold = hold;
                if let Err(err) = connection.await {
                    tracing::debug!(%err, "upstream HTTP/2 connection closed");
                }
            });
            conn.ready().await?;
            // With `auto`, several connections may come up as HTTP/2 at once (ALPN decides
            // after the handshake, outside the `connecting` lock): one with room is kept, and
            // this one closes (with its request on the kept one).
            let lane = self.shared.lane();
            if let Some((sender, stream)) = lane.http2.stream() {
                return Ok(Sender::Http2(sender, stream));
            }
            let (sender, stream) = lane.http2.add(conn);
            self.shared.start_reaping();
            return Ok(Sender::Http2(sender, stream));
        }
        let (mut sender, connection) = http1::Builder::new()
            .max_buf_size(UPSTREAM_BUFFER)
            .handshake(io)
            .await?;
        tokio::spawn(async move {
            let _seat = seat;
            if let Err(err) = connection.with_upgrades().await {
                tracing::debug!(%err, "upstream connection closed");
            }
        });
        sender.ready().await?;
        self.shared.start_reaping();
        Ok(Sender::Http1(sender))
    }
}

impl Shared {
    /// The calling worker's lane.
    fn lane(&self) -> &Lane {
        &self.lanes[crate::workers::current() % self.lanes.len()]
    }
}

impl Lane {
    /// The most recently idle HTTP/1.1 connection that is still open and ready.
    fn take_idle(&self) -> Option<http1::SendRequest<ClientBody>> {
        let now = Instant::now();
        let mut idle = lock(&self.idle);
        while let Some(Idle { sender, since }) = idle.pop() {
            if sender.is_ready() && now.duration_since(since) < IDLE_TIMEOUT {
                return Some(sender);
            }
        }
        None
    }

    fn park(&self, sender: http1::SendRequest<ClientBody>) {
        let mut idle = lock(&self.idle);
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }
}

impl Shared {
    /// Puts an HTTP/1.1 connection back in the calling worker's lane once its response has
    /// been read.
    fn give_back(self: &Arc<Self>, mut sender: http1::SendRequest<ClientBody>) {
        if sender.is_ready() {
            self.lane().park(sender);
        } else if !sender.is_closed() {
            // Its response body is still coming: back when it has been read.
            let shared = Arc::downgrade(self);
            tokio::spawn(async move {
                if sender.ready().await.is_ok() {
                    // On the same worker: the task runs on its runtime.
                    if let Some(shared) = shared.upgrade() {
                        shared.lane().park(sender);
                    }
                }
            });
        }
    }

    /// Starts, once, the task that closes connections idle for longer than [`IDLE_TIMEOUT`]; it
    /// ends with the pool.
    fn start_reaping(self: &Arc<Self>) {
        if self.reaping.swap(true, Ordering::Relaxed) {
            return;
        }
        let shared: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(IDLE_TIMEOUT / 3);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let now = Instant::now();
                for lane in &shared.lanes {
                    let expired: Vec<Idle> = {
                        let mut idle = lock(&lane.idle);
                        // The oldest first: the stack is in the order they became idle.
                        let fresh = idle
                            .iter()
                            .position(|entry| now.duration_since(entry.since) < IDLE_TIMEOUT)
                            .unwrap_or(idle.len());
                        idle.drain(..fresh).collect()
                    };
                    // Closed outside the lock.
                    drop(expired);
                    lane.http2.reap(IDLE_TIMEOUT, now);
                }
            }
        });
    }
}

/// An HTTP/2 request names its host in `:authority` alone (RFC 9113 section 8.3.1: a `Host`
/// that differs from it is malformed): the client's `Host`, which an HTTP/1.1 upstream is
/// sent as it is, becomes the authority, and no `Host` is sent. (The connection is the
/// pool's, to the upstream's own address, whatever the authority says.)
fn authority_form<B>(request: &mut Request<B>) {
    let Some(host) = request.headers_mut().remove(http::header::HOST) else {
        return;
    };
    let Ok(authority) = uri::Authority::try_from(host.as_bytes()) else {
        return;
    };
    let mut parts = request.uri().clone().into_parts();
    parts.authority = Some(authority);
    if let Ok(uri) = Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
}

/// HTTP/1.1's request line names the path only (the upstream's `Host` is in the headers),
/// except for CONNECT, which names the authority.
fn request_line_form<B>(request: &mut Request<B>) {
    let uri = request.uri();
    let mut parts = uri::Parts::default();
    if request.method() == Method::CONNECT {
        parts.authority = uri.authority().cloned();
    } else {
        parts.path_and_query = Some(
            uri.path_and_query()
                .cloned()
                .unwrap_or_else(|| uri::PathAndQuery::from_static("/")),
        );
    }
    if let Ok(form) = Uri::from_parts(parts) {
        *request.uri_mut() = form;
    }
}

/// The lock, even if a thread panicked while holding it: the data is a list of connections,
/// valid at every step.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("origin", &self.origin)
            .field("protocol", &self.protocol)
            .field(
                "idle",
                &self
                    .shared
                    .lanes
                    .iter()
                    .map(|lane| lock(&lane.idle).len())
                    .sum::<usize>(),
            )
            .finish_non_exhaustive()
    }
}
