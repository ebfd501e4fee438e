//! The routing table of one configuration: each route's resource, upstream, Dubbo limits and
//! key readers, swapped whole on reload.

use crate::config::Config;
use crate::metrics::{Metrics, ResourceMetrics};
use crate::router::Router;
use http::Request;
use spillway::dubbo::TpsConfig;
use std::sync::Arc;
use std::time::Duration;

/// Where a matched request goes and what limits its route has.
#[derive(Debug, Clone)]
pub(crate) struct RouteInfo {
    pub(crate) resource: String,
    /// Its path template (`None`: the default route's), which `path:NAME` keys read.
    pub(crate) template: Option<String>,
    /// Whether its path matches in any case (`case_sensitive = false`).
    pub(crate) any_case: bool,
    pub(crate) upstream: Option<Arc<super::client::Upstream>>,
    pub(crate) tps: Option<TpsConfig>,
    pub(crate) executes: Option<u32>,
    pub(crate) actives: Option<(u32, Duration)>,
    /// The keys its resource's per-key rules read from each request.
    pub(crate) keys: Vec<crate::keyed::RouteKey>,
    /// Its resource's series that every request touches, looked up at its first request.
    pub(super) metrics: std::sync::OnceLock<ResourceMetrics>,
    /// Its stack, built at its first request (`None`: no upstream). A route changed in a copy
    /// of the table gets a new one ([`RouteInfo::with_keys`]).
    pub(super) service: std::sync::OnceLock<Option<super::stack::RouteService>>,
    /// Whether a key of its, or its claims, read the client's address.
    pub(super) reads_peer: bool,
    /// How its requests' claims (criticality, tenant, deadline) are read (`None`: they carry
    /// none).
    pub(crate) claims: Option<Arc<crate::claims::RouteClaims>>,
}

impl RouteInfo {
    /// A key that the request with `headers` and `uri` states more than once, among those its
    /// per-key rules and its claims read, as the file writes it.
    pub(crate) fn repeated_key(
        &self,
        headers: &http::HeaderMap,
        uri: &http::Uri,
    ) -> Option<String> {
        (self.keys.iter())
            .find_map(|key| key.repeated(headers, uri))
            .or_else(|| self.claims.as_ref()?.repeated(headers, uri))
    }

    pub(super) fn new(resource: String, upstream: Option<Arc<super::client::Upstream>>) -> Self {
        Self {
            resource,
            template: None,
            any_case: false,
            upstream,
            tps: None,
            executes: None,
            actives: None,
            keys: Vec::new(),
            metrics: std::sync::OnceLock::new(),
            service: std::sync::OnceLock::new(),
            reads_peer: false,
            claims: None,
        }
    }

    /// Its path, as its keys read segments of it (`None`: the default route's, which has
    /// none).
    pub(crate) fn path(&self) -> Option<crate::keyed::RoutePath<'_>> {
        self.template
            .as_deref()
            .map(|template| crate::keyed::RoutePath {
                template,
                any_case: self.any_case,
            })
    }

    /// With its requests' claims read by `claims`.
    pub(super) fn with_claims(self, claims: Option<Arc<crate::claims::RouteClaims>>) -> Self {
        let claims_read_peer = claims.as_ref().is_some_and(|claims| claims.reads_peer());
        Self {
            reads_peer: self.reads_peer || claims_read_peer,
            claims,
            service: std::sync::OnceLock::new(),
            ..self
        }
    }

    /// With `keys` read from each request, and its stack built anew.
    pub(super) fn with_keys(self, keys: Vec<crate::keyed::RouteKey>) -> Self {
        let claims_read_peer = self
            .claims
            .as_ref()
            .is_some_and(|claims| claims.reads_peer());
        Self {
            reads_peer: claims_read_peer || keys.iter().any(crate::keyed::RouteKey::reads_peer),
            keys,
            service: std::sync::OnceLock::new(),
            ..self
        }
    }

    /// Its stack, built on first use from `table` and the proxy's `shared` parts (`None`: it
    /// has no upstream).
    pub(super) fn service(
        &self,
        table: &Table,
        shared: &super::stack::Shared,
    ) -> Option<&super::stack::RouteService> {
        self.service
            .get_or_init(|| {
                let upstream = self.upstream.clone()?;
                let forwarder = super::stack::forwarder(upstream, table.timeouts(), table.shadow);
                Some(super::stack::build(
                    self.spec(table, shared),
                    shared,
                    forwarder,
                ))
            })
            .as_ref()
    }

    /// What its stack is made of, in `table`, with the proxy's `shared` parts.
    pub(crate) fn spec<'a>(
        &'a self,
        table: &'a Table,
        shared: &super::stack::Shared,
    ) -> super::stack::RouteSpec<'a> {
        super::stack::RouteSpec {
            resource: &self.resource,
            tps: self.tps,
            executes: self.executes,
            actives: self.actives,
            keys: &self.keys,
            counters: self.metrics(&shared.metrics).clone(),
            shadow: table.shadow,
            blocked: table.blocked.clone(),
            trusted: &table.trusted_proxies,
            claims: self.claims.is_some(),
            answers: true,
        }
    }

    /// Its resource's series in `metrics`.
    pub(super) fn metrics(&self, metrics: &Metrics) -> &ResourceMetrics {
        self.metrics
            .get_or_init(|| metrics.resource(&self.resource))
    }
}

