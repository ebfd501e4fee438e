//! A route's request path as a tower stack: its limits outside spillway's rules, then
//! `spillway-tower`'s layer (the code a library user gets), then the forwarder.
//!
//! ```text
//! Limits (tps, executes, actives, strict cluster rules)
//!   -> spillway_tower::SpillwayService (resource, origin, keys; rules, waits, shadow mode)
//!     -> Forwarder (counts the admission, sends to the upstream)
//! ```

use super::client::Upstream;
use super::forward::Timeouts;
use super::forwarder::{ForwardBody, Forwarder};
use super::limits::{Dubbo, Limits, LimitsBody, RouteLimits};
use super::tally::Tally;
use crate::claims::Claim;
use crate::cluster::ClusterLimits;
use crate::config::BlockedResponse;
use crate::keyed::RouteKey;
use crate::log_sampled::Sampled;
use crate::metrics::{Metrics, ResourceMetrics};
use spillway::dubbo::TpsConfig;
use spillway_tower::keys::TrustedProxies;
use spillway_tower::protect::ResponseBody;
use spillway_tower::SpillwayLayer;
use std::sync::Arc;
use std::time::Duration;
use tower::Layer;

/// What every route's stack shares: the proxy's parts that outlive a reload.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) spillway: spillway::Spillway,
    pub(crate) metrics: Arc<Metrics>,
    /// Shadow mode's log lines, one a second at most.
    pub(crate) shadow_log: Arc<Sampled>,
    /// The Dubbo limiters of every route.
    pub(crate) dubbo: Arc<Dubbo>,
    /// The cluster rules' leases and strict checks, with their tasks.
    pub(crate) cluster: Arc<ClusterLimits>,
    /// The header that names a request's origin, if the listener reads one.
    pub(crate) origin_header: Option<http::HeaderName>,
}

/// What one route's stack is made of, from its configuration.
#[derive(Debug)]
pub(crate) struct RouteSpec<'a> {
    pub(crate) resource: &'a str,
    pub(crate) tps: Option<TpsConfig>,
    pub(crate) executes: Option<u32>,
    pub(crate) actives: Option<(u32, Duration)>,
    /// The keys its resource's per-key rules read.
    pub(crate) keys: &'a [RouteKey],
    /// Its resource's series that every request touches.
    pub(crate) counters: ResourceMetrics,
    /// The listener's: shadow mode, the response of a refused request, the proxies whose
    /// forwarding headers name the client, the timeouts and the body's cap.
    pub(crate) shadow: bool,
    pub(crate) blocked: Option<BlockedResponse>,
    pub(crate) trusted: &'a TrustedProxies,
    /// Whether its requests carry a [`Claim`] to read into their entries.
    pub(crate) claims: bool,
    /// Whether a refusal is answered as `serve` answers it (its text, its fields); `false`
    /// for `spillway replay`, which answers no one and reads only what refused.
    pub(crate) answers: bool,
}

/// A route's stack around `S`, the innermost service.
pub(crate) type Stack<S> = Limits<spillway_tower::SpillwayService<S>>;

/// A route's stack as `spillway serve` runs it: forwarding to the upstream.
pub(crate) type RouteService = Stack<Forwarder>;

/// The body of a response through a route's stack.
pub(crate) type StackBody = LimitsBody<ResponseBody<ForwardBody>>;

/// The forwarder to `upstream` within `timeouts`, as `spillway serve`'s innermost service.
pub(crate) fn forwarder(
    upstream: Arc<Upstream>,
    timeouts: Timeouts,
    shadow: bool,
) -> impl FnOnce(Arc<Tally>) -> Forwarder {
    move |tally| Forwarder::new(upstream, timeouts, tally, shadow)
}

/// The stack of the route `spec` describes, around the innermost service `inner` makes (given
/// the route's tally, which counts each admission): the forwarder for `spillway serve`, the
/// recorded response for `spillway replay`, so that both decide in the same code.
pub(crate) fn build<S>(
    spec: RouteSpec<'_>,
    shared: &Shared,
    inner: impl FnOnce(Arc<Tally>) -> S,
) -> Stack<S> {
    let tally = Arc::new(Tally::new(
        spec.resource,
        spec.counters,
        Arc::clone(&shared.metrics),
        Arc::clone(&shared.shadow_log),
    ));
    let admitted = match &spec.blocked {
        Some(blocked) if blocked.ratelimit_on_admitted => blocked.ratelimit_fields.into(),
        _ => spillway_tower::RateLimitFields::None,
    };
    let (configured, spillway) = (spec.blocked, shared.spillway.clone());
    let answers = spec.answers;
    let refusal = Arc::new(
        move |err: &spillway::BlockError, headers: &http::HeaderMap, claim: Option<&Claim>| {
            if !answers {
                let mut response = http::Response::new(bytes::Bytes::new());
                *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                return response;
            }
            let grpc = spillway_tower::grpc::is_grpc(headers);
            // The refusal names the request's criticality, where it claims one.
            let named = claim
                .filter(|_| err.criticality().is_none())
                .map(|claim| err.clone().with_criticality(claim.criticality));
            let err = named.as_ref().unwrap_or(err);
            super::refusal::blocked(&spillway, err, configured.as_ref(), grpc)
        },
    );
    let on_blocked = Arc::clone(&refusal);
    // A call's future is dropped only when its client left and the call was cancelled
    // (`listener.finish_when_client_leaves = false`, or a cap reached as it left), or at the
    // end of a shutdown's drain: it reached no verdict on the upstream, and counts nothing but
    // its pass. Timed to the drop, clients
    // that give up under an overload would feed the adaptive limits short, good samples.
    let mut layer = SpillwayLayer::new(shared.spillway.clone())
        .on_dropped(spillway_tower::protect::OnDropped::Abandon)
        .fixed_resource(spec.resource)
        .shadow(spec.shadow)
        .ratelimit_on_admitted(admitted)
        .on_blocked(move |err, parts, _| {
            on_blocked(err, &parts.headers, parts.extensions.get::<Claim>())
        });
    if let Some(name) = shared.origin_header.clone() {
        layer = layer.origin(move |parts| {
            let value = parts.headers.get(&name)?;
            value.to_str().ok().map(str::to_owned)
        });
    }
    for key in spec.keys {
        layer = key.read_by(layer, spec.trusted);
    }
    if spec.claims {
        fn claim(parts: &http::request::Parts) -> Option<&Claim> {
            parts.extensions.get::<Claim>()
        }
        layer = layer
            .criticality(move |parts| Some(claim(parts)?.criticality))
            .tenant(move |parts| claim(parts)?.tenant.clone())
            .deadline(move |parts| claim(parts)?.left(tokio::time::Instant::now()));
    }
    let inner = inner(Arc::clone(&tally));
    let limits = RouteLimits {
        resource: spec.resource.to_owned(),
        tps: spec.tps,
        executes: spec.executes,
        actives: spec.actives,
        dubbo: Arc::clone(&shared.dubbo),
        cluster: Arc::clone(&shared.cluster),
        spillway: shared.spillway.clone(),
        shadow: spec.shadow,
        refusal,
        tally,
    };
    Limits::new(layer.layer(inner), limits)
}
