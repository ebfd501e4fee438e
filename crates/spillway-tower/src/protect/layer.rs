use super::blocked::{blocked_with, default_blocked};
use super::config::{Config, KeyReader, Selector};
use super::fields::RateLimitFields;
use super::missing::OnMissingKey;
use super::service::SpillwayService;
use bytes::Bytes;
use http::{request, HeaderMap, Response, StatusCode};
use spillway::{BlockError, TrafficType};
use std::fmt;
use std::sync::Arc;
use tower::Layer;

/// Puts every request of the wrapped service through a [`spillway::Spillway`]: see the
/// [module docs](crate::protect) for what happens to a request.
///
/// Cheap to clone; every clone, and every service it makes, shares the same spillway and so
/// the same limits, whatever the connection.
///
/// Defaults: requests enter one resource named `http` (with the `axum` feature,
/// [`by_route`](Self::by_route) names them by method and route template instead), with no
/// origin, as [inbound](TrafficType::Inbound) traffic; a response is an error when its status
/// is 5xx or its gRPC status is not OK; a blocked request gets
/// [`too_many_requests`](super::too_many_requests) (429, `Retry-After`, `RateLimit` headers),
/// or [`grpc_resource_exhausted`](super::grpc_resource_exhausted) if it is a gRPC call.
/// Making the first layer sets the warning of
/// [`warn_on_blocking_waits`](crate::warn_on_blocking_waits) (unless a hook is set), so that a
/// blocking wait inside the runtime does not go unnoticed.
///
/// # Examples
///
/// ```
/// use spillway::flow::FlowRule;
/// use spillway_tower::SpillwayLayer;
///
/// let spillway = spillway::Spillway::new();
/// spillway.load_flow_rules(vec![FlowRule::qps("api-qps", "api", 100.0)])?;
/// let layer = SpillwayLayer::new(spillway)
///     .fixed_resource("api")
///     .origin_header("x-caller");
/// // axum: Router::new().route(...).layer(layer)
/// # let _ = layer;
/// # Ok::<(), spillway::flow::FlowRuleError>(())
/// ```
#[derive(Clone)]
pub struct SpillwayLayer {
    config: Arc<Config>,
}

impl SpillwayLayer {
    /// A layer over `spillway`, with the defaults above.
    pub fn new(spillway: spillway::Spillway) -> Self {
        crate::blocking::install_default();
        Self {
            config: Arc::new(Config {
                resource: Selector::default_resource(),
                spillway,
                origin: None,
                keys: Vec::new(),
                missing: Vec::new(),
                traffic: TrafficType::Inbound,
                classify: None,
                blocked: Arc::new(default_blocked),
                shadow: false,
                admitted: RateLimitFields::None,
                route_check: None,
                claims: Default::default(),
                on_dropped: Default::default(),
            }),
        }
    }

    pub(super) fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// Every request enters the resource `name` (resolved once: no lookup per request).
    pub fn fixed_resource(self, name: &str) -> Self {
        self.with(|config| {
            config.resource = Selector::named(&config.spillway, name);
            config.route_check = None;
        })
    }

    /// The resource of each request, from its head. Keep the set of names bounded (a route
    /// template, not a raw path): past the spillway's resource cap, new names share its
    /// overflow resource.
    pub fn resource(
        self,
        name: impl Fn(&request::Parts) -> String + Send + Sync + 'static,
    ) -> Self {
        self.with(|config| {
            config.resource = Selector::Dynamic(Arc::new(name));
            config.route_check = None;
        })
    }