/// The routing table of one configuration (swapped whole on reload).
#[derive(Debug, Clone)]
pub(crate) struct Table {
    /// The per-key rules whose keys the routes read, as the file (or the admin API) gave them.
    pub(super) keyed: Vec<crate::config::KeyedConfig>,
    /// Each per-key rule's key source, as written (`header:x-user`), by the rule's id.
    pub(super) keyed_sources: std::collections::HashMap<String, String>,
    /// The request headers the access log keeps (`None`: no access log).
    pub(super) logged_headers: Option<Vec<http::HeaderName>>,
    pub(super) router: Router,
    pub(super) routes: Vec<RouteInfo>,
    pub(super) default: RouteInfo,
    pub(super) timeout: Duration,
    pub(super) body_timeout: Duration,
    /// Longest an upgraded connection may carry no byte.
    pub(super) tunnel_idle: Duration,
    /// The most bytes a request body may have (0: no cap).
    pub(super) max_body_size: u64,
    pub(super) blocked: Option<crate::config::BlockedResponse>,
    pub(super) shadow: bool,
    /// Whether a call whose client leaves runs on to the upstream's answer.
    pub(super) finish_when_client_leaves: bool,
    /// Proxies whose forwarding headers name the client (for keys by `peer_ip`).
    pub(super) trusted_proxies: spillway_tower::keys::TrustedProxies,
}

/// Each of `rules`' key source, as written (`header:x-user`), by the rule's id.
pub(super) fn keyed_sources(
    rules: &[crate::config::KeyedConfig],
) -> std::collections::HashMap<String, String> {
    (rules.iter())
        .filter_map(|rule| {
            let source = crate::keyed::Source::parse(&rule.key).ok()?;
            Some((rule.id.clone(), source.describe()))
        })
        .collect()
}

