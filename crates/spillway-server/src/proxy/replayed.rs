//! A route's stack around a recorded response, for `spillway replay`: the same host and path
//! checks, router, key reading, claims, Dubbo limits and spillway layer as `spillway serve`,
//! with the innermost service answering what the log says the upstream answered.

use super::forward::Failure;
use super::forwarder::{self, Deadline};
use super::front::{front, Fronted};
use super::shadowed::Shadowed;
use super::stack::{build, Stack};
use super::table::Table;
use super::Proxy;
use crate::claims::Claim;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full};
use spillway_tower::protect::{Blocked, MissingKey};
use std::convert::Infallible;
use std::future::{ready, Ready};
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Service, ServiceExt};

/// What the log recorded for a request: its status and how long it took (set on the innermost
/// service that answers it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recording {
    status: StatusCode,
    took: Duration,
}

/// How long an admitted call holds its places: what it took, or less where `spillway serve`
/// would have stopped waiting for it (its deadline, the upstream timeout). A response
/// extension.
#[derive(Debug, Clone, Copy)]
struct HoldFor(Duration);

/// The innermost service of a replayed route: as the forwarder, it applies the request's
/// deadline and the upstream timeout (in the same code), then answers the recorded status with
/// an empty body, or what the proxy answers when the upstream takes longer than it waits; and
/// it marks the shadow refusal the request passed with, if any.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    resource: Arc<str>,
    /// The listener's `upstream_timeout`.
    timeout: Duration,
    /// What the log recorded for the request this clone answers.
    recording: Recording,
}

/// The forwarder's body, as a replay's: its text (never an upstream's, none is called).
fn text_of(response: Response<super::forwarder::ForwardBody>) -> Response<Full<Bytes>> {
    response.map(|body| match body {
        Either::Right(text) => text,
        Either::Left(_) => Full::default(),
    })
}

impl<B> Service<Request<B>> for Recorded {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let Recording { status, took } = self.recording;
        let grpc = spillway_tower::grpc::is_grpc(request.headers());
        let mut upstream = self.timeout;
        let mut missed = None;
        if let Some(claim) = request.extensions_mut().remove::<Claim>() {
            match forwarder::apply(&claim, &self.resource, &mut request, &mut upstream) {
                Deadline::Passed(err) => {
                    let mut response = text_of(forwarder::no_time_left(err, grpc));
                    response.extensions_mut().insert(HoldFor(Duration::ZERO));
                    return ready(Ok(response));
                }
                Deadline::Bounds(err) => missed = Some((err, claim.configured)),
                Deadline::None => {}
            }
        }
        let shadowed = Shadowed::first(request.extensions());
        let mut response = if took > upstream {
            // `spillway serve` would have stopped waiting: its deadline's answer, or the
            // upstream timeout's.
            let stopped = match &missed {
                Some((err, drop)) => forwarder::ran_out(err, grpc, *drop),
                None => forwarder::failed(Failure::Upstream(StatusCode::GATEWAY_TIMEOUT)),
            };
            let mut response = text_of(stopped);
            response.extensions_mut().insert(HoldFor(upstream));
            response
        } else {
            let mut response = Response::new(Full::default());
            *response.status_mut() = status;
            response.extensions_mut().insert(HoldFor(took));
            response
        };
        if let Some(shadowed) = shadowed {
            response.extensions_mut().insert(shadowed);
        }
        ready(Ok(response))
    }
}

/// What became of one replayed request.
#[derive(Debug)]
pub(crate) enum Replayed {
    /// Answered before any rule: `bad_host`, `bad_header`, `bad_path`, `repeated_key` or `no_route`, on the resource.
    Early {
        resource: Arc<str>,
        outcome: &'static str,
    },
    /// Refused by a rule (`None`: a limit with no id, named by its kind) of `kind`; for a
    /// per-key rule, the key it refused.
    Refused {
        resource: Arc<str>,
        rule: Option<String>,
        kind: &'static str,
        key: Option<String>,
    },
    /// Refused for want of a per-key rule's key.
    MissingKey { resource: Arc<str> },
    /// Admitted: its places are held by `held` until the recorded end, when
    /// [`Held::finish`] gives them back with the recorded status.
    Admitted {
        resource: Arc<str>,
        shadowed: Option<Shadowed>,
        held: Held,
    },
}

