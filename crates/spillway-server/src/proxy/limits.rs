//! A route's limits outside spillway's rules, checked before its entry: Dubbo's `tps`,
//! `executes` and `actives`, then the strict cluster rules (one Redis call each). A refusal
//! here never counts as a pass. The places taken are held by the response body until it ends.

use super::shadowed::ShadowLimit;
use super::tally::Tally;
use crate::claims::Claim;
use crate::cluster::ClusterLimits;
use bytes::Bytes;
use futures_util::future::{Either, MapOk};
use futures_util::TryFutureExt;
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame, SizeHint};
use spillway::dubbo::TpsLimiter;
use spillway::dubbo::{ActiveLimiter, ActivePermit, ExecuteLimiter, ExecutePermit, TpsConfig};
use spillway::BlockError;
use spillway_tower::protect::Blocked;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Service, ServiceExt};

/// The Dubbo limiters every route shares (kept across reloads).
#[derive(Debug)]
pub(crate) struct Dubbo {
    pub(crate) tps: TpsLimiter,
    pub(crate) executes: ExecuteLimiter,
    pub(crate) actives: ActiveLimiter,
}

impl Default for Dubbo {
    fn default() -> Self {
        Self {
            // On tokio's clock, as the spillway in the tests and the actives' waits are.
            tps: TpsLimiter::new_with_clock(spillway_tower::TokioClock::new()),
            executes: ExecuteLimiter::new(),
            // Waits run on tokio timers: time them on tokio's clock too.
            actives: ActiveLimiter::new_with_clock(spillway_tower::TokioClock::new()),
        }
    }
}

/// Builds the response of a request a limit refused, from the refusal, the request's headers
/// and what it claims (the refusal names its criticality).
pub(crate) type RefusalFn =
    dyn Fn(&BlockError, &HeaderMap, Option<&Claim>) -> Response<Bytes> + Send + Sync;

/// One route's limits.
pub(crate) struct RouteLimits {
    pub(crate) resource: String,
    pub(crate) tps: Option<TpsConfig>,
    pub(crate) executes: Option<u32>,
    pub(crate) actives: Option<(u32, Duration)>,
    pub(crate) dubbo: Arc<Dubbo>,
    pub(crate) cluster: Arc<ClusterLimits>,
    pub(crate) spillway: spillway::Spillway,
    /// Shadow mode: a refusal is counted and logged, and the request goes on.
    pub(crate) shadow: bool,
    pub(crate) refusal: Arc<RefusalFn>,
    pub(crate) tally: Arc<Tally>,
}

impl std::fmt::Debug for RouteLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteLimits")
            .field("resource", &self.resource)
            .field("tps", &self.tps)
            .field("executes", &self.executes)
            .field("actives", &self.actives)
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
    }
}

/// Places a request holds under Dubbo limits, given back with the body.
#[derive(Debug, Default)]
pub(crate) struct Permits {
    execute: Option<ExecutePermit>,
    active: Option<ActivePermit>,
}

impl RouteLimits {
    /// Whether a request may need a check here (the strict cluster rules change while the
    /// proxy runs: looked up per request).
    fn any(&self) -> bool {
        self.tps.is_some()
            || self.executes.is_some()
            || self.actives.is_some()
            || self.cluster.strict_for(&self.resource).is_some()
    }

    /// Checks each limit in turn, taking its place into `permits`: the response of the first
    /// that refuses; in shadow mode, none, and the first refusal it let through.
    async fn check(
        &self,
        headers: &HeaderMap,
        claim: Option<&Claim>,
        permits: &mut Permits,
    ) -> Result<Option<BlockError>, Box<Response<Bytes>>> {
        let mut shadowed = None;
        let dubbo = &self.dubbo;
        let resource = &self.resource;
        if let Some(tps) = self.tps {
            if let Err(err) = dubbo.tps.try_acquire(resource, tps) {
                self.refused(err, headers, claim, &mut shadowed)?;
            }
        }
        if let Some(max) = self.executes {
            match dubbo.executes.try_acquire(resource, max) {
                Ok(permit) => permits.execute = Some(permit),
                Err(err) => self.refused(err, headers, claim, &mut shadowed)?,
            }
        }
        if let Some((max, timeout)) = self.actives {
            // A request waits for a place no longer than it has left.
            let left = claim.and_then(|claim| claim.left(tokio::time::Instant::now()));
            let timeout = left.map_or(timeout, |left| timeout.min(left));
            let permit = match dubbo.actives.key(resource) {
                Ok(key) => spillway_tower::acquire_active(&key, max, timeout).await,
                Err(err) => Err(err),
            };
            match permit {
                Ok(permit) => permits.active = Some(permit),
                Err(err) => self.refused(err, headers, claim, &mut shadowed)?,
            }
        }
        if let Some(strict) = self.cluster.strict_for(resource) {
            for rule in strict.iter() {
                if let Err(err) = rule.check(resource).await {
                    self.refused(err, headers, claim, &mut shadowed)?;
                }
            }
        }
        Ok(shadowed)
    }