impl Table {
    /// The table of `config`, with a client for each upstream.
    ///
    /// # Errors
    ///
    /// An upstream's `ca` file cannot be read or holds no good certificate.
    pub(crate) fn new(config: &Config) -> Result<Self, String> {
        let mut upstreams = std::collections::HashMap::new();
        for upstream in &config.upstreams {
            let upstream = upstream.get_ref();
            let ready = super::client::Upstream::new(upstream, config.listener.workers.resolve())
                .map_err(|err| format!("upstream `{}`: {err}", upstream.name))?;
            upstreams.insert(upstream.name.as_str(), Arc::new(ready));
        }
        let upstream = |name: &str| upstreams.get(name).cloned();
        let keyed: Vec<crate::config::KeyedConfig> = config
            .keyed
            .iter()
            .map(|rule| rule.get_ref().clone())
            .collect();
        let (plan, _) = crate::keyed::plan(&keyed)
            .map_err(|(index, field, why)| format!("keyed rule #{index}: `{field}` {why}"))?;
        let trusted_proxies =
            spillway_tower::keys::TrustedProxies::parse(&config.listener.trusted_proxies)
                .map_err(|why| format!("listener.trusted_proxies: {why}"))?
                .reading(config.listener.forwarded_header)
                .keying(config.listener.peer_ip_prefixes()?);
        let routes = config
            .routes
            .iter()
            .map(|route| {
                let route = route.get_ref();
                let info = RouteInfo {
                    tps: route.tps.map(|tps| TpsConfig::new(tps.rate, tps.interval)),
                    executes: route.executes,
                    actives: route.actives.map(|a| (a.max, a.timeout)),
                    template: Some(route.path.clone()),
                    any_case: !route.case_sensitive,
                    ..RouteInfo::new(route.resource.clone(), upstream(&route.upstream))
                };
                let path = info.path();
                let keys = crate::keyed::route_keys(&plan, &route.resource, path);
                let claims = crate::claims::RouteClaims::new(
                    config,
                    &route.resource,
                    path,
                    route.criticality,
                    route.deadline,
                );
                info.with_keys(keys).with_claims(claims)
            })
            .collect();
        let mut default = match &config.default {
            Some(default) => RouteInfo::new(
                default.get_ref().resource.clone(),
                default.get_ref().upstream.as_deref().and_then(upstream),
            ),
            None => RouteInfo::new("unmatched".to_owned(), None),
        };
        let keys = crate::keyed::route_keys(&plan, &default.resource, None);
        let claims = crate::claims::RouteClaims::new(config, &default.resource, None, None, None);
        default = default.with_keys(keys).with_claims(claims);
        Ok(Self {
            keyed_sources: keyed_sources(&keyed),
            logged_headers: crate::access_log::logged_headers(config),
            keyed,
            router: Router::new(config),
            routes,
            default,
            timeout: config.listener.upstream_timeout,
            body_timeout: config.listener.body_timeout,
            tunnel_idle: config.listener.tunnel_idle_timeout,
            max_body_size: config.listener.max_body_size,
            blocked: config.blocked.as_ref().map(|b| b.get_ref().clone()),
            shadow: config.listener.shadow,
            finish_when_client_leaves: config.listener.finish_when_client_leaves,
            trusted_proxies,
        })
    }

    /// How long a forwarded request may take, and how large its body may be.
    pub(super) fn timeouts(&self) -> super::forward::Timeouts {
        super::forward::Timeouts {
            upstream: self.timeout,
            body: super::client_body::BodyLimits {
                timeout: self.body_timeout,
                max_size: self.max_body_size,
            },
        }
    }

    /// The values of `route`'s per-key rules' keys in the request with head `parts`, in the
    /// order of its keys, read as its stack reads them.
    pub(crate) fn key_values(
        &self,
        route: &RouteInfo,
        parts: &http::request::Parts,
    ) -> Vec<Option<String>> {
        (route.keys.iter())
            .map(|key| key.value(parts, &self.trusted_proxies))
            .collect()
    }

    /// The key the per-key rule `rule` read from a request of `route` whose key values
    /// ([`Table::key_values`]) are `values`: `None` if `rule` is no per-key rule of it.
    pub(crate) fn key_of(
        &self,
        route: &RouteInfo,
        rule: &str,
        values: &[Option<String>],
    ) -> Option<String> {
        let source = self.keyed_sources.get(rule)?;
        let index = (route.keys.iter()).position(|key| key.described() == source)?;
        values.get(index)?.clone()
    }

    /// The route `request` takes, and its index among the routes (`None`: the default route).
    pub(crate) fn route<B>(&self, request: &Request<B>) -> (Option<usize>, &RouteInfo) {
        let index = self
            .router
            .find(
                request.method(),
                &super::path::routable_path(request.uri().path()),
            )
            .filter(|index| *index < self.routes.len());
        let route = index.map_or(&self.default, |index| &self.routes[index]);
        (index, route)
    }
}
