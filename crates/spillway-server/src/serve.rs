//! Serving a runtime's connections: where they come from (the listener, or a worker's share),
//! each one's TLS handshake and HTTP, and the drain at shutdown.

use crate::conn;
use crate::per_client::ClientSeat;
use crate::proxy::Proxy;
use crate::send_timed::SendTimed;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use spillway_tower::{LimitedListener, LimitedStream};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

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

/// A connection to serve: its stream, its peer, its seat among the workers' loads if it is a
/// worker's, and its place under its client's cap.
type Arrived = (
    LimitedStream,
    SocketAddr,
    Option<crate::workers::Seat>,
    ClientSeat,
);

impl Arrivals {
    /// The next connection to serve here, each accepted one first given a place under its
    /// client's cap (see [`client_place`]): one whose client holds its cap is closed where it
    /// was accepted, never handed to another worker. Cancel-safe.
    async fn next(&mut self, proxy: &Proxy, counts: &conn::ListenerCounts) -> Arrived {
        let place = |peer: SocketAddr| client_place(proxy, counts, peer);
        match self {
            Self::Alone(listener) => loop {
                let (stream, peer) =
                    conn::accept_with_backoff("proxy", counts, || listener.accept()).await;
                if let Some(client) = place(peer) {
                    return (stream, peer, None, client);
                }
            },
            Self::Worker(arrivals) => {
                let (stream, peer, seat, client) = arrivals.next(counts, &place).await;
                (stream, peer, Some(seat), client)
            }
        }
    }
}

/// A place for a connection from `peer` under its client's cap; `None` if its client holds
/// its cap, and the connection is to be closed at once (counted). A trusted proxy (a load
/// balancer in front) speaks for many clients, and has no cap.
fn client_place(
    proxy: &Proxy,
    counts: &conn::ListenerCounts,
    peer: SocketAddr,
) -> Option<ClientSeat> {
    if proxy.trusts_peer(peer.ip()) {
        return Some(ClientSeat::none());
    }
    let place = counts.admit_client(peer.ip());
    if place.is_none() {
        tracing::debug!(%peer, "closed: the client holds its cap of connections");
    }
    place
}

/// Serves the connections of `arrivals` on the calling runtime until `shutdown` completes;
/// then closes the listener, so that new connections are refused at once, and waits for the
/// open ones to finish their request in flight, and for the requests that run on after their
/// client left (`listener.finish_when_client_leaves`) to end.
pub(crate) async fn serve(
    mut arrivals: Arrivals,
    proxy: Proxy,
    limits: conn::Limits,
    shutdown: impl Future<Output = ()>,
) {
    // Set at shutdown: each connection then finishes the requests in flight and closes.
    let (stopping, stop) = tokio::sync::watch::channel(false);
    // Each connection's peer holds a receiver of it, as long as the connection, its requests
    // or those that run on after it left live: closed once none does. (hyper runs an HTTP/2
    // stream in a task of its own, which may outlive its connection's.)
    let draining = tokio::sync::watch::Sender::new(());
    let mut shutdown = std::pin::pin!(shutdown);
    let counts = proxy.listener_counts().clone();
    let builder = conn::proxy_builder(limits);
    loop {
        let (stream, peer, seat, client) = tokio::select! {
            arrived = arrivals.next(&proxy, &counts) => arrived,
            () = &mut shutdown => break,
        };
        conn::prepare(stream.get_ref(), peer);
        let connection = Connection {
            proxy: proxy.clone(),
            builder: builder.clone(),
            stop: stop.clone(),
            draining: draining.subscribe(),
            peer,
            limits,
            _seat: seat,
            client,
        };
        tokio::spawn(connection.serve(stream));
    }
    // New connections are refused at once (once every worker has closed its clone of the
    // socket) while the ones open drain.
    drop(arrivals);
    stopping.send_replace(true);
    draining.closed().await;
}

/// One accepted connection, to serve.
struct Connection {
    proxy: Proxy,
    builder: auto::Builder<hyper_util::rt::TokioExecutor>,
    /// Set at shutdown.
    stop: tokio::sync::watch::Receiver<bool>,
    /// What the drain waits on for its peer (see `serve`).
    draining: tokio::sync::watch::Receiver<()>,
    peer: SocketAddr,
    limits: conn::Limits,
    /// Its place in its worker's load, until it closes.
    _seat: Option<crate::workers::Seat>,
    /// Its place under its client's cap, held by its peer from its first byte until the
    /// last of the connection and its requests ends.
    client: ClientSeat,
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
    /// has none, and a client that answers pings would hold its connection for ever). At
    /// shutdown, or when too many of its requests run on after their client left (an HTTP/2
    /// client resetting stream after stream), it takes no new request (HTTP/2's GOAWAY) and
    /// closes once those in flight have ended.
    async fn http<I>(self, io: TokioIo<I>)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (proxy, peer) = (self.proxy, self.peer);
        let counts = proxy.listener_counts().clone();
        let activity = crate::idle::Activity::default();
        let requests = activity.clone();
        let client = crate::proxy::Peer::new(peer).drained_by(self.draining);
        let client = Arc::new(client.seated(self.client));
        let send_timeout = self.limits.send_timeout;
        let served = Arc::clone(&client);
        let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
            let (proxy, busy, client) = (proxy.clone(), requests.busy(), Arc::clone(&served));
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
        let mut connection = std::pin::pin!(connection);
        let idle = activity.idle_for(self.limits.header_timeout);
        let mut idle = std::pin::pin!(idle);
        let mut stop = self.stop;
        let mut going_away = false;
        // Asked to go away by its peer's run-ons: closed after the header timeout, whether or
        // not its client heeds the GOAWAY (one that never answers its PING would keep it).
        let mut cut_at: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        loop {
            tokio::select! {
                ended = connection.as_mut() => {
                    conn::ended(&counts, peer, ended);
                    return;
                }
                () = &mut idle => {
                    // Dropping the connection closes it; no request is in flight on it.
                    conn::count_header_timeout(&counts);
                    tracing::debug!(%peer, "closed: idle");
                    return;
                }
                _ = stop.wait_for(|stopping| *stopping), if !going_away => {
                    connection.as_mut().graceful_shutdown();
                    going_away = true;
                }
                () = client.gone_away(), if !going_away => {
                    tracing::debug!(%peer, "asked to go away: too many requests left running on");
                    counts.count_go_away();
                    connection.as_mut().graceful_shutdown();
                    going_away = true;
                    cut_at = Some(Box::pin(tokio::time::sleep(self.limits.header_timeout)));
                }
                () = async { cut_at.as_mut().expect("armed").await }, if cut_at.is_some() => {
                    // Dropping the connection closes it; its requests in flight run on.
                    tracing::debug!(%peer, "closed: still open after it was asked to go away");
                    return;
                }
            }
        }
    }
}

/// A client connection, in cleartext or over TLS.
enum Io {
    Plain(LimitedStream),
    Tls(Box<tokio_rustls::server::TlsStream<LimitedStream>>),
}