    /// Names each request's resource by its method and axum's matched route template, as in
    /// `GET /users/{id}`; requests no route matched enter `<METHOD> unmatched`. A `HEAD`
    /// request enters its route's `GET` resource (axum answers it with the `GET` handler, so it
    /// costs what a `GET` costs, and a limit on `GET /search` holds for both).
    ///
    /// A rule names its route as this layer does, `"GET /users/{id}"`: a rule whose resource
    /// no route produces (a typo, another method) never applies. axum does not list a router's
    /// routes, so the layer learns them from the requests: at its first request it logs a
    /// warning (through `tracing`) for each rule on a `HEAD` route or a method not in capitals,
    /// which never apply; at its first request a minute or more after that (on the spillway's
    /// clock), one for each rule of the form `METHOD /path` whose resource no request has
    /// entered, naming its id and resource.
    /// [`Spillway::unentered_rules`](spillway::Spillway::unentered_rules) lists such rules at
    /// any time; a test that drives every route can assert it is empty.
    ///
    /// # Examples
    ///
    /// ```
    /// use axum::{routing::get, Router};
    /// use spillway::flow::FlowRule;
    /// use spillway_tower::SpillwayLayer;
    /// use tower::ServiceExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let spillway = spillway::Spillway::new();
    /// spillway.load_flow_rules(vec![FlowRule::qps("search", "GET /search", 1.0)])?;
    /// let app = Router::new()
    ///     .route("/search", get(|| async { "results" }))
    ///     .layer(SpillwayLayer::new(spillway).by_route());
    /// let head = || http::Request::head("/search").body(axum::body::Body::empty()).unwrap();
    /// assert_eq!(app.clone().oneshot(head()).await?.status(), 200);
    /// // The HEAD counted against `GET /search`: the next one is refused.
    /// assert_eq!(app.oneshot(head()).await?.status(), 429);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "axum")]
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    pub fn by_route(self) -> Self {
        self.resource(|parts| {
            let route = parts
                .extensions
                .get::<axum::extract::MatchedPath>()
                .map_or("unmatched", |path| path.as_str());
            let method = if parts.method == http::Method::HEAD {
                &http::Method::GET
            } else {
                &parts.method
            };
            format!("{method} {route}")
        })
        .with(|config| config.route_check = Some(Arc::default()))
    }

