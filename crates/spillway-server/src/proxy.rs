//! The reverse proxy: route a request, put it through its route's Dubbo limits and spillway's
//! rules, forward it to its upstream, and hold its places until the response body ends.

mod body;
mod client;
mod client_body;
mod finishing;
mod forward;
mod forwarder;
mod forwarding;
mod front;
mod http2_conns;
mod keyed;
mod limits;
mod path;
mod pool;
mod refusal;
mod replayed;
mod shadowed;
mod stack;
mod table;
mod tally;
mod tunnel;
mod upstream_body;

pub use body::ProxyBody;
use client_body::ClientFault;
pub use forward::Peer;
pub(crate) use keyed::StagedKeyed;
pub(crate) use path::routable_path;
pub use path::{normalize_path, PathError};
pub(crate) use replayed::{Held, ReplayStacks, Replayed};
pub(crate) use table::Table;

use crate::access_log::{AccessLog, Decision, Pending};
use crate::config::Config;
use crate::conn::ListenerCounts;
use crate::metrics::Metrics;
use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::Bytes;
use finishing::Finishing;
use forward::Failure;
use forwarding::Forwarding;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use shadowed::Shadowed;
use spillway_tower::protect::{Blocked, MissingKey};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// What a configuration needs from files (its upstreams' CA files, the listener's certificate
/// and key), read and checked, ready for [`Proxy::install`]: a reload prepares this first, so
/// that a bad file changes nothing.
#[derive(Debug)]
pub struct Prepared {
    table: Table,
    cert: Option<Arc<rustls::sign::CertifiedKey>>,
    /// The access log's file, opened (`None`: no access log).
    access_log: Option<crate::access_log::Opened>,
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
            access_log: crate::access_log::Opened::open(config)?,
        })
    }

    /// Checks what [`Prepared::new`] reads, creating nothing (`spillway check`): the access
    /// log's file is not opened, only found writable.
    ///
    /// # Errors
    ///
    /// As [`Prepared::new`].
    pub fn check(config: &Config) -> Result<(), String> {
        if let Some(files) = &config.listener.tls {
            crate::tls::certified_key(files)?;
        }
        Table::new(config)?;
        crate::access_log::Opened::check(config)
    }
}

