//! `spillway serve`: the proxy's listener and connections (HTTP/1.1 and HTTP/2, in cleartext
//! or over TLS), with graceful shutdown.

use crate::config::{Config, MaxConnections};
use crate::conn;
use crate::descriptors::Descriptors;
use crate::proxy::Proxy;
use crate::send_timed::SendTimed;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use spillway_tower::{LimitedListener, LimitedStream};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

/// Loads the rules of `config` into `spillway`, the cluster rules with leases from `cluster`
/// (inside the runtime: a new cluster rule starts a task).
///
/// # Errors
///
/// A rule the spillway refuses (a checked configuration has none).
pub fn apply_rules(
    spillway: &spillway::Spillway,
    cluster: &crate::cluster::ClusterLimits,
    config: &Config,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    spillway.load_flow_rules(config.flow.iter().map(|r| r.get_ref().clone()).collect())?;
    spillway.load_system_rules(config.system.iter().map(|r| r.get_ref().clone()).collect())?;
    spillway.load_breaker_rules(
        config
            .breakers
            .iter()
            .map(|r| r.get_ref().clone())
            .collect(),
    )?;
    // An adaptive rule that stays the same keeps its limiter (its limit and estimates).
    spillway.load_adaptive_rules(
        config
            .adaptive
            .iter()
            .map(|r| r.get_ref().clone())
            .collect(),
    )?;
    spillway.load_cluster_rules(cluster.rules_for(config))?;
    // A per-key rule that stays the same keeps every key's state.
    spillway.load_keyed_rules(crate::keyed::rules(config))?;
    Ok(())
}

/// The cap on the proxy's connections that `setting` gives in this process, and the cap on
/// the process's upstream connections set from what it leaves; a number above what the
/// open-file limit leaves room for is warned of.
fn max_connections(setting: MaxConnections) -> io::Result<usize> {
    let files = Descriptors::now();
    let cap = setting
        .resolve(files)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
    let upstreams = files.room_for_upstreams(cap).unwrap_or(0);
    crate::descriptors::set_upstream_cap(upstreams);
    if let Some(room) = setting.above_room(files) {
        tracing::warn!(
            max_connections = cap,
            room,
            open_file_limit = files.limit,
            "listener.max_connections is above what the open-file limit leaves room for: out \
             of descriptors, requests fail with 502 and the admin API cannot accept"
        );
    }
    Ok(cap)
}

/// A bound proxy, ready to run.
#[derive(Debug)]
pub struct Server {
    listener: LimitedListener,
    proxy: Proxy,
    limits: conn::Limits,
}

impl Server {
    /// Binds the proxy's listener for `config` (already checked) and loads its rules into
    /// `spillway`.
    ///
    /// # Errors
    ///
    /// If the address cannot be bound; with [`std::io::ErrorKind::InvalidInput`], if the
    /// routes or rules are invalid, or if `max_connections = "auto"` and the open-file limit
    /// leaves no room for connections.
    pub async fn bind(config: &Config, spillway: spillway::Spillway) -> io::Result<Self> {
        let proxy = Proxy::new(config, spillway)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
        apply_rules(proxy.spillway(), proxy.cluster_limits(), config)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
        // Cluster rules learn the fleet's state before the first request.
        if let Some(cluster) = &config.cluster {
            let within = cluster.get_ref().startup_wait;
            proxy.cluster_limits().until_started(within).await;
        }
        let cap = max_connections(config.listener.max_connections)?;
        let listener = tokio::net::TcpListener::bind(config.listener.listen).await?;
        let listener = LimitedListener::new(listener, cap).at_capacity(config.listener.at_capacity);
        proxy
            .listener_counts()
            .set_accepts(Arc::new(listener.limit()));
        Ok(Self {
            listener,
            proxy,
            limits: conn::Limits {
                header_timeout: config.listener.header_timeout,
                max_header_size: config.listener.max_header_size,
                send_timeout: config.listener.send_timeout,
            },
        })
    }

