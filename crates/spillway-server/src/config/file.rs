//! The shape of `spillway.toml`.

use serde::{Deserialize, Serialize};
use spillway::adaptive::AdaptiveRule;
use spillway::breaker::BreakerRule;
use spillway::flow::FlowRule;
use spillway::system::SystemRule;
use spillway_tower::AtCapacity;
use std::net::SocketAddr;
use std::time::Duration;
use toml::Spanned;

use super::access_log::AccessLogConfig;
use super::claims::{CriticalityConfig, DeadlineConfig, TenantConfig};
use super::cluster::{ClusterConfig, ClusterRuleConfig};
use super::keyed::KeyedConfig;

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn default_admin_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9090))
}

fn default_upstream_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_header_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_body_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_finish_when_client_leaves() -> bool {
    true
}

fn default_send_timeout() -> Duration {
    Duration::from_secs(60)
}

fn default_tunnel_idle_timeout() -> Duration {
    Duration::from_secs(300)
}

fn default_max_header_size() -> usize {
    DEFAULT_MAX_HEADER_SIZE
}

/// `listener.max_header_size` by default: 64 KiB (Envoy's 60 KiB, rounded up).
pub const DEFAULT_MAX_HEADER_SIZE: usize = 64 * 1024;
/// The smallest `listener.max_header_size` (hyper reads a head into a buffer of at least this).
pub const MIN_MAX_HEADER_SIZE: usize = 8 * 1024;
/// The largest `listener.max_header_size`.
pub const MAX_MAX_HEADER_SIZE: usize = 1024 * 1024;

fn default_drain_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_actives_timeout() -> Duration {
    Duration::from_secs(1)
}

fn default_tps_interval() -> Duration {
    spillway::dubbo::DEFAULT_TPS_INTERVAL
}

fn default_resource() -> String {
    "unmatched".to_owned()
}

/// The whole file.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The proxy's listener.
    #[serde(default)]
    pub listener: ListenerConfig,
    /// The admin API's listener.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Where requests go, by name.
    #[serde(default, rename = "upstream")]
    pub upstreams: Vec<Spanned<Upstream>>,
    /// Requests to resources and upstreams, first match wins.
    #[serde(default, rename = "route")]
    pub routes: Vec<Spanned<Route>>,
    /// Where requests no route matches go.
    pub default: Option<Spanned<DefaultRoute>>,
    /// What a blocked request gets, instead of the default 429.
    #[serde(default)]
    pub blocked: Option<Spanned<BlockedResponse>>,
    /// Flow rules (spillway's `FlowRule`).
    #[serde(default)]
    pub flow: Vec<Spanned<FlowRule>>,
    /// System rules.
    #[serde(default)]
    pub system: Vec<Spanned<SystemRule>>,
    /// Circuit breaker rules.
    #[serde(default, rename = "breaker")]
    pub breakers: Vec<Spanned<BreakerRule>>,
    /// Adaptive concurrency rules (spillway's `AdaptiveRule`): on one route's resource, or on
    /// all inbound traffic.
    #[serde(default)]
    pub adaptive: Vec<Spanned<AdaptiveRule>>,
    /// The Redis that cluster rules share.
    #[serde(default)]
    pub cluster: Option<Spanned<ClusterConfig>>,
    /// Cluster rules: limits shared by every instance that has the same rule id.
    #[serde(default, rename = "cluster_rule")]
    pub cluster_rules: Vec<Spanned<ClusterRuleConfig>>,
    /// Per-key rules: a limit per client IP, user, tenant... of a resource.
    #[serde(default)]
    pub keyed: Vec<Spanned<KeyedConfig>>,
    /// How critical each request is, for adaptive limits' queues.
    #[serde(default)]
    pub criticality: Option<Spanned<CriticalityConfig>>,
    /// Whose each request is, for adaptive limits' queues.
    #[serde(default)]
    pub tenant: Option<Spanned<TenantConfig>>,
    /// How long each request has left: adaptive limits' queues refuse one that cannot be
    /// served in time, and the proxy tells the upstream what is left.
    #[serde(default)]
    pub deadline: Option<Spanned<DeadlineConfig>>,
    /// spillway's own access log (unset: none).
    #[serde(default)]
    pub access_log: Option<Spanned<AccessLogConfig>>,
    /// How the process logs.
    #[serde(default)]
    pub log: super::LogConfig,
}