/// The proxy: spillway, the Dubbo limiters, the routing table with its upstreams' clients,
/// and the listener's TLS. Cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    /// What every route's stack shares.
    shared: stack::Shared,
    table: ArcSwap<Table>,
    /// The listener's TLS, if it terminates TLS.
    tls: Option<crate::tls::ServerTls>,
    /// The proxy's and the admin API's listeners' counts (accept errors, timeouts).
    counts: ListenerCounts,
    admin_counts: ListenerCounts,
    /// Requests refused for want of an upstream connection, logged one line a second at most.
    descriptors_log: crate::log_sampled::Sampled,
    /// The configuration file's reloads (kept by the reloader, read by the metrics).
    config_state: Arc<std::sync::Mutex<crate::config_state::ConfigState>>,
    /// The access log, if the configuration has one (replaced at each reload).
    access_log: ArcSwapOption<AccessLog>,
    /// Its lines, kept across reloads.
    access_counts: Arc<crate::access_log::Counts>,
    /// What the health probes read: the workers' beats, and whether it drains.
    health: Arc<crate::health::Health>,
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
        let access_counts = Arc::new(crate::access_log::Counts::default());
        let access_log = start_access_log(prepared.access_log, &access_counts, &spillway);
        let proxy = Self {
            inner: Arc::new(Inner {
                shared: stack::Shared {
                    metrics: Arc::new(Metrics::new(
                        spillway.clone(),
                        counts.clone(),
                        admin_counts.clone(),
                        Arc::clone(&config_state),
                        Arc::clone(&cluster),
                        Arc::clone(&access_counts),
                    )),
                    shadow_log: Arc::new(crate::log_sampled::Sampled::new(Duration::from_secs(1))),
                    origin_header: config
                        .listener
                        .origin_header
                        .as_deref()
                        .and_then(|name| http::HeaderName::from_bytes(name.as_bytes()).ok()),
                    spillway,
                    dubbo: Arc::default(),
                    cluster,
                },
                config_state,
                access_log: ArcSwapOption::from(access_log),
                access_counts,
                counts,
                admin_counts,
                descriptors_log: crate::log_sampled::Sampled::new(Duration::from_secs(1)),
                table: ArcSwap::from_pointee(prepared.table),
                tls,
                health: Arc::default(),
            }),
        };
        Ok(proxy)
    }

    /// Waits until the access log's lines so far are written, `within` at most: at the end
    /// of a drain, before the process exits. Whether they were (true without an access log).
    /// Blocks.
    pub fn flush_access_log(&self, within: Duration) -> bool {
        match self.inner.access_log.load_full() {
            Some(log) => log.flush(within),
            None => true,
        }
    }

    /// What the health probes read (see [`crate::health`]).
    pub fn health(&self) -> &Arc<crate::health::Health> {
        &self.inner.health
    }

    /// The cluster rules' leases, kept across reloads.
    pub fn cluster_limits(&self) -> &crate::cluster::ClusterLimits {
        &self.inner.shared.cluster
    }

    /// The listener's TLS, if it terminates TLS.
    pub fn tls(&self) -> Option<&crate::tls::ServerTls> {
        self.inner.tls.as_ref()
    }

    /// The spillway requests go through.
    pub fn spillway(&self) -> &spillway::Spillway {
        &self.inner.shared.spillway
    }

    /// Its metrics.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.shared.metrics
    }

    /// The proxy listener's counts.
    pub(crate) fn listener_counts(&self) -> &ListenerCounts {
        &self.inner.counts
    }

    /// Whether `ip` is one of the listener's trusted proxies, as the routes in force say.
    pub(crate) fn trusts_peer(&self, ip: std::net::IpAddr) -> bool {
        self.inner.table.load().trusted_proxies.trusts(&ip)
    }

    /// The configuration file's reload state (the reloader keeps it; the metrics read it).
    pub(crate) fn config_state(&self) -> &Arc<std::sync::Mutex<crate::config_state::ConfigState>> {
        &self.inner.config_state
    }

    /// The admin listener's counts (kept here, with the metrics that render them).
    pub(crate) fn admin_listener_counts(&self) -> &ListenerCounts {
        &self.inner.admin_counts
    }

    /// The resources the routes (and the default route) produce now: a rule on any other
    /// resource never applies.
    pub(crate) fn produced_resources(&self) -> std::collections::BTreeSet<String> {
        let table = self.inner.table.load();
        table
            .routes
            .iter()
            .chain(std::iter::once(&table.default))
            .map(|route| route.resource.clone())
            .collect()
    }

    /// Whether any route's requests carry a claim (criticality, tenant, deadline).
    pub(crate) fn claims_configured(&self) -> bool {
        let table = self.inner.table.load();
        let mut routes = table.routes.iter().chain(std::iter::once(&table.default));
        routes.any(|route| route.claims.is_some())
    }

    /// The metrics in Prometheus text format. `spillway_unused_rules` is as the admin API's
    /// last `GET /metrics` counted it (it counts the unused rules at each scrape).
    ///
    /// # Errors
    ///
    /// If the text cannot be written (it always can).
    pub fn render_metrics(&self) -> Result<String, std::fmt::Error> {
        self.inner.shared.metrics.render()
    }

    /// Replaces the routing table and upstreams, and the listener's certificate if it has
    /// TLS (the rules are loaded into the spillway separately). Turning TLS on or off takes a
    /// restart.
    pub fn install(&self, prepared: Prepared) {
        self.inner.table.store(Arc::new(prepared.table));
        let access_log = start_access_log(
            prepared.access_log,
            &self.inner.access_counts,
            &self.inner.shared.spillway,
        );
        self.inner.access_log.store(access_log);
        if let (Some(tls), Some(cert)) = (&self.inner.tls, prepared.cert) {
            tls.replace(cert);
        }
    }

    /// Handles one request from `peer`: checks what every request must be (one host, a path
    /// in normal form, a body within the cap), routes it, and puts it through its route's
    /// stack (see `proxy/stack.rs`); then counts what became of it, holds a WebSocket's
    /// places while its tunnel is open, and gives its response the access log's line, if the
    /// configuration has an access log.
    pub async fn handle(
        &self,
        request: Request<Incoming>,
        peer: &Arc<Peer>,
    ) -> Response<ProxyBody> {
        let arrived = tokio::time::Instant::now();
        if peer.is_going_away() {
            // Asked to go away (too many of its requests ran on after it left them): a client
            // that does not heed the GOAWAY gets nothing more forwarded on this connection.
            return ProxyBody::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "this connection is going away: send the request on a new one\n",
            );
        }
        let table = self.inner.table.load_full();
        let metrics = &self.inner.shared.metrics;
        let log = self.inner.access_log.load();
        let mut pending = log.as_ref().map(|log| {
            let headers = table.logged_headers.as_deref().unwrap_or_default();
            Pending::new(log, &request, peer.addr().ip(), arrived, headers)
        });
        let (fronted, mut request) = match front::front(&table, request, peer.addr(), arrived) {
            Ok(fronted) => fronted,
            Err(early) => {
                metrics.count(early.resource, early.outcome, "");
                let response = ProxyBody::text(early.status, early.text);
                return logged(pending, response, || {
                    Decision::new(None, early.resource, early.outcome)
                });
            }
        };
        let front::Fronted {
            route,
            class,
            deadline,
            ..
        } = fronted;
        let template = route.template.as_deref();
        if let Some(pending) = &mut pending {
            pending.routed(template, &route.resource);
        }
        let Some(service) = route.service(&table, &self.inner.shared) else {
            metrics.count(&route.resource, "no_route", "");
            let response = ProxyBody::text(StatusCode::NOT_FOUND, "no route matches\n");
            return logged(pending, response, || {
                Decision::new(template, &route.resource, "no_route")
            });
        };
        // A body announced larger than the cap is refused before it takes any place.
        let announced = http_body::Body::size_hint(request.body()).exact();
        if table.max_body_size != 0 && announced.is_some_and(|size| size > table.max_body_size) {
            let fault = ClientFault::TooLarge;
            metrics.count(&route.resource, "client_error", fault.as_str());
            let response = ProxyBody::text(fault.status(), fault.message());
            return logged(pending, response, || {
                Decision::new(template, &route.resource, "client_error").because(fault.as_str())
            });
        }
        // The keys its per-key rules read, for the log to name the one a refusal was for.
        if let Some(pending) = pending.as_mut().filter(|_| !route.keys.is_empty()) {
            let (parts, body) = request.into_parts();
            pending.keys = table.key_values(route, &parts);
            request = Request::from_parts(parts, body);
        }
        // The client's side of an upgrade (WebSocket), taken before the request goes on.
        let upgrading = forward::upgrade_of(&request).map(|_| hyper::upgrade::on(&mut request));
        // A client that leaves drops this future: a call already forwarded runs on to the
        // upstream's answer where the listener says so, holding its places (see `finishing`).
        let forwarding = Forwarding::when(table.finish_when_client_leaves);
        let mut service = service.clone();
        let forwarder = service.get_mut().get_mut();
        forwarder.set_peer(Arc::clone(peer));
        forwarder.set_forwarding(forwarding.clone());
        // A call that runs on keeps its log line, so that the line's duration is the time it
        // held its places, and is counted in the route's metrics when it ends.
        let counters = route.metrics(metrics);
        let at_end = || self.at_run_on_end(counters, &route.resource, peer, arrived);
        let call = service.oneshot(request);
        let (answered, pending) =
            Finishing::new(call, forwarding, &self.inner.counts, peer, pending, &at_end).await;
        let response = match answered {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let extensions = response.extensions();
        let decided = |decision| Decision::new(template, &route.resource, decision);
        // A refusal, or the proxy's answer to a failure: its text is sent as it is, and what
        // the body held (the entry, the places) is given back now.
        if let Some(Blocked(err)) = extensions.get::<Blocked>() {
            metrics.count(&route.resource, "block", err.kind().as_str());
            counters.blocked(err);
            if let Some(class) = class {
                let for_deadline = err.kind() == spillway::BlockKind::Deadline;
                metrics.classes.refused(class, for_deadline);
            }
            let decision = pending.as_ref().map(|pending| {
                let key = (err.rule_id()).and_then(|rule| table.key_of(route, rule, &pending.keys));
                decided("block")
                    .because(err.kind().as_str())
                    .by(err.rule_id(), key)
            });
            return logged(pending, response.map(ProxyBody::answered), || {
                decision.unwrap_or_default()
            });
        }
        if extensions.get::<MissingKey>().is_some() {
            metrics.count(&route.resource, "block", "missing_key");
            if let Some(class) = class {
                metrics.classes.refused(class, false);
            }
            return logged(pending, response.map(ProxyBody::answered), || {
                decided("block").because("missing_key")
            });
        }
        // What shadow mode let it through with, for the log, and the key a per-key rule
        // would have refused.
        let shadowed = pending.as_ref().and_then(|pending| {
            let Shadowed { rule, kind } = extensions.get::<Shadowed>()?.clone();
            let key = (rule.as_deref()).and_then(|rule| table.key_of(route, rule, &pending.keys));
            Some((rule, kind, key))
        });
        let passed = move || match shadowed {
            Some((rule, kind, key)) => decided("shadow_block")
                .because(kind)
                .by(rule.as_deref(), key),
            None => decided("pass"),
        };
        if let Some(failure) = extensions.get::<Failure>().copied() {
            self.failed(failure, &route.resource, peer, counters, arrived);
            // Shadow mode's refusal names it; else the failure does (its status says the rest).
            return logged(
                pending,
                response.map(ProxyBody::answered),
                || match passed() {
                    shadowed if shadowed.decision == "shadow_block" => shadowed,
                    passed => {
                        let (outcome, reason) = failure.decision();
                        Decision {
                            decision: outcome,
                            ..passed
                        }
                        .because(reason)
                    }
                },
            );
        }
        let (outcome, now) = count_response(counters, &response, arrived, true);
        let took = now.saturating_duration_since(arrived);
        let mut response = response;
        if let (StatusCode::SWITCHING_PROTOCOLS, Some(client)) = (response.status(), upgrading) {
            // The tunnel holds the body, with the entry and the places, until it closes: one
            // long request against the route's limits (paced by its client: no latency
            // sample).
            let upstream_side = hyper::upgrade::on(&mut response);
            let (parts, held) = response.into_parts();
            let resource = route.resource.clone();
            // Its line is written when the tunnel closes, as its places are given back.
            let entry = pending.map(|pending| pending.answered(parts.status, passed()));
            let tunnel = tunnel::Tunnel {
                held,
                logged: entry,
                resource,
                idle: table.tunnel_idle,
                counts: self.listener_counts().clone(),
                _client: peer.client_place(),
            };
            tokio::spawn(tunnel.run(client, upstream_side));
            return Response::from_parts(parts, ProxyBody::full(Bytes::new()));
        }
        let (parts, body) = response.into_parts();
        let mut body = ProxyBody::upstream(body, outcome);
        // The read-ahead waits no longer than the request has left.
        let mut left = table.timeout.saturating_sub(took);
        if let Some(deadline) = deadline {
            left = left.min(deadline.saturating_duration_since(now));
        }
        body.read_ahead(left).await;
        logged(pending, Response::from_parts(parts, body), passed)
    }

    /// What counts a call that ran on after its client left (`listener.finish_when_client_leaves`)
    /// in its route's metrics when it ends, as one answered here would be: a failure as
    /// [`failed`](Self::failed) counts it, a response as [`count_response`] does, except that a
    /// gRPC status still to come in trailers nobody reads counts by the head alone. Made only
    /// for a call that runs on.
    fn at_run_on_end<B: Send + 'static>(
        &self,
        counters: &crate::metrics::ResourceMetrics,
        resource: &str,
        peer: &Arc<Peer>,
        arrived: tokio::time::Instant,
    ) -> Box<dyn FnOnce(Result<Response<B>, std::convert::Infallible>) + Send> {
        let (proxy, counters) = (self.clone(), counters.clone());
        let (resource, peer) = (resource.to_owned(), Arc::clone(peer));
        Box::new(move |answered| {
            let response = match answered {
                Ok(response) => response,
                Err(never) => match never {},
            };
            match response.extensions().get::<Failure>() {
                Some(&failure) => proxy.failed(failure, &resource, &peer, &counters, arrived),
                None => {
                    count_response(&counters, &response, arrived, false);
                }
            }
        })
    }

    /// Counts and logs a request that got no response from its upstream.
    fn failed(
        &self,
        failure: Failure,
        resource: &str,
        peer: &Peer,
        counters: &crate::metrics::ResourceMetrics,
        arrived: tokio::time::Instant,
    ) {
        let metrics = &self.inner.shared.metrics;
        match failure {
            Failure::NoUpstreamSeat => {
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
            }
            Failure::BadTarget => metrics.count(resource, "client_error", "bad_target"),
            Failure::Client(fault) => {
                // The entry ended with no verdict, so that no breaker, adaptive limit or error
                // count learns from it.
                tracing::debug!(%resource, peer = %peer.addr(), fault = fault.as_str(), "request body failed");
                if fault == ClientFault::Stalled {
                    self.inner.counts.count_body_timeout();
                }
                metrics.count(resource, "client_error", fault.as_str());
            }
            Failure::Upstream(status) => {
                tracing::debug!(%resource, %status, "upstream failed");
                counters.completed(true);
                counters.observe(arrived.elapsed());
            }
            // A deadline the configuration set is the upstream's failure; one the client
            // gave, the client's choice.
            Failure::Deadline { error: true } => {
                tracing::debug!(%resource, "the route's deadline passed at the upstream");
                counters.completed(true);
                counters.observe(arrived.elapsed());
            }
            Failure::Deadline { error: false } => {
                metrics.count(resource, "client_error", "deadline");
                counters.observe(arrived.elapsed());
            }
        }
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("spillway", &self.inner.shared.spillway)
            .field("table", &self.inner.table.load())
            .finish_non_exhaustive()
    }
}

