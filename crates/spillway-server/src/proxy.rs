//! The reverse proxy: route a request, put it through its route's Dubbo limits and spillway's
//! rules, forward it to its upstream, and hold its places until the response body ends.

mod body;
mod client;
mod client_body;
mod enter;
mod forward;
mod keyed;
mod path;
mod pool;
mod refusal;
mod table;

pub use body::ProxyBody;
use client_body::ClientFault;
pub use forward::Peer;
pub(crate) use keyed::StagedKeyed;
use path::{bad_host, normalize_uri};
pub use path::{normalize_path, PathError};
use refusal::{blocked, metrics_missing_key};
pub(crate) use table::Table;

use crate::config::Config;
use crate::conn::ListenerCounts;
use crate::metrics::Metrics;
use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use spillway::dubbo::{ActiveLimiter, ExecuteLimiter, TpsLimiter};
use spillway::BlockKind;
use std::sync::Arc;
use std::time::Duration;

/// What a configuration needs from files (its upstreams' CA files, the listener's certificate
/// and key), read and checked, ready for [`Proxy::install`]: a reload prepares this first, so
/// that a bad file changes nothing.
#[derive(Debug)]
pub struct Prepared {
    table: Table,
    cert: Option<Arc<rustls::sign::CertifiedKey>>,
}

impl Prepared {
    /// Reads what `config` (already checked) names in files.
    ///
    /// # Errors
    ///
    /// A file that cannot be read or is not what it should be; the message names it.
    pub fn new(config: &Config) -> Result<Self, String> {
        let cert = match &config.listener.tls {
            Some(files) => Some(crate::tls::certified_key(files)?),
            None => None,
        };
        Ok(Self {
            table: Table::new(config)?,
            cert,
        })
    }
}

/// The proxy: spillway, the Dubbo limiters, the routing table with its upstreams' clients,
/// and the listener's TLS. Cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    spillway: spillway::Spillway,
    metrics: Metrics,
    origin_header: Option<http::HeaderName>,
    table: ArcSwap<Table>,
    tps: TpsLimiter,
    executes: ExecuteLimiter,
    actives: ActiveLimiter,
    /// The listener's TLS, if it terminates TLS.
    tls: Option<crate::tls::ServerTls>,
    /// The proxy's and the admin API's listeners' counts (accept errors, timeouts).
    counts: ListenerCounts,
    admin_counts: ListenerCounts,
    /// Shadow mode's log lines, one a second at most.
    shadow_log: crate::log_sampled::Sampled,
    /// Requests refused for want of an upstream connection, logged one line a second at most.
    descriptors_log: crate::log_sampled::Sampled,
    /// The configuration file's reloads (kept by the reloader, read by the metrics).
    config_state: Arc<std::sync::Mutex<crate::config_state::ConfigState>>,
    /// The cluster rules' leases and strict checks, with their tasks.
    cluster: Arc<crate::cluster::ClusterLimits>,
}

impl Proxy {
    /// A proxy for `config` (already checked), with `spillway` holding its rules.
    ///
    /// # Errors
    ///
    /// As [`Prepared::new`].
    pub fn new(config: &Config, spillway: spillway::Spillway) -> Result<Self, String> {
        let prepared = Prepared::new(config)?;
        let tls = match prepared.cert {
            Some(cert) => Some(crate::tls::ServerTls::new(cert)?),
            None => None,
        };
        let (counts, admin_counts) = (ListenerCounts::default(), ListenerCounts::default());
        let config_state = Arc::default();
        let cluster = Arc::new(crate::cluster::ClusterLimits::default());
        Ok(Self {
            inner: Arc::new(Inner {
                metrics: Metrics::new(
                    spillway.clone(),
                    counts.clone(),
                    admin_counts.clone(),
                    Arc::clone(&config_state),
                    Arc::clone(&cluster),
                ),
                config_state,
                counts,
                admin_counts,
                shadow_log: crate::log_sampled::Sampled::new(Duration::from_secs(1)),
                descriptors_log: crate::log_sampled::Sampled::new(Duration::from_secs(1)),
                origin_header: config
                    .listener
                    .origin_header
                    .as_deref()
                    .and_then(|name| http::HeaderName::from_bytes(name.as_bytes()).ok()),
                spillway,
                table: ArcSwap::from_pointee(prepared.table),
                // On tokio's clock, as the spillway in the tests and the actives' waits are.
                tps: TpsLimiter::new_with_clock(spillway_tower::TokioClock::new()),
                executes: ExecuteLimiter::new(),
                // Waits run on tokio timers: time them on tokio's clock too.
                actives: ActiveLimiter::new_with_clock(spillway_tower::TokioClock::new()),
                tls,
                cluster,
            }),
        })
    }