    /// The address the proxy listens on.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpListener::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The most connections the proxy holds open at once (0: no cap), as
    /// `listener.max_connections` and the open-file limit set it.
    pub fn max_connections(&self) -> usize {
        self.listener.limit().state().max
    }

    /// The proxy (for reloading its routes).
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// Serves on the calling runtime until `shutdown` completes, then stops accepting and
    /// waits for the requests in flight to finish (graceful shutdown).
    ///
    /// Accept errors (out of file descriptors) do not stop it: it pauses, logs and counts
    /// them, and goes on accepting once it can.
    ///
    /// # Errors
    ///
    /// None today; the `Result` is kept for errors a future listener may not recover from.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        let arrivals = Arrivals::Alone(self.listener);
        serve(arrivals, self.proxy, self.limits, shutdown).await;
        Ok(())
    }

    /// Serves on `workers` threads of its own, each with a single-threaded runtime that
    /// accepts from the listening socket and serves its connections to the end with its own
    /// upstream connections, as nginx's worker processes do; the cap on connections counts
    /// those of all. Until `shutdown` completes, then each stops accepting and drains as
    /// [`run`](Self::run) does. Dropped before that, it stops the workers at once, cutting
    /// the requests in flight.
    ///
    /// # Errors
    ///
    /// A worker thread or its runtime cannot be started (nothing is served then).
    pub async fn run_on_workers(
        self,
        workers: std::num::NonZeroUsize,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        crate::workers::run(workers, self.listener, self.proxy, self.limits, shutdown).await
    }
}

/// Where the connections a runtime serves come from.
#[derive(Debug)]
pub(crate) enum Arrivals {
    /// The listener, all of whose connections are served here.
    Alone(LimitedListener),
    /// A worker's: its share of the connections ([`crate::workers`]).
    Worker(crate::workers::Arrivals),
}

impl From<crate::workers::Arrivals> for Arrivals {
    fn from(arrivals: crate::workers::Arrivals) -> Self {
        Self::Worker(arrivals)
    }
}

impl Arrivals {
    /// The next connection to serve here, and its seat among the workers' loads if it is a
    /// worker's. Cancel-safe.
    async fn next(
        &mut self,
        counts: &conn::ListenerCounts,
    ) -> (LimitedStream, SocketAddr, Option<crate::workers::Seat>) {
        match self {
            Self::Alone(listener) => {
                let (stream, peer) =
                    conn::accept_with_backoff("proxy", counts, || listener.accept()).await;
                (stream, peer, None)
            }
            Self::Worker(arrivals) => {
                let (stream, peer, seat) = arrivals.next(counts).await;
                (stream, peer, Some(seat))
            }
        }
    }
}

/// Serves the connections of `arrivals` on the calling runtime until `shutdown` completes;
/// then closes the listener, so that new connections are refused at once, and waits for the
/// open ones to finish their request in flight.
pub(crate) async fn serve(
    mut arrivals: Arrivals,
    proxy: Proxy,
    limits: conn::Limits,
    shutdown: impl Future<Output = ()>,
) {
    // hyper-util's: each connection is watched; at shutdown, each finishes the request in
    // flight and closes, and `shutdown` completes once all have.
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let counts = proxy.listener_counts().clone();
    let builder = conn::proxy_builder(limits);
    loop {
        let (stream, peer, seat) = tokio::select! {
            arrived = arrivals.next(&counts) => arrived,
            () = &mut shutdown => break,
        };
        conn::prepare(stream.get_ref(), peer);
        let connection = Connection {
            proxy: proxy.clone(),
            builder: builder.clone(),
            watcher: graceful.watcher(),
            peer,
            limits,
            _seat: seat,
        };
        tokio::spawn(connection.serve(stream));
    }
    // New connections are refused at once (once every worker has closed its clone of the
    // socket) while the ones open drain.
    drop(arrivals);
    graceful.shutdown().await;
}