/// The proxy's listener.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// Address to listen on (default 127.0.0.1:8080).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Most connections open at once (Dubbo's `accepts`): a number, 0 for no cap, or `auto`
    /// (the default), what the open-file limit leaves room for.
    #[serde(default)]
    pub max_connections: super::MaxConnections,
    /// Most connections one client (an address, or a network of the `peer_ip` prefixes)
    /// holds open at once: a number, 0 for no cap, or `auto` (the default), half of
    /// `max_connections`, none below 32.
    #[serde(default)]
    pub max_connections_per_client: super::MaxPerClient,
    /// At the cap: `pause` accepting (default) or `close` new connections.
    #[serde(default, with = "at_capacity")]
    pub at_capacity: AtCapacity,
    /// Longest an upstream may take to answer before the proxy returns 504.
    #[serde(default = "default_upstream_timeout", with = "humantime_serde")]
    pub upstream_timeout: Duration,
    /// Longest a connection may take to send a whole request head, counted from its opening
    /// and, on a kept-alive connection, from the end of the previous response (so it is also
    /// the keep-alive idle timeout); past it the connection is closed.
    #[serde(default = "default_header_timeout", with = "humantime_serde")]
    pub header_timeout: Duration,
    /// Longest the proxy waits for the next bytes of a request body it is forwarding; past it
    /// the request gets 408 and the upstream request is abandoned.
    #[serde(default = "default_body_timeout", with = "humantime_serde")]
    pub body_timeout: Duration,
    /// Longest a write to a client may wait for the client to read (nginx's `send_timeout`):
    /// past it the connection is closed, and the upstream response it was reading with it.
    #[serde(default = "default_send_timeout", with = "humantime_serde")]
    pub send_timeout: Duration,
    /// Longest an upgraded connection (a WebSocket tunnel) may carry no byte either way: past
    /// it the tunnel is closed, and its places given back (nginx's `proxy_read_timeout` does
    /// as much), so that idle tunnels cannot hold the connection cap for ever.
    #[serde(default = "default_tunnel_idle_timeout", with = "humantime_serde")]
    pub tunnel_idle_timeout: Duration,
    /// The most bytes of a request head (request line and headers, HTTP/1.1; the decoded
    /// header list, HTTP/2): past it, 431. Default 64 KiB; 8 KiB to 1 MiB.
    #[serde(default = "default_max_header_size")]
    pub max_header_size: usize,
    /// The most bytes of a request body, chunked or not: one announced larger gets 413 before
    /// it is forwarded, and one that runs past it is cut and answered 413. 0 (the default): no
    /// cap.
    #[serde(default)]
    pub max_body_size: u64,
    /// When a client leaves (gives up, closes its connection, resets its stream) while its
    /// request is forwarded: `true` (the default), the request runs on to the upstream's
    /// response head (within `upstream_timeout`), holding its places and its entry, so that
    /// the limits count the work the upstream still does for it; `false`, the upstream request
    /// is cancelled at once and its places given back (Envoy's and nginx's way), which suits
    /// an upstream that stops working on a request when its connection closes.
    #[serde(default = "default_finish_when_client_leaves")]
    pub finish_when_client_leaves: bool,
    /// On SIGTERM or SIGINT, how long requests in flight get to end before the process exits
    /// anyway (the listeners close at once).
    #[serde(default = "default_drain_timeout", with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// A request header that names the caller (the origin of `limit_app` rules), if any.
    #[serde(default)]
    pub origin_header: Option<String>,
    /// Shadow mode: a request a rule would block is counted (`outcome="shadow_block"`) and
    /// logged, and forwarded anyway. For trying rules on live traffic.
    #[serde(default)]
    pub shadow: bool,
    /// Threads that serve the proxy's connections, each with a single-threaded runtime that
    /// accepts from the listening socket (as nginx's `worker_processes`): a number from 1 to
    /// [`MAX_WORKERS`], or `auto` (the default): one for each CPU the process may use.
    #[serde(default)]
    pub workers: Workers,
    /// Terminate TLS (HTTP/1.1 and HTTP/2, chosen by ALPN) with this certificate and key;
    /// unset: cleartext (HTTP/1.1, and HTTP/2 with prior knowledge).
    #[serde(default)]
    pub tls: Option<TlsFiles>,
    /// Proxies in front of this one (addresses or CIDR blocks) whose `forwarded_header` names
    /// the client, for per-key rules keyed by `peer_ip`; empty (the default): the peer's own
    /// address is the client's.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// The one header the trusted proxies name the client in: `x-forwarded-for` (the
    /// default) or `forwarded` (RFC 7239). The other is never read, whatever a client puts in
    /// it.
    #[serde(default, with = "forwarded_header")]
    pub forwarded_header: spillway_tower::keys::ForwardedHeader,
    /// The prefix length that makes an IPv4 client's address its `peer_ip` key: 32 (the
    /// default) keys each address; 24, each /24 network.
    #[serde(default = "default_peer_ip_prefix_v4")]
    pub peer_ip_prefix_v4: u8,
    /// The prefix length that makes an IPv6 client's address its `peer_ip` key: 64 (the
    /// default) keys each /64, the block one subscriber, host or device is given, so that a
    /// client picking a new address of its /64 for each request is one key; 128 keys each
    /// address.
    #[serde(default = "default_peer_ip_prefix_v6")]
    pub peer_ip_prefix_v6: u8,
}