/// An admitted request's response, holding its entry and places (boxed: a replay holds
/// thousands, and most of what it keeps of each is this).
#[derive(Debug)]
pub(crate) struct Held(
    Box<Response<super::limits::LimitsBody<spillway_tower::protect::ResponseBody<Full<Bytes>>>>>,
);

impl Held {
    /// How long it holds its places from its admission: what it took, or less where
    /// `spillway serve` would have stopped waiting for it.
    pub(crate) fn hold(&self) -> Duration {
        self.0
            .extensions()
            .get::<HoldFor>()
            .map_or(Duration::ZERO, |hold| hold.0)
    }

    /// Ends the call: its body read to the end, so that its exit counts the recorded status.
    pub(crate) async fn finish(self) {
        let _ = self.0.into_body().collect().await;
    }
}

/// The stacks of a configuration's routes around [`Recorded`].
pub(crate) struct ReplayStacks {
    table: Arc<Table>,
    /// By route, in the table's order, then the default route's (`None`: no upstream).
    stacks: Vec<Option<Stack<Recorded>>>,
    /// Their resources, in the same order (shared with each request's outcome).
    resources: Vec<Arc<str>>,
}

impl ReplayStacks {
    /// The stacks of `proxy`'s routes now.
    pub(crate) fn new(proxy: &Proxy) -> Self {
        let table = proxy.inner.table.load_full();
        let shared = &proxy.inner.shared;
        let routes = table.routes.iter().chain(std::iter::once(&table.default));
        let resources = (table.routes.iter().chain(std::iter::once(&table.default)))
            .map(|route| Arc::from(route.resource.as_str()))
            .collect();
        let stacks = routes
            .map(|route| {
                route.upstream.as_ref()?;
                let timeout = table.timeout;
                let recorded = |tally: Arc<super::tally::Tally>| Recorded {
                    resource: Arc::from(tally.resource()),
                    timeout,
                    recording: Recording {
                        status: StatusCode::OK,
                        took: Duration::ZERO,
                    },
                };
                // No one reads a refusal's answer: none is written.
                let spec = super::stack::RouteSpec {
                    answers: false,
                    ..route.spec(&table, shared)
                };
                Some(build(spec, shared, recorded))
            })
            .collect();
        Self {
            table,
            stacks,
            resources,
        }
    }

    /// Puts `request` from `peer`, arrived now, through its route's stack, as `spillway serve`
    /// would, the upstream answering `status` after `took`.
    pub(crate) async fn replay<B>(
        &self,
        request: Request<B>,
        peer: SocketAddr,
        status: StatusCode,
        took: Duration,
    ) -> Replayed
    where
        B: Send + 'static,
    {
        let table = &self.table;
        let (fronted, mut request) = match front(table, request, peer, Instant::now()) {
            Ok(fronted) => fronted,
            Err(early) => {
                let resource = (self.resources.iter())
                    .find(|resource| &***resource == early.resource)
                    .cloned()
                    .unwrap_or_else(|| Arc::from(early.resource));
                return Replayed::Early {
                    resource,
                    outcome: early.outcome,
                };
            }
        };
        let Fronted { route, index, .. } = fronted;
        let index = index.unwrap_or(table.routes.len());
        let resource = (self.resources.get(index).cloned())
            .unwrap_or_else(|| Arc::from(route.resource.as_str()));
        let Some(Some(stack)) = self.stacks.get(index) else {
            return Replayed::Early {
                resource,
                outcome: "no_route",
            };
        };
        // The keys its per-key rules read, to name the one a refusal was for.
        let keys = if route.keys.is_empty() {
            Vec::new()
        } else {
            let (parts, body) = request.into_parts();
            let keys = table.key_values(route, &parts);
            request = Request::from_parts(parts, body);
            keys
        };
        let mut stack = stack.clone();
        stack.get_mut().get_mut().recording = Recording { status, took };
        let response = match stack.oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let extensions = response.extensions();
        if let Some(Blocked(err)) = extensions.get::<Blocked>() {
            let rule = err.rule_id();
            let key = rule.and_then(|rule| table.key_of(route, rule, &keys));
            return Replayed::Refused {
                resource,
                rule: rule.map(str::to_owned),
                kind: err.kind().as_str(),
                key,
            };
        }
        if extensions.get::<MissingKey>().is_some() {
            return Replayed::MissingKey { resource };
        }
        let shadowed = extensions.get::<Shadowed>().cloned();
        Replayed::Admitted {
            resource,
            shadowed,
            held: Held(Box::new(response)),
        }
    }
}