    /// The cluster rules' leases, kept across reloads.
    pub fn cluster_limits(&self) -> &crate::cluster::ClusterLimits {
        &self.inner.cluster
    }

    /// The listener's TLS, if it terminates TLS.
    pub fn tls(&self) -> Option<&crate::tls::ServerTls> {
        self.inner.tls.as_ref()
    }

    /// The spillway requests go through.
    pub fn spillway(&self) -> &spillway::Spillway {
        &self.inner.spillway
    }

    /// Its metrics.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The proxy listener's counts.
    pub(crate) fn listener_counts(&self) -> &ListenerCounts {
        &self.inner.counts
    }

    /// The configuration file's reload state (the reloader keeps it; the metrics read it).
    pub(crate) fn config_state(&self) -> &Arc<std::sync::Mutex<crate::config_state::ConfigState>> {
        &self.inner.config_state
    }

    /// The admin listener's counts (kept here, with the metrics that render them).
    pub(crate) fn admin_listener_counts(&self) -> &ListenerCounts {
        &self.inner.admin_counts
    }

    /// The metrics in Prometheus text format.
    ///
    /// # Errors
    ///
    /// If the text cannot be written (it always can).
    pub fn render_metrics(&self) -> Result<String, std::fmt::Error> {
        self.inner.metrics.render()
    }

    /// Replaces the routing table and upstreams, and the listener's certificate if it has
    /// TLS (the rules are loaded into the spillway separately). Turning TLS on or off takes a
    /// restart.
    pub fn install(&self, prepared: Prepared) {
        self.inner.table.store(Arc::new(prepared.table));
        if let (Some(tls), Some(cert)) = (&self.inner.tls, prepared.cert) {
            tls.replace(cert);
        }
    }

