//! The admin API, on its own listener (loopback by default): a live dashboard, statistics,
//! rules (read and replace), status, and Prometheus metrics.

use crate::audit::Peer;
use crate::proxy::Proxy;
use crate::reload::Reloader;
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::{json, Value};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

mod caps;
mod gate;
mod router;
mod rules;
mod states;

pub use caps::MAX_CONNECTIONS;
pub use rules::check_rules_body;

/// The dashboard: one page that polls `/api/resources` and `/api/status` every second.
const DASHBOARD: &str = include_str!("dashboard.html");

/// Largest request body the admin API reads.
pub const MAX_BODY: usize = 1 << 20;

/// The admin API's state.
///
/// Its security model: with a token configured, every request needs it (`Authorization:
/// Bearer <token>`) but the dashboard's page itself (which holds no data, and asks for the
/// token) and, if [`with_public_metrics`](Self::with_public_metrics), `GET /metrics`. On a
/// loopback address, a request whose `Host` is not a loopback name (or one of
/// [`with_allowed_hosts`](Self::with_allowed_hosts)) is refused with 403, so that a web page
/// cannot reach the API through DNS rebinding.
#[derive(Debug, Clone)]
pub struct Admin {
    proxy: Proxy,
    /// The dashboard's history and live stream.
    feed: Arc<crate::feed::Feed>,
    reloader: Option<Arc<Reloader>>,
    token: Option<String>,
    metrics_public: bool,
    allowed_hosts: Arc<Vec<String>>,
    /// Whether the listener is on loopback (set by [`run`](Self::run); checked by `Host`).
    loopback: bool,
    /// The breakers' last state changes.
    transitions: Arc<crate::transitions::Transitions>,
    /// The last writes.
    audit: Arc<crate::audit::Audit>,
    /// Held by a `PUT /api/rules` from its checks to its rules in force, and by a reload of
    /// the file (the reloader's): one at a time, so that each reads the file and the rules the
    /// one before left (two at once would each write the file from what it read before the
    /// other wrote, and one's rules would be lost). Taken on a blocking thread (the file's I/O runs
    /// under it), never across an `.await`.
    writing: Arc<std::sync::Mutex<()>>,
    /// One `PUT /api/rules` or `POST /api/reload` at a time goes to a blocking thread; the
    /// others wait here, where a client that leaves takes its request with it (no thread
    /// waits on the lock for it).
    write_turn: Arc<tokio::sync::Semaphore>,
    /// When this API was made (for the uptime).
    started: tokio::time::Instant,
    /// Its connections' limits, and who holds their places.
    limits: AdminLimits,
    gate: Arc<gate::Gate>,
}

/// What the admin API's connections may do (`admin.header_timeout`, `admin.max_pending`,
/// `admin.max_streams`): see [`crate::config::AdminConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminLimits {
    /// Longest a connection may take to send a request head, and stay idle between requests.
    pub header_timeout: std::time::Duration,
    /// Connections that have not shown the token, at most (1 to [`MAX_CONNECTIONS`] - 1).
    pub max_pending: usize,
    /// Live streams (`/api/stream`) at once.
    pub max_streams: usize,
    /// The networks a client's connections are counted by when a flood of connections that
    /// have not shown the token is cut back (its own are closed first): the listener's
    /// `peer_ip` prefixes.
    pub client_networks: spillway_tower::keys::PeerIpPrefixes,
}

impl AdminLimits {
    /// The limits `admin` sets (a client's connections counted by the default networks: see
    /// [`AdminLimits::with_client_networks`]).
    pub fn of(admin: &crate::config::AdminConfig) -> Self {
        Self {
            header_timeout: admin.header_timeout,
            max_pending: admin.max_pending,
            max_streams: admin.max_streams,
            client_networks: spillway_tower::keys::PeerIpPrefixes::default(),
        }
    }