/// One accepted connection, to serve.
struct Connection {
    proxy: Proxy,
    builder: auto::Builder<hyper_util::rt::TokioExecutor>,
    watcher: Watcher,
    peer: SocketAddr,
    limits: conn::Limits,
    /// Its place in its worker's load, until it closes.
    _seat: Option<crate::workers::Seat>,
}

impl Connection {
    /// The TLS handshake if the listener has TLS, then HTTP/1.1 or HTTP/2 (by ALPN, or by the
    /// client's first bytes in cleartext) until the connection closes. The handshake and the
    /// client's first bytes must come within the header timeout, or the connection is closed
    /// (and counted as a header timeout).
    async fn serve(self, stream: LimitedStream) {
        let counts = self.proxy.listener_counts().clone();
        let peer = self.peer;
        let opened = tokio::time::timeout(self.limits.header_timeout, async {
            // In cleartext, wait for the first bytes here: HTTP/2 is told from HTTP/1.1 by
            // them, and a client that sends none must not hold the connection.
            let mut first = [0u8; 1];
            stream.get_ref().peek(&mut first).await?;
            match self.proxy.tls() {
                Some(tls) => tls
                    .acceptor()
                    .accept(stream)
                    .await
                    .map(|tls| Io::Tls(Box::new(tls))),
                None => Ok(Io::Plain(stream)),
            }
        })
        .await;
        // Every write to the client may wait at most the send timeout for it to read.
        let send_timeout = self.limits.send_timeout;
        match opened {
            Ok(Ok(Io::Plain(stream))) => {
                let io = SendTimed::new(stream, send_timeout, counts.clone());
                self.http(TokioIo::new(io)).await;
            }
            Ok(Ok(Io::Tls(stream))) => {
                let io = SendTimed::new(*stream, send_timeout, counts.clone());
                self.http(TokioIo::new(io)).await;
            }
            Ok(Err(err)) => {
                tracing::debug!(%peer, error = %err, "connection failed before its first request");
            }
            Err(_elapsed) => {
                conn::count_header_timeout(&counts);
                tracing::debug!(%peer, "closed: nothing sent in time");
            }
        }
    }

    /// Serves requests until the connection closes, or until no request has been in flight
    /// for the header timeout (HTTP/1.1 closes itself then, with its head deadline; HTTP/2
    /// has none, and a client that answers pings would hold its connection for ever).
    async fn http<I>(self, io: TokioIo<I>)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (proxy, peer) = (self.proxy, self.peer);
        let counts = proxy.listener_counts().clone();
        let activity = crate::idle::Activity::default();
        let requests = activity.clone();
        let client = Arc::new(crate::proxy::Peer::new(peer));
        let send_timeout = self.limits.send_timeout;
        let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
            let (proxy, busy, client) = (proxy.clone(), requests.busy(), Arc::clone(&client));
            // An HTTP/2 stream the client grants no window never fills the socket: its
            // response is sent within the send timeout by a task of its own.
            let h2 = request.version() == http::Version::HTTP_2;
            async move {
                let response = proxy.handle(request, &client).await;
                let counts = proxy.listener_counts().clone();
                Ok::<_, Infallible>(response.map(|body| {
                    let body = body.busy_until_sent(busy);
                    if h2 {
                        body.watched(send_timeout, move || counts.count_send_timeout())
                    } else {
                        body
                    }
                }))
            }
        });
        let connection = self
            .builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        tokio::select! {
            ended = self.watcher.watch(connection) => conn::ended(&counts, peer, ended),
            () = activity.idle_for(self.limits.header_timeout) => {
                // Dropping the connection closes it; no request is in flight on it.
                conn::count_header_timeout(&counts);
                tracing::debug!(%peer, "closed: idle");
            }
        }
    }
}

/// A client connection, in cleartext or over TLS.
enum Io {
    Plain(LimitedStream),
    Tls(Box<tokio_rustls::server::TlsStream<LimitedStream>>),
}