    /// Handles one request from `peer`.
    pub async fn handle(&self, mut request: Request<Incoming>, peer: &Peer) -> Response<ProxyBody> {
        let arrived = tokio::time::Instant::now();
        let table = self.inner.table.load_full();
        let grpc = spillway_tower::grpc::is_grpc(request.headers());
        // An HTTP/1.1 request names its host once (RFC 9112 section 3.2): none, or two that
        // may disagree, is refused before anything reads either.
        if let Some(why) = bad_host(&request) {
            self.inner
                .metrics
                .count(&table.default.resource, "bad_host", "");
            return ProxyBody::text(StatusCode::BAD_REQUEST, why);
        }
        // Routed and forwarded in normal form, so that no spelling of a path misses its route.
        if let Err(err) = normalize_uri(&mut request) {
            self.inner
                .metrics
                .count(&table.default.resource, "bad_path", "");
            return ProxyBody::text(StatusCode::BAD_REQUEST, format!("bad path: {err}\n"));
        }
        let route = table.route(&request);
        let Some(upstream) = route.upstream.clone() else {
            self.inner.metrics.count(&route.resource, "no_route", "");
            return ProxyBody::text(StatusCode::NOT_FOUND, "no route matches\n");
        };
        // A body announced larger than the cap is refused before it takes any place.
        let announced = http_body::Body::size_hint(request.body()).exact();
        if table.max_body_size != 0 && announced.is_some_and(|size| size > table.max_body_size) {
            let fault = ClientFault::TooLarge;
            self.inner
                .metrics
                .count(&route.resource, "client_error", fault.as_str());
            return ProxyBody::text(fault.status(), fault.message());
        }
        let spillway = &self.inner.spillway;
        let shadow = table.shadow;
        let counters = route.metrics(&self.inner.metrics);
        // Dubbo's limits first: a refusal here never counts as a pass. In shadow mode a
        // refusal is counted and logged, and the request goes on without that limit's place.
        let mut permits = body::Permits::default();
        if let Some(tps) = route.tps {
            if let Err(err) = self.inner.tps.try_acquire(&route.resource, tps) {
                if let Some(response) = self.refused(&route.resource, counters, &err, &table, grpc)
                {
                    return response;
                }
            }
        }
        if let Some(max) = route.executes {
            match self.inner.executes.try_acquire(&route.resource, max) {
                Ok(permit) => permits.execute = Some(permit),
                Err(err) => {
                    if let Some(response) =
                        self.refused(&route.resource, counters, &err, &table, grpc)
                    {
                        return response;
                    }
                }
            }
        }
        if let Some((max, timeout)) = route.actives {
            let permit = match self.inner.actives.key(&route.resource) {
                Ok(key) => spillway_tower::acquire_active(&key, max, timeout).await,
                Err(err) => Err(err),
            };
            match permit {
                Ok(permit) => permits.active = Some(permit),
                Err(err) => {
                    if let Some(response) =
                        self.refused(&route.resource, counters, &err, &table, grpc)
                    {
                        return response;
                    }
                }
            }
        }
        // Strict cluster rules: one Redis call each, awaited here (the decision pipeline does
        // not await), after the Dubbo limits and before the route's local rules.
        if let Some(strict) = self.inner.cluster.strict_for(&route.resource) {
            for rule in strict.iter() {
                if let Err(err) = rule.check(&route.resource).await {
                    if let Some(response) =
                        self.refused(&route.resource, counters, &err, &table, grpc)
                    {
                        return response;
                    }
                }
            }
        }
        let admission = match self.enter(route, &request, peer, &table).await {
            Ok(admission) => admission,
            Err(response) => return response,
        };
        let metrics = &self.inner.metrics;
        let mut entry = match admission {
            Ok(entry) => Some(entry),
            Err(err) if shadow => {
                metrics.count(&route.resource, "shadow_block", err.kind().as_str());
                self.shadow_logged(&route.resource, &err.to_string());
                None
            }
            Err(err) => {
                metrics.count(&route.resource, "block", err.kind().as_str());
                counters.blocked(&err);
                return blocked(spillway, &err, table.blocked.as_ref(), grpc);
            }
        };
        match entry.as_ref().and_then(|entry| entry.shadow_rule()) {
            // A flow rule in shadow mode would have refused it.
            Some(rule) => {
                metrics.count(&route.resource, "shadow_block", BlockKind::Flow.as_str());
                self.shadow_logged(&route.resource, &format!("shadow rule {rule}"));
            }
            None if entry.is_some() => {
                counters.passed();
            }
            None => {}
        }
        let timeouts = forward::Timeouts {
            upstream: table.timeout,
            body: client_body::BodyLimits {
                timeout: table.body_timeout,
                max_size: table.max_body_size,
            },
        };
        // The client's side of an upgrade (WebSocket), taken before the request goes on.
        let upgrading = forward::upgrade_of(&request).map(|_| hyper::upgrade::on(&mut request));
        match forward::send(&upstream, request, peer, timeouts).await {
            Ok(mut response) => {
                let grpc = spillway_tower::grpc::is_grpc(response.headers());
                let error =
                    spillway_tower::grpc::is_error(response.status(), response.headers(), grpc);
                if let Some(entry) = entry.as_mut() {
                    entry.set_error(error);
                }
                // A gRPC call's status usually comes in its trailers: its outcome is counted
                // when its body ends.
                let deferred = grpc
                    && !error
                    && !response
                        .headers()
                        .contains_key(spillway_tower::grpc::GRPC_STATUS);
                let outcome = deferred.then(|| body::GrpcOutcome::new(counters.clone()));
                if !deferred {
                    counters.completed(error);
                }
                counters.observe(arrived.elapsed());
                if let (StatusCode::SWITCHING_PROTOCOLS, Some(client)) =
                    (response.status(), upgrading)
                {
                    // The tunnel holds the entry and the permits until it closes: one long
                    // request against the route's limits.
                    let upstream_side = hyper::upgrade::on(&mut response);
                    let resource = route.resource.clone();
                    tokio::spawn(tunnel(client, upstream_side, (entry, permits), resource));
                    return response.map(|_| ProxyBody::full(Bytes::new()));
                }
                let (parts, body) = response.into_parts();
                let mut body = ProxyBody::upstream(body, entry, permits, grpc, outcome);
                let left = table.timeout.saturating_sub(arrived.elapsed());
                body.read_ahead(left).await;
                Response::from_parts(parts, body)
            }
            Err(forward::Failure::NoUpstreamSeat) => {
                // Out of places for upstream connections: this process's limit, not the
                // upstream's failure.
                if let Some(entry) = entry.as_mut() {
                    entry.mark_abandoned();
                }
                self.inner.counts.count_upstream_refusal();
                if let Some(count) = self.inner.descriptors_log.note(tokio::time::Instant::now()) {
                    tracing::warn!(
                        open = crate::descriptors::upstream_open(),
                        count,
                        "refusing requests: as many upstream connections are open as the \
                         open-file limit leaves room for (count: since the last such line)"
                    );
                }
                counters.observe(arrived.elapsed());
                ProxyBody::text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no upstream connection available\n",
                )
            }
            Err(forward::Failure::BadTarget) => {
                if let Some(entry) = entry.as_mut() {
                    entry.mark_abandoned();
                }
                metrics.count(&route.resource, "client_error", "bad_target");
                ProxyBody::text(StatusCode::BAD_REQUEST, "bad request target\n")
            }
            Err(forward::Failure::Client(fault)) => {
                // The client's body stalled, ran past the cap, was malformed or cut short:
                // the client's fault, never the upstream's. The entry ends with no verdict,
                // so that no breaker, adaptive limit or error count learns from it.
                tracing::debug!(resource = %route.resource, peer = %peer.addr(), fault = fault.as_str(), "request body failed");
                if let Some(entry) = entry.as_mut() {
                    entry.mark_abandoned();
                }
                if fault == ClientFault::Stalled {
                    self.inner.counts.count_body_timeout();
                }
                metrics.count(&route.resource, "client_error", fault.as_str());
                ProxyBody::text(fault.status(), fault.message())
            }
            Err(forward::Failure::Upstream(status)) => {
                tracing::debug!(resource = %route.resource, upstream = %upstream.uri, %status, "upstream failed");
                if let Some(entry) = entry.as_mut() {
                    entry.mark_error();
                    // Timed out: to an adaptive limit, a drop.
                    if status == StatusCode::GATEWAY_TIMEOUT {
                        entry.mark_dropped();
                    }
                }
                counters.completed(true);
                counters.observe(arrived.elapsed());
                ProxyBody::text(status, status.canonical_reason().unwrap_or("error"))
            }
        }
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("spillway", &self.inner.spillway)
            .field("table", &self.inner.table.load())
            .finish_non_exhaustive()
    }
}