    /// These limits, a client's connections counted by the networks of `prefixes` (the
    /// listener's `peer_ip` prefixes: by default an IPv4 address, an IPv6 /64).
    #[must_use]
    pub fn with_client_networks(mut self, prefixes: spillway_tower::keys::PeerIpPrefixes) -> Self {
        self.client_networks = prefixes;
        self
    }

    fn gate(self) -> Arc<gate::Gate> {
        gate::Gate::new(gate::Caps {
            connections: MAX_CONNECTIONS,
            pending: self.max_pending.clamp(1, MAX_CONNECTIONS - 1),
            streams: self.max_streams.max(1),
            networks: self.client_networks,
        })
    }
}

impl Default for AdminLimits {
    fn default() -> Self {
        Self::of(&crate::config::AdminConfig::default())
    }
}

/// The place of the connection a request came on, in each of its requests' extensions.
#[derive(Debug, Clone)]
pub(crate) struct ConnSeat(pub(crate) Arc<gate::Seat>);

/// Stops a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Longest a write to an admin client may wait for it to read (a live stream's reader that
/// stopped reading is closed after it).
const ADMIN_SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The body of the answer to a newcomer when every admin connection showed the token.
const FULL: &str = r#"{"error": "every admin connection is held by a token holder: retry"}"#;