    /// The origin (caller) of each request, from its head, for `limit_app` rules and
    /// per-origin statistics.
    pub fn origin(
        self,
        origin: impl Fn(&request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.with(|config| config.origin = Some(Arc::new(origin)))
    }

    /// The origin is the value of header `name`, when present and valid UTF-8.
    pub fn origin_header(self, name: &'static str) -> Self {
        self.origin(move |parts| {
            parts
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        })
    }

    /// The key at `position` of each request, for the resource's per-key rules
    /// ([`KeyedRule`](spillway::keyed::KeyedRule) with that `param`); a request without one
    /// is not limited by them.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::keyed::KeyedRule;
    /// use spillway_tower::SpillwayLayer;
    ///
    /// let spillway = spillway::Spillway::new();
    /// spillway.load_keyed_rules(vec![KeyedRule::qps("per-tenant", "api", 50.0)])?;
    /// let layer = SpillwayLayer::new(spillway)
    ///     .fixed_resource("api")
    ///     .key(0, |parts| parts.uri.host().map(str::to_owned));
    /// # let _ = layer;
    /// # Ok::<(), spillway::keyed::KeyedRuleError>(())
    /// ```
    pub fn key(
        self,
        position: usize,
        key: impl Fn(&request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.named_key(position, format!("key {position}"), key)
    }

    /// As [`key`](Self::key), naming where the key comes from (`source`) for the refusal of a
    /// request without it (see [`on_missing_key`](Self::on_missing_key)). The `key_*` methods
    /// name theirs: `header:NAME`, `query:NAME`, `peer_ip`, `path:NAME`.
    pub fn named_key(
        self,
        position: usize,
        source: impl Into<String>,
        key: impl Fn(&request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        let source: Arc<str> = Arc::from(source.into());
        self.with(|config| {
            let reader = KeyReader {
                position,
                read: Arc::new(key),
                source,
                missing: config.missing_at(position),
            };
            // The last reader given for a position is the one.
            match config.keys.iter_mut().find(|key| key.position == position) {
                Some(key) => *key = reader,
                None => config.keys.push(reader),
            }
        })
    }

    /// What a request without a value for the key at `position` gets (by default
    /// [`OnMissingKey::Pass`]: it is not limited by that key's rules), said before or after
    /// the key. A position no key is read at is not checked: say it of the position the key
    /// is given.
    ///
    /// # Examples
    ///
    /// A per-IP limit behind a server that gives no peer address (a plain `axum::serve`
    /// without `into_make_service_with_connect_info`) would limit nothing; with
    /// [`Refuse`](OnMissingKey::Refuse), every request is refused and the mistake shows at
    /// once:
    ///
    /// ```
    /// use spillway_tower::protect::OnMissingKey;
    /// use spillway_tower::{keys, SpillwayLayer};
    ///
    /// let layer = SpillwayLayer::new(spillway::Spillway::new())
    ///     .key_peer_ip(0, keys::TrustedProxies::default())
    ///     .on_missing_key(0, OnMissingKey::Refuse);
    /// # let _ = layer;
    /// ```
    pub fn on_missing_key(self, position: usize, missing: OnMissingKey) -> Self {
        self.with(|config| {
            config.missing.retain(|(at, _)| *at != position);
            config.missing.push((position, missing));
            for key in config.keys.iter_mut() {
                if key.position == position {
                    key.missing = missing;
                }
            }
        })
    }

    /// The key at `position` is the value of header `name`, as
    /// [`keys::header_value`](crate::keys::header_value) reads it (an empty value is missing;
    /// `Host` is the host name in lower case, without port). A request that gives the header
    /// on more than one line shares one key, [`keys::REPEATED`](crate::keys::REPEATED), with
    /// every such request: servers differ in which line they read, so that no line may choose
    /// the key (the `spillway` binary refuses such requests with 400 instead).
    pub fn key_header(self, position: usize, name: &'static str) -> Self {
        let header = http::HeaderName::from_bytes(name.as_bytes()).ok();
        self.named_key(position, format!("header:{name}"), move |parts| {
            let header = header.as_ref()?;
            if crate::keys::header_repeated(&parts.headers, header) {
                return Some(crate::keys::REPEATED.to_owned());
            }
            if header == http::header::HOST {
                // Over HTTP/2, the host is the URI's authority.
                return crate::keys::host_value(&parts.headers, &parts.uri);
            }
            crate::keys::header_value(&parts.headers, header)
        })
    }

    /// The key at `position` is the query parameter `name`, percent-decoded (an empty value
    /// is missing). A request that gives it more than once shares one key,
    /// [`keys::REPEATED`](crate::keys::REPEATED), with every such request, as
    /// [`key_header`](Self::key_header) does.
    pub fn key_query(self, position: usize, name: &'static str) -> Self {
        self.named_key(position, format!("query:{name}"), move |parts| {
            let query = parts.uri.query()?;
            if crate::keys::query_repeated(query, name) {
                return Some(crate::keys::REPEATED.to_owned());
            }
            crate::keys::query_value(query, name).map(|value| value.into_owned())
        })
    }

    /// The key at `position` is the client's address: the peer's (a
    /// [`PeerAddr`](crate::keys::PeerAddr) in the request's extensions, or axum's
    /// `ConnectInfo<SocketAddr>`), or, when the peer is one of `trusted` (proxies), the nearest
    /// address their forwarding header names that is not (`X-Forwarded-For` for a list of
    /// addresses; see [`TrustedProxies`](crate::keys::TrustedProxies) for `Forwarded`). The key
    /// is the network holding that address ([`PeerIpPrefixes`](crate::keys::PeerIpPrefixes)):
    /// by default an IPv4 client's address and an IPv6 client's /64, so that a client picking
    /// a new address of its /64 for each request is one key; say other lengths with
    /// [`TrustedProxies::keying`](crate::keys::TrustedProxies::keying).
    ///
    /// A request with no peer address has no key: the first such request logs a warning (a
    /// `tracing` event at `WARN`), since a server that never hands the layer the address (a
    /// plain `axum::serve(listener, app)`, without `into_make_service_with_connect_info`)
    /// would otherwise leave every request unlimited by the key's rules without a word. Say
    /// what such requests get with [`on_missing_key`](Self::on_missing_key).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway_tower::{keys, SpillwayLayer};
    ///
    /// let trusted = keys::trusted_proxies(&["10.0.0.0/8".into()]).unwrap();
    /// let layer = SpillwayLayer::new(spillway::Spillway::new()).key_peer_ip(0, trusted);
    /// # let _ = layer;
    /// ```
    pub fn key_peer_ip(
        self,
        position: usize,
        trusted: impl Into<crate::keys::TrustedProxies>,
    ) -> Self {
        let trusted = trusted.into();
        let warned = std::sync::atomic::AtomicBool::new(false);
        self.named_key(position, "peer_ip", move |parts| {
            let Some(peer) = peer_addr(parts) else {
                // Relaxed: a flag for one log line, nothing else depends on it.
                if !warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(
                        position,
                        "spillway: a request reached a per-IP key with no peer address: \
                         give the layer a PeerAddr extension, or serve axum with \
                         into_make_service_with_connect_info; until then requests without \
                         one get what on_missing_key says (by default they pass unlimited)"
                    );
                }
                return None;
            };
            Some(trusted.client_key(peer.ip(), &parts.headers))
        })
    }

    /// The key at `position` is the `{name}` segment of axum's matched route template
    /// (`/users/{id}`), as the request spells it.
    #[cfg(feature = "axum")]
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    pub fn key_path(self, position: usize, name: &'static str) -> Self {
        self.named_key(position, format!("path:{name}"), move |parts| {
            let template = parts.extensions.get::<axum::extract::MatchedPath>()?;
            let index = crate::keys::path_segment(template.as_str(), name)?;
            crate::keys::segment(parts.uri.path(), index).map(str::to_owned)
        })
    }

    /// Shadow mode for the whole layer: a request any check refuses goes on to the inner
    /// service without an entry, marked with a [`ShadowBlock`](super::ShadowBlock) in its
    /// request's and its response's extensions. Use it to try rules on live traffic before they
    /// refuse anything; to try one flow rule alone, give it
    /// [`with_shadow`](spillway::flow::FlowRule::with_shadow) instead. A request without a key
    /// that [`on_missing_key`](Self::on_missing_key) refuses is refused all the same.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::FlowRule;
    /// use spillway_tower::protect::ShadowBlock;
    /// use spillway_tower::{SpillwayLayer, TokioClock};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
    /// spillway.load_flow_rules(vec![FlowRule::qps("closed", "api", 0.0)])?;
    /// let service = SpillwayLayer::new(spillway).fixed_resource("api").shadow(true).layer(
    ///     service_fn(|request: http::Request<String>| async move {
    ///         // The inner service sees what would have happened.
    ///         assert!(request.extensions().get::<ShadowBlock>().is_some());
    ///         Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hi")))
    ///     }),
    /// );
    /// let response = service.oneshot(http::Request::new(String::new())).await?;
    /// assert_eq!(response.status(), 200);
    /// let ShadowBlock(err) = response.extensions().get::<ShadowBlock>().unwrap();
    /// assert_eq!(err.rule_id(), Some("closed"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn shadow(self, shadow: bool) -> Self {
        self.with(|config| config.shadow = shadow)
    }

    /// The traffic type of the entries (default inbound: system rules apply).
    pub fn traffic(self, traffic: TrafficType) -> Self {
        self.with(|config| config.traffic = traffic)
    }

    /// Whether a response, by its status and headers, counts as an error for statistics and
    /// breakers (default: 5xx, or a gRPC status of the server's fault,
    /// [`grpc::SERVER_FAULTS`](crate::grpc::SERVER_FAULTS)). An `Err` from the service is
    /// always an error, and so is such a gRPC status in the trailers, or none at all when the
    /// body ends. A gRPC call whose body is dropped before its trailers came (its client left)
    /// gets no verdict at all.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway_tower::SpillwayLayer;
    ///
    /// // 429s from upstream count as errors too.
    /// let layer = SpillwayLayer::new(spillway::Spillway::new())
    ///     .classify(|status, _headers| status.is_server_error() || status == 429);
    /// # let _ = layer;
    /// ```
    pub fn classify(
        self,
        is_error: impl Fn(StatusCode, &HeaderMap) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.with(|config| config.classify = Some(Arc::new(is_error)))
    }

    /// What a call counts when its response future is dropped before the service answers (its
    /// caller gave up): by default it completes as a success timed to the drop. Under an outer
    /// timeout, [`OnDropped::Fail`](super::OnDropped::Fail) counts it as a failure and an
    /// adaptive limit's drop; where the server drops requests whose clients left,
    /// [`OnDropped::Abandon`](super::OnDropped::Abandon) counts nothing but its pass.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway_tower::protect::OnDropped;
    /// use spillway_tower::SpillwayLayer;
    /// use std::time::Duration;
    ///
    /// // A call the timeout cuts short is a failure, and shrinks an adaptive limit.
    /// let layer = tower::ServiceBuilder::new()
    ///     .layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(2)))
    ///     .layer(SpillwayLayer::new(spillway::Spillway::new()).on_dropped(OnDropped::Fail));
    /// # let _ = layer;
    /// ```
    pub fn on_dropped(self, on_dropped: super::OnDropped) -> Self {
        self.with(|config| config.on_dropped = on_dropped)
    }

    /// The response of a blocked request, instead of the default.
    ///
    /// # Examples
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::{Response, StatusCode};
    /// use spillway_tower::SpillwayLayer;
    ///
    /// let layer = SpillwayLayer::new(spillway::Spillway::new()).on_blocked(|err, _request, _| {
    ///     let mut response = Response::new(Bytes::from(format!("busy: {}", err.kind())));
    ///     *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    ///     response
    /// });
    /// # let _ = layer;
    /// ```
    pub fn on_blocked(
        self,
        respond: impl Fn(&BlockError, &request::Parts, &spillway::Spillway) -> Response<Bytes>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.with(|config| config.blocked = Arc::new(respond))
    }

    /// The default blocked response, with the rate-limit fields `fields` in place of the IETF
    /// ones: `RateLimitFields::Legacy` for clients that read `X-RateLimit-*`, `Both`, or
    /// `None`. It replaces a response set with [`on_blocked`](Self::on_blocked) before it.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway_tower::protect::RateLimitFields;
    /// use spillway_tower::SpillwayLayer;
    ///
    /// let layer = SpillwayLayer::new(spillway::Spillway::new())
    ///     .ratelimit_fields(RateLimitFields::Both);
    /// # let _ = layer;
    /// ```
    pub fn ratelimit_fields(self, fields: RateLimitFields) -> Self {
        self.with(|config| {
            config.blocked =
                Arc::new(move |err, request, spillway| blocked_with(err, request, spillway, fields))
        })
    }

    /// Sends rate-limit fields on admitted responses too (off by default: `RateLimitFields::None`),
    /// so that a well-behaved client can slow down before it is refused: for each quota the
    /// request met, what is left of it just after its admission (see
    /// [`admitted_fields`](super::admitted_fields) for the fields and
    /// [`spillway::EntryBuilder::quotas`] for which rules have a quota). Not on gRPC responses
    /// (whose headers may be their trailers) nor on requests let through in shadow mode. A field
    /// the inner service already set is kept, and the layer's items are added to it (a
    /// Structured Field List may be split over several lines).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::keyed::KeyedRule;
    /// use spillway_tower::protect::RateLimitFields;
    /// use spillway_tower::{SpillwayLayer, TokioClock};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
    /// spillway.load_keyed_rules(vec![KeyedRule::per_second("api", 5).with_id("per-user")])?;
    /// let service = SpillwayLayer::new(spillway)
    ///     .fixed_resource("api")
    ///     .key_header(0, "x-user")
    ///     .ratelimit_on_admitted(RateLimitFields::Ietf)
    ///     .layer(service_fn(|_request: http::Request<String>| async {
    ///         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    ///     }));
    /// let request = http::Request::builder().header("x-user", "alice").body(String::new())?;
    /// let response = service.oneshot(request).await?;
    /// assert_eq!(response.headers()["ratelimit-policy"], r#""per-user";q=5;w=1"#);
    /// assert_eq!(response.headers()["ratelimit"], r#""per-user";r=4"#);
    /// # Ok(())
    /// # }
    /// ```
    pub fn ratelimit_on_admitted(self, fields: RateLimitFields) -> Self {
        self.with(|config| config.admitted = fields)
    }

    /// The spillway the layer uses.
    pub fn spillway(&self) -> &spillway::Spillway {
        &self.config.spillway
    }
}

impl<S> Layer<S> for SpillwayLayer {
    type Service = SpillwayService<S>;

    fn layer(&self, inner: S) -> SpillwayService<S> {
        SpillwayService::new(inner, self.config.clone())
    }
}

impl fmt::Debug for SpillwayLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpillwayLayer")
            .field("config", &self.config)
            .finish()
    }
}

/// The peer's address from the request's extensions.
fn peer_addr(parts: &request::Parts) -> Option<std::net::SocketAddr> {
    if let Some(peer) = parts.extensions.get::<crate::keys::PeerAddr>() {
        return Some(peer.0);
    }
    #[cfg(feature = "axum")]
    if let Some(info) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
    {
        return Some(info.0);
    }
    None
}