/// Copies bytes both ways between the client and the upstream of an upgraded connection until
/// either side closes, holding the request's entry and permits until then.
async fn tunnel(
    client: hyper::upgrade::OnUpgrade,
    upstream: hyper::upgrade::OnUpgrade,
    held: (Option<spillway::OwnedEntry>, body::Permits),
    resource: String,
) {
    let (mut entry, permits) = held;
    let (client, upstream) = tokio::join!(client, upstream);
    let result = match (client, upstream) {
        (Ok(client), Ok(upstream)) => {
            let mut client = hyper_util::rt::TokioIo::new(client);
            let mut upstream = hyper_util::rt::TokioIo::new(upstream);
            tokio::io::copy_bidirectional(&mut client, &mut upstream)
                .await
                .map(|_| ())
        }
        (Err(err), _) | (_, Err(err)) => Err(std::io::Error::other(err)),
    };
    if let Err(err) = result {
        tracing::debug!(%resource, error = %err, "upgraded connection failed");
        if let Some(entry) = entry.as_mut() {
            entry.mark_error();
        }
    }
    drop((entry, permits));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `handle` returns, without calling it.
    fn future_size<'a, F, R>(_: F) -> usize
    where
        F: FnOnce(&'a Proxy, Request<Incoming>, &'a Peer) -> R,
    {
        std::mem::size_of::<R>()
    }

    #[test]
    fn a_request_future_leaves_the_rare_paths_out() {
        // hyper keeps room for one request's future in each open HTTP/1.1 connection (and
        // each HTTP/2 stream's task holds one): opening a new upstream connection is boxed, so
        // that an idle client connection does not carry its state (9.6 KB in a release build
        // before it was).
        let size = future_size(Proxy::handle);
        assert!(size <= 5 * 1024, "a request's future takes {size} bytes");
    }
}