/// Counts a response from the upstream in its route's `counters`: a completion, an error or
/// not by its status (a gRPC call's status usually comes in its trailers: with `body_counts`,
/// such a call is left for its body to count when it ends, with the [`body::GrpcOutcome`]
/// returned), and its time to the head from `arrived`. Returns that outcome and the time now
/// (one reading of the clock for the time it took and the time it has left).
fn count_response<B>(
    counters: &crate::metrics::ResourceMetrics,
    response: &Response<B>,
    arrived: tokio::time::Instant,
    body_counts: bool,
) -> (Option<body::GrpcOutcome>, tokio::time::Instant) {
    let grpc = spillway_tower::grpc::is_grpc(response.headers());
    let error = spillway_tower::grpc::is_error(response.status(), response.headers(), grpc);
    let deferred =
        body_counts && grpc && !error && spillway_tower::grpc::status_to_come(response.headers());
    let outcome = deferred.then(|| body::GrpcOutcome::new(counters.clone()));
    if !deferred {
        counters.completed(error);
    }
    let now = tokio::time::Instant::now();
    counters.observe(now.saturating_duration_since(arrived));
    (outcome, now)
}

/// `response`, carrying the access log's line of its request (`pending`, `None` when the
/// configuration has no access log) with what `decision` says: written when its body is done
/// with.
fn logged(
    pending: Option<Box<Pending>>,
    response: Response<ProxyBody>,
    decision: impl FnOnce() -> Decision,
) -> Response<ProxyBody> {
    match pending {
        Some(pending) => {
            let entry = pending.answered(response.status(), decision());
            response.map(|body| body.logging(entry))
        }
        None => response,
    }
}

/// Starts the access log `opened` (if any), counting in `counts`; one that cannot start is
/// logged and left off.
fn start_access_log(
    opened: Option<crate::access_log::Opened>,
    counts: &Arc<crate::access_log::Counts>,
    spillway: &spillway::Spillway,
) -> Option<Arc<AccessLog>> {
    match AccessLog::start(opened?, Arc::clone(counts), spillway) {
        Ok(log) => Some(Arc::new(log)),
        Err(err) => {
            tracing::error!(error = %err, "the access log is off");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `handle` returns, without calling it.
    fn future_size<'a, F, R>(_: F) -> usize
    where
        F: FnOnce(&'a Proxy, Request<Incoming>, &'a Arc<Peer>) -> R,
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