impl ListenerConfig {
    /// The prefix lengths `peer_ip` keys clients by.
    ///
    /// # Errors
    ///
    /// A length out of range, named.
    pub fn peer_ip_prefixes(&self) -> Result<spillway_tower::keys::PeerIpPrefixes, String> {
        spillway_tower::keys::PeerIpPrefixes::new(self.peer_ip_prefix_v4, self.peer_ip_prefix_v6)
    }
}

fn default_peer_ip_prefix_v4() -> u8 {
    spillway_tower::keys::PeerIpPrefixes::default().v4()
}

fn default_peer_ip_prefix_v6() -> u8 {
    spillway_tower::keys::PeerIpPrefixes::default().v6()
}

/// A certificate chain and its private key, PEM files (paths relative to the working
/// directory). Read at start and again at every reload.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: std::path::PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: std::path::PathBuf,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            max_connections: super::MaxConnections::Auto,
            max_connections_per_client: super::MaxPerClient::Auto,
            at_capacity: AtCapacity::Pause,
            upstream_timeout: default_upstream_timeout(),
            header_timeout: default_header_timeout(),
            body_timeout: default_body_timeout(),
            send_timeout: default_send_timeout(),
            tunnel_idle_timeout: default_tunnel_idle_timeout(),
            max_header_size: default_max_header_size(),
            max_body_size: 0,
            finish_when_client_leaves: default_finish_when_client_leaves(),
            drain_timeout: default_drain_timeout(),
            origin_header: None,
            shadow: false,
            workers: Workers::Auto,
            tls: None,
            trusted_proxies: Vec::new(),
            forwarded_header: spillway_tower::keys::ForwardedHeader::default(),
            peer_ip_prefix_v4: default_peer_ip_prefix_v4(),
            peer_ip_prefix_v6: default_peer_ip_prefix_v6(),
        }
    }
}

/// The most worker threads `listener.workers` may ask for.
pub const MAX_WORKERS: u64 = 1024;

/// How many threads serve the proxy's connections (`listener.workers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Workers {
    /// One for each CPU the process may use (its affinity and cgroup quota count).
    #[default]
    Auto,
    /// This many (1 to [`MAX_WORKERS`] in a checked file).
    Count(u64),
}

impl Workers {
    /// The number of threads: for `Auto`, what [`std::thread::available_parallelism`] says
    /// (1 if it cannot tell).
    pub fn resolve(self) -> std::num::NonZeroUsize {
        match self {
            Self::Auto => {
                std::thread::available_parallelism().unwrap_or(std::num::NonZeroUsize::MIN)
            }
            Self::Count(count) => usize::try_from(count.clamp(1, MAX_WORKERS))
                .ok()
                .and_then(std::num::NonZeroUsize::new)
                .unwrap_or(std::num::NonZeroUsize::MIN),
        }
    }
}

super::auto_or_count::serde_auto_or_count!(
    Workers,
    1..=MAX_WORKERS,
    format!("a number of threads from 1 to {MAX_WORKERS}, or \"auto\"")
);

mod forwarded_header {
    use serde::{Deserialize, Deserializer, Serializer};
    use spillway_tower::keys::ForwardedHeader;

