use super::admit::{admit, unready};
use super::body::ResponseBody;
use super::config::Config;
use super::future::ResponseFuture;
use super::shadow::ShadowRefusal;
use http::{Request, Response};
use spillway::{BlockError, OwnedAdmission};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::Service;

/// A service whose requests go through spillway (made by [`SpillwayLayer`](super::SpillwayLayer)).
///
/// `poll_ready` is the inner service's; the spillway entry is taken in `call`, so an idle
/// connection holds nothing. Clones share the spillway and its limits.
#[derive(Clone)]
pub struct Spillway<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> Spillway<S> {
    pub(super) fn new(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The spillway requests go through.
    pub fn spillway(&self) -> &spillway::Spillway {
        &self.config.spillway
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Spillway<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S, Request<ReqB>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // The head is split off only when a closure reads it. Otherwise the request goes to the
        // inner service without a detour: each move of it is a copy of a few hundred bytes.
        if self.config.reads_request() {
            let (parts, body) = request.into_parts();
            if let Some(resource) = unready(&self.config, Some(&parts)) {
                return self.readying(resource, Request::from_parts(parts, body));
            }
            let admission = admit(&self.config, Some(&parts));
            return self.proceed(Request::from_parts(parts, body), admission);
        }
        if let Some(resource) = unready(&self.config, None) {
            return self.readying(resource, request);
        }
        let admission = admit(&self.config, None);
        self.proceed(request, admission)
    }
}

impl<S> Spillway<S> {
    /// Waits for `resource`'s cluster rules to be ready, then admits and calls (the ready
    /// service waits with the request; this one takes its place).
    fn readying<ReqB, ResB>(
        &mut self,
        resource: String,
        request: Request<ReqB>,
    ) -> ResponseFuture<S::Future, S, Request<ReqB>>
    where
        S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    {
        let spillway = self.config.spillway.clone();
        let ready = Box::pin(async move { spillway.cluster_ready(&resource, 1).await });
        let fresh = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, fresh);
        ResponseFuture::readying(ready, service, request, Arc::clone(&self.config))
    }

    /// Calls the inner service, queues the call or answers the refusal.
    #[inline]
    fn proceed<ReqB, ResB>(
        &mut self,
        request: Request<ReqB>,
        admission: Result<OwnedAdmission, BlockError>,
    ) -> ResponseFuture<S::Future, S, Request<ReqB>>
    where
        S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    {
        match admission {
            Ok(OwnedAdmission::Ready(entry)) => {
                let mut request = request;
                ShadowRefusal::mark(&entry, request.extensions_mut());
                let future = self.inner.call(request);
                ResponseFuture::calling(future, entry, self.config.classify.clone())
            }
            Ok(admission) => {
                // Queued: the ready service waits with the request; this one takes its place.
                let fresh = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, fresh);
                ResponseFuture::waiting(admission, ready, request, Arc::clone(&self.config))
            }
            Err(err) => {
                let (parts, _body) = request.into_parts();
                let response = (self.config.blocked)(&err, &parts, &self.config.spillway);
                ResponseFuture::blocked(response)
            }
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for Spillway<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spillway")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}