/// Refused newcomers whose request is being read out before their connection closes.
static DRAINING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Admin {
    /// The admin API of `proxy`; `token`, if set, is required for every request (see
    /// [`Admin`]).
    pub fn new(proxy: Proxy, reloader: Option<Arc<Reloader>>, token: Option<String>) -> Self {
        Self {
            feed: Arc::new(crate::feed::Feed::new(
                crate::config::DEFAULT_WINDOW,
                crate::config::DEFAULT_RESOURCES,
            )),
            transitions: crate::transitions::Transitions::watch(proxy.spillway()),
            audit: Arc::default(),
            writing: reloader
                .as_ref()
                .map_or_else(Arc::default, |reloader| Arc::clone(reloader.writing())),
            write_turn: Arc::new(tokio::sync::Semaphore::new(1)),
            started: tokio::time::Instant::now(),
            proxy,
            reloader,
            token,
            metrics_public: false,
            allowed_hosts: Arc::new(Vec::new()),
            loopback: true,
            limits: AdminLimits::default(),
            gate: AdminLimits::default().gate(),
        }
    }

    /// Sets its connections' limits (by default those of an empty `[admin]` section).
    pub fn with_limits(mut self, limits: AdminLimits) -> Self {
        self.limits = limits;
        self.gate = limits.gate();
        self
    }

    /// Its connections' places (for the live streams' cap).
    pub(crate) fn gate(&self) -> &Arc<gate::Gate> {
        &self.gate
    }

    /// The audit trail of writes.
    pub(crate) fn audit(&self) -> &crate::audit::Audit {
        &self.audit
    }

    /// The dashboard's history and live stream.
    pub(crate) fn feed(&self) -> &crate::feed::Feed {
        &self.feed
    }

    /// Keeps `window` of history per resource (whole seconds; at least one) for at most
    /// `resources` resources (by default 5 minutes for 1,000).
    pub fn with_history(mut self, window: std::time::Duration, resources: usize) -> Self {
        let seconds = usize::try_from(window.as_secs())
            .unwrap_or(usize::MAX)
            .max(1);
        self.feed = Arc::new(crate::feed::Feed::new(seconds, resources));
        self
    }

    /// Serves `GET /metrics` without the token (for a scraper that cannot send one).
    pub fn with_public_metrics(mut self, public: bool) -> Self {
        self.metrics_public = public;
        self
    }

    /// Host names (without port, lower case) accepted in `Host` besides the loopback ones.
    pub fn with_allowed_hosts(mut self, hosts: Vec<String>) -> Self {
        self.allowed_hosts = Arc::new(hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect());
        self
    }

    /// Whether `Host` names this API: on a loopback listener, a loopback name or an allowed
    /// host; elsewhere, any (the token guards it) unless allowed hosts are set.
    fn host_allowed<B>(&self, request: &Request<B>) -> bool {
        if !self.loopback && self.allowed_hosts.is_empty() {
            return true;
        }
        let Some(host) = request
            .headers()
            .get(header::HOST)
            .and_then(|value| value.to_str().ok())
        else {
            return false;
        };
        let host = host.trim().to_ascii_lowercase();
        // Without its port: `name:port`, `[v6]:port`.
        let name = match host.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or(""),
            None => host
                .rsplit_once(':')
                .map_or(host.as_str(), |(name, _)| name),
        };
        let loopback_name = name == "localhost"
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        (self.loopback && loopback_name) || self.allowed_hosts.iter().any(|h| h == name)
    }

    /// Serves on `listener` until `shutdown` completes, holding at most [`MAX_CONNECTIONS`]
    /// connections open, of which at most `max_pending` have not shown the token (see
    /// [`MAX_CONNECTIONS`]). Accept errors do not stop it: it pauses, logs and counts them (as
    /// the proxy's listener does), and goes on accepting once descriptors free up.
    ///
    /// # Errors
    ///
    /// None today; the `Result` is kept for errors a future listener may not recover from.
    pub async fn run(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut this = self;
        this.loopback = listener
            .local_addr()
            .map_or(true, |addr| addr.ip().is_loopback());
        let counts = this.proxy.admin_listener_counts().clone();
        this.gate.count_in(counts.clone());
        counts.set_accepts(this.gate.clone());
        let limits = crate::conn::Limits {
            header_timeout: this.limits.header_timeout,
            max_header_size: crate::config::DEFAULT_MAX_HEADER_SIZE,
            send_timeout: ADMIN_SEND_TIMEOUT,
        };
        let builder = crate::conn::http1_builder(limits);
        // The dashboard's feed, for as long as this API serves.
        let feed = tokio::spawn(this.feed.clone().run(this.proxy.clone()));
        let _feed = AbortOnDrop(feed);
        loop {
            let accept = crate::conn::accept_with_backoff("admin", &counts, || listener.accept());
            let (stream, peer) = tokio::select! {
                accepted = accept => accepted,
                () = &mut shutdown => return Ok(()),
            };
            crate::conn::prepare(&stream, peer);
            let seat = match this.gate.admit(peer.ip()) {
                gate::Admitted::Seat(seat) => Arc::new(seat),
                gate::Admitted::Full => {
                    refuse_full(stream);
                    continue;
                }
            };
            let (admin, counts, builder) = (this.clone(), counts.clone(), builder.clone());
            tokio::spawn(async move {
                let service = TowerToHyperService::new(
                    router::router(admin)
                        .layer(axum::Extension(ConnSeat(Arc::clone(&seat))))
                        .layer(axum::Extension(Peer(peer))),
                );
                let io =
                    crate::send_timed::SendTimed::new(stream, ADMIN_SEND_TIMEOUT, counts.clone());
                let connection = builder.serve_connection(TokioIo::new(io), service);
                tokio::select! {
                    result = connection => crate::conn::ended(&counts, peer, result),
                    () = seat.evicted() => {
                        tracing::debug!(%peer, "admin connection closed to make room: it had not shown the token");
                    }
                }
            });
        }
    }

    /// The metrics, in the format the scraper asks for: OpenMetrics text when `Accept` allows
    /// it (what Prometheus asks for first), else Prometheus text 0.0.4 (the same without the
    /// final `# EOF`).
    fn metrics<B>(&self, request: &Request<B>) -> Response<Full<Bytes>> {
        // The unused rules are counted as the status lists them, at each scrape.
        let unused = self.unused_rules();
        self.proxy
            .metrics()
            .set_unused_rules(crate::kinds::KINDS.iter().map(|kind| {
                let of_kind = unused.iter().filter(|rule| rule["kind"] == kind.name());
                (kind.label(), of_kind.count())
            }));
        let Ok(text) = self.proxy.render_metrics() else {
            return error(StatusCode::INTERNAL_SERVER_ERROR, "cannot render metrics");
        };
        let openmetrics = request
            .headers()
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .any(|accept| accept.contains("application/openmetrics-text"));
        let (text, content_type) = if openmetrics {
            (
                text,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
        } else {
            let text = text
                .strip_suffix("# EOF\n")
                .map_or(text.clone(), str::to_owned);
            (text, "text/plain; version=0.0.4; charset=utf-8")
        };
        let mut response = Response::new(Full::new(Bytes::from(text)));
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        response
    }

    fn resources(&self) -> Value {
        let snapshot = self.proxy.spillway().snapshot();
        let stats = |s: &spillway::stats::NodeStats| {
            json!({
                "pass_qps": s.pass_qps,
                "block_qps": s.block_qps,
                "success_qps": s.success_qps,
                "error_qps": s.error_qps,
                "avg_rt_micros": s.avg_rt_micros,
                "concurrency": s.concurrency,
                "total_pass": s.total_pass,
                "total_block": s.total_block,
                "total_success": s.total_success,
                "total_error": s.total_error,
            })
        };
        let resources: Vec<Value> = snapshot
            .resources
            .iter()
            .map(|r| {
                let origins: serde_json::Map<String, Value> = r
                    .origins
                    .iter()
                    .map(|(origin, s)| (origin.to_string(), stats(s)))
                    .collect();
                json!({ "name": &*r.name, "stats": stats(&r.stats), "origins": origins })
            })
            .collect();
        json!({ "inbound": stats(&snapshot.inbound), "resources": resources })
    }

    /// Whether `request` carries the bearer token (always, when none is configured).
    fn authorized<B>(&self, request: &Request<B>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            // The scheme is case-insensitive (RFC 9110 section 11.1).
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .is_some_and(|(_, given)| constant_time_eq(given.trim().as_bytes(), token.as_bytes()))
    }

    async fn reload(&self, who: &crate::audit::Who) -> Response<Full<Bytes>> {
        const ACTION: &str = "POST /api/reload";
        // Its turn first, as a write's (see `write_turn`), held until the reload ends.
        let turn = Arc::clone(&self.write_turn).acquire_owned().await.ok();
        match &self.reloader {
            Some(reloader) => match reloader.reload_holding(turn).await {
                Ok(()) => {
                    self.audit
                        .record(who, ACTION, "applied", "the file was read again");
                    json_response(StatusCode::OK, &json!({ "reloaded": true }))
                }
                Err(err) => {
                    self.audit.record(who, ACTION, "invalid", &err.to_string());
                    error(StatusCode::UNPROCESSABLE_ENTITY, &err.to_string())
                }
            },
            None => error(
                StatusCode::NOT_FOUND,
                "this server has no configuration file",
            ),
        }
    }
}

/// Compares without stopping at the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn json_response(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json_response(status, &json!({ "error": message }))
}

fn unauthorized() -> Response<Full<Bytes>> {
    let mut response = error(
        StatusCode::UNAUTHORIZED,
        "the admin API needs `Authorization: Bearer <token>` with the admin token",
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Answers a newcomer 503 when every admin connection showed the token, without waiting for
/// its request: one write to a fresh socket (whose buffer is empty), the write side closed, and
/// what the client sends read out for at most a second, so that closing does not reset the
/// connection before the answer is read. At most [`MAX_CONNECTIONS`] such drains at once;
/// past that the connection is closed at once.
fn refuse_full(stream: tokio::net::TcpStream) {
    use std::sync::atomic::Ordering;
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{FULL}",
        FULL.len()
    );
    let _ = stream.try_write(head.as_bytes());
    let draining = DRAINING.fetch_add(1, Ordering::AcqRel);
    if draining >= MAX_CONNECTIONS {
        DRAINING.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = stream;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
        DRAINING.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Binds the admin listener.
///
/// # Errors
///
/// If the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