    pub(super) fn serialize<S: Serializer>(
        value: &ForwardedHeader,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_str(value.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<ForwardedHeader, D::Error> {
        ForwardedHeader::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

mod at_capacity {
    use serde::{Deserialize, Deserializer, Serializer};
    use spillway_tower::AtCapacity;

    pub(super) fn serialize<S: Serializer>(value: &AtCapacity, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match value {
            AtCapacity::Pause => "pause",
            _ => "close",
        })
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<AtCapacity, D::Error> {
        match String::deserialize(d)?.as_str() {
            "pause" => Ok(AtCapacity::Pause),
            "close" => Ok(AtCapacity::Close),
            other => Err(serde::de::Error::custom(format!(
                "unknown value `{other}`, expected `pause` or `close`"
            ))),
        }
    }
}

/// The admin API's listener.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Address to listen on (default 127.0.0.1:9090, loopback only).
    #[serde(default = "default_admin_listen")]
    pub listen: SocketAddr,
    /// Bearer token required for every admin request (but the dashboard's page and, if
    /// `metrics_public`, `/metrics`); required when `listen` is not loopback. `SPILLWAY_ADMIN_TOKEN` in the environment overrides it.
    #[serde(default)]
    pub token: Option<String>,
    /// Serve `GET /metrics` without the token (for a scraper that cannot send one).
    #[serde(default)]
    pub metrics_public: bool,
    /// Host names accepted in `Host` besides the loopback ones (on a loopback listener, any
    /// other is refused with 403, against DNS rebinding; elsewhere, when set, only these).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// How much history the dashboard keeps per resource, one sample a second (default 5 min;
    /// whole seconds, 10 s to 1 h).
    #[serde(default = "default_history", with = "humantime_serde")]
    pub history: Duration,
    /// The most resources with a history (default 1,000; 1 to 100,000): past it, the busiest
    /// take the quietest ones' places.
    #[serde(default = "default_history_resources")]
    pub history_resources: usize,
    /// Longest an admin connection may take to send a request head, and stay idle between
    /// requests (default 5 s): a silent connection does not hold a place for long.
    #[serde(default = "default_admin_header_timeout", with = "humantime_serde")]
    pub header_timeout: Duration,
    /// The most admin connections open at once that have not yet shown the token (with no
    /// token: not yet made a request), default 16, 1 to 63: past it, or past the cap of 64
    /// admin connections, a newcomer takes the oldest such connection's place, so that silent
    /// or unauthenticated connections can never take the operator's. Only when all 64 have
    /// shown the token is a newcomer refused, with 503 at once.
    #[serde(default = "default_admin_max_pending")]
    pub max_pending: usize,
    /// The most live streams (`/api/stream`, the dashboard's) at once (default 8; 1 to
    /// 1,000): past it, a new one is answered 503.
    #[serde(default = "default_admin_max_streams")]
    pub max_streams: usize,
}

fn default_admin_header_timeout() -> Duration {
    Duration::from_secs(5)
}

/// Seconds of history kept per resource by default (5 minutes).
pub const DEFAULT_WINDOW: usize = 300;
/// Resources with a history by default.
pub const DEFAULT_RESOURCES: usize = 1_000;

fn default_admin_max_pending() -> usize {
    16
}

fn default_admin_max_streams() -> usize {
    8
}

fn default_history() -> Duration {
    Duration::from_secs(DEFAULT_WINDOW as u64)
}

fn default_history_resources() -> usize {
    DEFAULT_RESOURCES
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: default_admin_listen(),
            token: None,
            metrics_public: false,
            allowed_hosts: Vec::new(),
            history: default_history(),
            history_resources: default_history_resources(),
            header_timeout: default_admin_header_timeout(),
            max_pending: default_admin_max_pending(),
            max_streams: default_admin_max_streams(),
        }
    }
}

/// An upstream: a name, a base URL (`http://host:port` or `https://host:port`) and the HTTP
/// version to speak to it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// The name routes use.
    pub name: String,
    /// `http://host:port` or `https://host:port`, optionally with a path prefix.
    pub url: String,
    /// Which HTTP version to speak: `auto` (the default: HTTP/1.1 in cleartext, the one ALPN
    /// picks over TLS), `http1`, or `http2` (in cleartext with prior knowledge, as gRPC
    /// servers expect).
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// For `https://`: a PEM file of the certificate authorities to trust instead of the
    /// bundled public ones (Mozilla's, from `webpki-roots`).
    #[serde(default)]
    pub ca: Option<std::path::PathBuf>,
}

