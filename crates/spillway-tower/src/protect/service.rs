use super::admit::{admit, unready};
use super::body::ResponseBody;
use super::config::Config;
use super::decide::decide;
use super::future::ResponseFuture;
use http::{Request, Response};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::Service;

/// A service whose requests go through spillway (made by [`SpillwayLayer`](super::SpillwayLayer)).
/// It was called `Spillway`, the name of the core's [`spillway::Spillway`]; that name stays as a
/// deprecated alias.
///
/// `poll_ready` is the inner service's; the spillway entry is taken in `call`, so an idle
/// connection holds nothing. Clones share the spillway and its limits.
#[derive(Clone)]
pub struct SpillwayService<S> {
    inner: S,
    config: Arc<Config>,
}

/// The former name of [`SpillwayService`].
#[deprecated(
    since = "0.2.0",
    note = "renamed `SpillwayService` (`Spillway` is the core's engine)"
)]
pub type Spillway<S> = SpillwayService<S>;

impl<S> SpillwayService<S> {
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

impl<S, ReqB, ResB> Service<Request<ReqB>> for SpillwayService<S>
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
        let config = &self.config;
        if let Some(check) = &config.route_check {
            check.on_request(&config.spillway);
        }
        // The head is split off only when a closure reads it. Otherwise the request goes to the
        // inner service without a detour: each move of it is a copy of a few hundred bytes.
        let (admission, request) = if config.reads_request() {
            let (parts, body) = request.into_parts();
            if let Some(resource) = unready(config, Some(&parts)) {
                let request = Request::from_parts(parts, body);
                return ResponseFuture::readying(resource, &mut self.inner, request, config);
            }
            let admission = admit(config, Some(&parts));
            (admission, Request::from_parts(parts, body))
        } else {
            if let Some(resource) = unready(config, None) {
                return ResponseFuture::readying(resource, &mut self.inner, request, config);
            }
            (admit(config, None), request)
        };
        let next = decide(config, admission, request, true);
        ResponseFuture::start(next, &mut self.inner, config)
    }
}

impl<S: fmt::Debug> fmt::Debug for SpillwayService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpillwayService")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}
