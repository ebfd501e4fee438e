use super::admit::admit;
use super::body::{Grpc, ResponseBody};
use super::caller_wait::CallerWait;
use super::config::{ClassifyFn, Config};
use super::decide::{decide, Next};
use super::shadow::{ShadowBlock, ShadowRefusal};
use super::verdict::Verdict;
use crate::grpc::{is_error as default_is_error, is_grpc};
use http::Response;
use pin_project_lite::pin_project;
use spillway::{BlockError, OwnedAdmission, OwnedEntry};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tower::Service;

pin_project! {
    /// The response future of [`SpillwayService`](super::SpillwayService): waits out a pacing rule on a
    /// tokio timer if the request was queued, or for a place in a full adaptive limit's queue
    /// (refused with the blocked response after the queue's timeout), or for a cluster lease's
    /// refill, then runs the inner service's future; or is the ready response of a refused
    /// request.
    ///
    /// Dropped while it waits, it gives the queue slot back and leaves the adaptive queue;
    /// dropped while the service runs, the entry ends as
    /// [`on_dropped`](super::SpillwayLayer::on_dropped) says (by default it completes).
    pub struct ResponseFuture<F, S, R> {
        #[pin]
        state: State<F, S, R>,
    }

    impl<F, S, R> PinnedDrop for ResponseFuture<F, S, R> {
        fn drop(this: Pin<&mut Self>) {
            // An entry still held: the service had not answered.
            if let StateProj::Calling { entry: Some(entry), on_dropped, .. } =
                this.project().state.project()
            {
                on_dropped.mark(entry);
            }
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, R> {
        Readying {
            // Boxed whole, as the waiting state: rare, and large.
            readying: Box<Readying<S, R>>,
        },
        Waiting {
            // Boxed whole: the rare waiting state holds the request and a service, and every
            // response future (moved a few times per request) would otherwise be that large.
            waiting: Box<Waiting<S, R>>,
        },
        Calling {
            #[pin]
            future: F,
            entry: Option<OwnedEntry>,
            classify: Option<Arc<ClassifyFn>>,
            // Shadow mode's refusal of a request let through (boxed: rare).
            shadowed: Option<Box<BlockError>>,
            // The rate-limit fields of an admitted response, when the layer sends them.
            fields: Option<Box<http::HeaderMap>>,
            on_dropped: super::OnDropped,
        },
        Answered {
            // Boxed, likewise: a response head is larger than the calling state.
            response: Option<Box<Response<bytes::Bytes>>>,
        },
    }
}

/// The wait of a queued admission ([`admit_owned`](crate::admit_owned)).
type Admitting = Pin<Box<dyn Future<Output = Result<OwnedEntry, BlockError>> + Send>>;

/// A call that waits for its resource's cluster rules to be ready (a lease's refill) before it
/// enters.
struct Readying<S, R> {
    ready: Pin<Box<dyn Future<Output = ()> + Send>>,
    call: Option<(S, R)>,
    config: Arc<Config>,
    /// Whether a refusal for want of a lease after this wait may wait once more.
    may_wait: bool,
}

/// A queued call: the wait, the call to make after it, and what answers a refusal.
struct Waiting<S, R> {
    admitting: Admitting,
    call: Option<(S, R)>,
    config: Arc<Config>,
}

/// `service`, leaving a clone in its place (a service that waits with its request is the
/// one that was ready).
fn take<S: Clone>(service: &mut S) -> S {
    let fresh = service.clone();
    std::mem::replace(service, fresh)
}

impl<F, S, ReqB> ResponseFuture<F, S, http::Request<ReqB>>
where
    S: Service<http::Request<ReqB>, Future = F> + Clone,
{
    /// The future that carries out `next` with `service`.
    pub(super) fn start(
        next: Next<http::Request<ReqB>>,
        service: &mut S,
        config: &Arc<Config>,
    ) -> Self {
        Self {
            state: Self::state_of(next, service, config),
        }
    }

    /// The state that carries out `next` with `service`.
    fn state_of(
        next: Next<http::Request<ReqB>>,
        service: &mut S,
        config: &Arc<Config>,
    ) -> State<F, S, http::Request<ReqB>> {
        match next {
            Next::Call {
                request,
                entry,
                shadowed,
                fields,
            } => State::Calling {
                future: service.call(request),
                entry,
                classify: config.classify.clone(),
                shadowed,
                fields,
                on_dropped: config.on_dropped,
            },
            Next::Wait(admission, request) => State::Waiting {
                waiting: Box::new(Waiting {
                    admitting: Box::pin(crate::admit_owned(admission)),
                    call: Some((take(service), request)),
                    config: Arc::clone(config),
                }),
            },
            Next::Ready(resource, request) => {
                Self::readying_state(resource, take(service), request, Arc::clone(config), false)
            }
            Next::Answer(response) => State::Answered {
                response: Some(Box::new(response)),
            },
        }
    }

    /// Waits for `resource`'s cluster rules to be ready, then enters and calls.
    pub(super) fn readying(
        resource: String,
        service: &mut S,
        request: http::Request<ReqB>,
        config: &Arc<Config>,
    ) -> Self {
        Self {
            state: Self::readying_state(resource, take(service), request, Arc::clone(config), true),
        }
    }

    fn readying_state(
        resource: String,
        service: S,
        request: http::Request<ReqB>,
        config: Arc<Config>,
        may_wait: bool,
    ) -> State<F, S, http::Request<ReqB>> {
        let spillway = config.spillway.clone();
        let ready = Box::pin(async move { spillway.cluster_ready(&resource, 1).await });
        State::Readying {
            readying: Box::new(Readying {
                ready,
                call: Some((service, request)),
                config,
                may_wait,
            }),
        }
    }
}

impl<F, S, ReqB, ResB, E> Future for ResponseFuture<F, S, http::Request<ReqB>>
where
    S: Service<http::Request<ReqB>, Response = Response<ResB>, Error = E, Future = F> + Clone,
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<ResponseBody<ResB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Readying { readying } => {
                    ready!(readying.ready.as_mut().poll(cx));
                    let Some((mut service, request)) = readying.call.take() else {
                        unreachable!("a readying state is left as soon as its wait ends");
                    };
                    let config = Arc::clone(&readying.config);
                    // Entered now, as `call` enters a request that needs no wait.
                    let (parts, body) = request.into_parts();
                    let head = config.reads_request().then_some(&parts);
                    let admission = admit(&config, head);
                    let request = http::Request::from_parts(parts, body);
                    let next = decide(&config, admission, request, readying.may_wait);
                    let next = ResponseFuture::state_of(next, &mut service, &config);
                    this.state.set(next);
                }
                StateProj::Waiting { waiting } => {
                    let admitted = ready!(waiting.admitting.as_mut().poll(cx));
                    let Some((mut service, request)) = waiting.call.take() else {
                        unreachable!("a waiting state is left as soon as its wait ends");
                    };
                    let admission = admitted
                        .map(OwnedAdmission::Ready)
                        .map_err(super::admit::Refused::Blocked);
                    let config = Arc::clone(&waiting.config);
                    let next = decide(&config, admission, request, false);
                    let next = ResponseFuture::state_of(next, &mut service, &config);
                    this.state.set(next);
                }
                StateProj::Calling {
                    future,
                    entry,
                    classify,
                    shadowed,
                    fields,
                    ..
                } => {
                    let result = ready!(future.poll(cx));
                    let mut entry = entry.take();
                    return Poll::Ready(match result {
                        Ok(mut response) => {
                            // Read once: the default classification needs it too.
                            let grpc = is_grpc(response.headers());
                            let grpc_state = Grpc::of(grpc, response.headers());
                            if let Some(entry) = entry.as_mut() {
                                match response.extensions().get::<Verdict>() {
                                    Some(verdict) => verdict.apply(entry),
                                    None => {
                                        let (status, headers) =
                                            (response.status(), response.headers());
                                        entry.set_error(match classify {
                                            Some(classify) => classify(status, headers),
                                            None => default_is_error(status, headers, grpc),
                                        });
                                    }
                                }
                                ShadowRefusal::mark(entry, response.extensions_mut());
                                if let Some(CallerWait(time)) = response.extensions().get() {
                                    entry.add_caller_wait(*time);
                                }
                                // The head tells whether the call failed, unless it is a
                                // gRPC call without its status in the head (over HTTP/2 it
                                // comes in the trailers; gRPC-Web's, in the body, may come in
                                // trailers too): a half-open breaker's probe is decided now,
                                // however long the body takes.
                                if !grpc || response.headers().contains_key("grpc-status") {
                                    entry.answered();
                                }
                            }
                            if let Some(err) = shadowed.take() {
                                response.extensions_mut().insert(ShadowBlock(*err));
                            }
                            if let Some(fields) = fields.take() {
                                super::fields::add_admitted(response.headers_mut(), &fields);
                            }
                            Ok(response.map(|body| ResponseBody::inner(body, entry, grpc_state)))
                        }
                        Err(err) => {
                            if let Some(entry) = entry.as_mut() {
                                entry.mark_error();
                            }
                            Err(err)
                        }
                    });
                }
                StateProj::Answered { response } => {
                    let Some(response) = response.take() else {
                        unreachable!("an answer is returned once");
                    };
                    return Poll::Ready(Ok((*response).map(ResponseBody::blocked)));
                }
            }
        }
    }
}

impl<F, S, R> fmt::Debug for ResponseFuture<F, S, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Readying { .. } => "readying",
            State::Waiting { .. } => "waiting",
            State::Calling { .. } => "calling",
            State::Answered { .. } => "answered",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