/// The HTTP version the proxy speaks to an upstream.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    /// HTTP/1.1 in cleartext; over TLS, HTTP/2 or HTTP/1.1 as ALPN agrees.
    #[default]
    Auto,
    /// HTTP/1.1 only.
    Http1,
    /// HTTP/2 only: with prior knowledge in cleartext (h2c), by ALPN over TLS.
    Http2,
}

/// A route: which requests, which resource, which upstream, and per-route Dubbo limits.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// The resource its requests enter (rules name it).
    pub resource: String,
    /// Methods it matches (empty: any).
    #[serde(default)]
    pub methods: Vec<String>,
    /// A path prefix (`/api`: `/api` and `/api/...`) or a template with `{name}` segments and
    /// an optional final `{*rest}` (`/users/{id}`).
    pub path: String,
    /// Whether `path` matches only in its own case (the default, as most servers route); `false`
    /// for an upstream that routes paths in any case (IIS, ASP.NET, a case-insensitive file
    /// system): `/API/Orders` then takes this route, and its limits, as `/api/orders` does,
    /// and keys read from its path segments are read in lower case.
    #[serde(default = "default_case_sensitive")]
    pub case_sensitive: bool,
    /// The upstream it goes to.
    pub upstream: String,
    /// Dubbo's TPS limit for the route.
    #[serde(default)]
    pub tps: Option<TpsLimit>,
    /// Dubbo's `executes`: most requests in flight, refusing at once.
    #[serde(default)]
    pub executes: Option<u32>,
    /// Dubbo's `actives`: most requests in flight, waiting up to a timeout for a place.
    #[serde(default)]
    pub actives: Option<ActivesLimit>,
    /// The criticality of its requests that a `[criticality]` header or rule does not set.
    #[serde(default)]
    pub criticality: Option<spillway::Criticality>,
    /// The deadline of its requests that give none (`grpc-timeout`, `[deadline] header`).
    #[serde(default, with = "humantime_serde")]
    pub deadline: Option<Duration>,
}

fn default_case_sensitive() -> bool {
    true
}

/// Where requests no route matches go.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DefaultRoute {
    /// The resource (default `unmatched`).
    #[serde(default = "default_resource")]
    pub resource: String,
    /// The upstream; unset: unmatched requests get 404.
    #[serde(default)]
    pub upstream: Option<String>,
}

/// The response of a blocked request, when the default (429 with `Retry-After` and the
/// `RateLimit` fields, the block's explanation as the body) is not wanted.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BlockedResponse {
    /// The status (400 to 599; default 429).
    #[serde(default = "default_blocked_status")]
    pub status: u16,
    /// The body (default: the block's explanation).
    #[serde(default)]
    pub body: Option<String>,
    /// The body's content type (default `text/plain; charset=utf-8`).
    #[serde(default)]
    pub content_type: Option<String>,
    /// Which rate-limit fields a refusal carries besides `Retry-After` (default `ietf`).
    #[serde(default)]
    pub ratelimit_fields: RateLimitFieldsConfig,
    /// Whether admitted responses carry the same fields too, with what is left of each quota
    /// the request met (default false).
    #[serde(default)]
    pub ratelimit_on_admitted: bool,
}

/// `[blocked] ratelimit_fields`: the IETF fields, the older `X-RateLimit-*` ones, both, or none.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitFieldsConfig {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10).
    #[default]
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`.
    Legacy,
    /// Both sets.
    Both,
    /// Only `Retry-After`.
    None,
}

impl From<RateLimitFieldsConfig> for spillway_tower::RateLimitFields {
    fn from(fields: RateLimitFieldsConfig) -> Self {
        match fields {
            RateLimitFieldsConfig::Ietf => Self::Ietf,
            RateLimitFieldsConfig::Legacy => Self::Legacy,
            RateLimitFieldsConfig::Both => Self::Both,
            RateLimitFieldsConfig::None => Self::None,
        }
    }
}

fn default_blocked_status() -> u16 {
    429
}

/// Dubbo's TPS limit: `rate` requests per `interval`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TpsLimit {
    /// Requests per interval.
    pub rate: u32,
    /// The window (default 60 s, Dubbo's).
    #[serde(default = "default_tps_interval", with = "humantime_serde")]
    pub interval: Duration,
}

/// Dubbo's `actives`: at most `max` in flight; others wait up to `timeout`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ActivesLimit {
    /// Most requests in flight.
    pub max: u32,
    /// Longest a request waits for a place (default 1 s).
    #[serde(default = "default_actives_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}