    /// A refusal: counted as a block on the resource, as a rule's is; answered, marked with
    /// it; or in shadow mode, counted and logged only (and kept in `shadowed` if the first).
    fn refused(
        &self,
        err: BlockError,
        headers: &HeaderMap,
        claim: Option<&Claim>,
        shadowed: &mut Option<BlockError>,
    ) -> Result<(), Box<Response<Bytes>>> {
        if let Ok(handle) = self.spillway.resource(&self.resource) {
            handle.record_block(1);
        }
        if self.shadow {
            self.tally.shadowed(err.kind().as_str(), &err.to_string());
            shadowed.get_or_insert(err);
            return Ok(());
        }
        let mut response = (self.refusal)(&err, headers, claim);
        response.extensions_mut().insert(Blocked(err));
        Err(Box::new(response))
    }
}

/// The service that checks a route's limits before its inner service (the spillway layer).
#[derive(Debug, Clone)]
pub(crate) struct Limits<S> {
    inner: S,
    limits: Arc<RouteLimits>,
}

impl<S> Limits<S> {
    pub(crate) fn new(inner: S, limits: RouteLimits) -> Self {
        Self {
            inner,
            limits: Arc::new(limits),
        }
    }

    /// The inner service, mutably.
    pub(crate) fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

type Checked<B, E> = Pin<Box<dyn Future<Output = Result<Response<LimitsBody<B>>, E>> + Send>>;
type Direct<F, B> = MapOk<F, fn(Response<B>) -> Response<LimitsBody<B>>>;

impl<S, ReqB, B> Service<Request<ReqB>> for Limits<S>
where
    S: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    ReqB: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<LimitsBody<B>>;
    type Error = S::Error;
    type Future = Either<Direct<S::Future, B>, Checked<B, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        if !self.limits.any() {
            let holding: fn(Response<B>) -> Response<LimitsBody<B>> =
                |response| response.map(|body| LimitsBody::holding(body, Permits::default()));
            return Either::Left(self.inner.call(request).map_ok(holding));
        }
        // The ready service goes with the request; this one takes its place.
        let fresh = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, fresh);
        let limits = Arc::clone(&self.limits);
        Either::Right(Box::pin(async move {
            let mut permits = Permits::default();
            let mut request = request;
            let claim = request.extensions().get::<Claim>();
            match limits.check(request.headers(), claim, &mut permits).await {
                Ok(None) => {}
                Ok(Some(shadowed)) => {
                    request.extensions_mut().insert(ShadowLimit(shadowed));
                }
                Err(refusal) => return Ok((*refusal).map(LimitsBody::text)),
            }
            let response = service.oneshot(request).await?;
            Ok(response.map(|body| LimitsBody::holding(body, permits)))
        }))
    }
}

/// A response body through [`Limits`]: the inner service's, holding the request's places
/// until it ends, or a refusal's text.
#[derive(Debug)]
pub(crate) enum LimitsBody<B> {
    Inner {
        body: B,
        /// Dropped (giving the places back) when the body ends.
        permits: Option<Permits>,
    },
    Text(Option<Bytes>),
}

impl<B> LimitsBody<B> {
    fn holding(body: B, permits: Permits) -> Self {
        LimitsBody::Inner {
            body,
            permits: Some(permits),
        }
    }

    fn text(text: Bytes) -> Self {
        LimitsBody::Text((!text.is_empty()).then_some(text))
    }

    /// The inner service's body, if it answered.
    pub(crate) fn inner_mut(&mut self) -> Option<&mut B> {
        match self {
            LimitsBody::Inner { body, .. } => Some(body),
            LimitsBody::Text(_) => None,
        }
    }
}

impl<B> Body for LimitsBody<B>
where
    B: Body + Unpin,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.get_mut() {
            LimitsBody::Inner { body, permits } => {
                let polled = Pin::new(body).poll_frame(cx);
                if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
                    drop(permits.take());
                }
                polled
            }
            LimitsBody::Text(text) => Poll::Ready(text.take().map(|t| Ok(Frame::data(t.into())))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            LimitsBody::Inner { body, .. } => body.is_end_stream(),
            LimitsBody::Text(text) => text.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            LimitsBody::Inner { body, .. } => body.size_hint(),
            LimitsBody::Text(text) => {
                SizeHint::with_exact(text.as_ref().map_or(0, |t| t.len() as u64))
            }
        }
    }
}
