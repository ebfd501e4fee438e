use super::body::ResponseBody;
use super::config::{ClassifyFn, Config};
use super::shadow::ShadowRefusal;
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
    /// The response future of [`Spillway`](super::Spillway): waits out a pacing rule on a
    /// tokio timer if the request was queued, or for a place in a full adaptive limit's queue
    /// (refused with the blocked response after the queue's timeout), then runs the inner
    /// service's future; or is the ready response of a blocked request.
    ///
    /// Dropped while it waits, it gives the queue slot back and leaves the adaptive queue;
    /// dropped while the service runs, the entry completes.
    pub struct ResponseFuture<F, S, R> {
        #[pin]
        state: State<F, S, R>,
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
        },
        Blocked {
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
}

/// A queued call: the wait, the call to make after it, and what answers a refusal.
struct Waiting<S, R> {
    admitting: Admitting,
    call: Option<(S, R)>,
    config: Arc<Config>,
}

impl<F, S, R> ResponseFuture<F, S, R> {
    pub(super) fn calling(future: F, entry: OwnedEntry, classify: Option<Arc<ClassifyFn>>) -> Self {
        Self {
            state: State::Calling {
                future,
                entry: Some(entry),
                classify,
            },
        }
    }

    pub(super) fn waiting(
        admission: OwnedAdmission,
        service: S,
        request: R,
        config: Arc<Config>,
    ) -> Self {
        Self {
            state: State::Waiting {
                waiting: Box::new(Waiting {
                    admitting: Box::pin(crate::admit_owned(admission)),
                    call: Some((service, request)),
                    config,
                }),
            },
        }
    }

    pub(super) fn readying(
        ready: Pin<Box<dyn Future<Output = ()> + Send>>,
        service: S,
        request: R,
        config: Arc<Config>,
    ) -> Self {
        Self {
            state: State::Readying {
                readying: Box::new(Readying {
                    ready,
                    call: Some((service, request)),
                    config,
                }),
            },
        }
    }

    pub(super) fn blocked(response: Response<bytes::Bytes>) -> Self {
        Self {
            state: State::Blocked {
                response: Some(Box::new(response)),
            },
        }
    }
}

impl<F, S, ReqB, ResB, E> Future for ResponseFuture<F, S, http::Request<ReqB>>
where
    S: Service<http::Request<ReqB>, Response = Response<ResB>, Error = E, Future = F>,
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
                    let admission = super::admit::admit(&config, head);
                    let request = http::Request::from_parts(parts, body);
                    let next = match admission {
                        Ok(OwnedAdmission::Ready(entry)) => {
                            let mut request = request;
                            ShadowRefusal::mark(&entry, request.extensions_mut());
                            State::Calling {
                                future: service.call(request),
                                entry: Some(entry),
                                classify: config.classify.clone(),
                            }
                        }
                        Ok(admission) => State::Waiting {
                            waiting: Box::new(Waiting {
                                admitting: Box::pin(crate::admit_owned(admission)),
                                call: Some((service, request)),
                                config,
                            }),
                        },
                        Err(err) => {
                            let (parts, _body) = request.into_parts();
                            let response = (config.blocked)(&err, &parts, &config.spillway);
                            State::Blocked {
                                response: Some(Box::new(response)),
                            }
                        }
                    };
                    this.state.set(next);
                }
                StateProj::Waiting { waiting } => {
                    let admitted = ready!(waiting.admitting.as_mut().poll(cx));
                    let Some((mut service, request)) = waiting.call.take() else {
                        unreachable!("a waiting state is left as soon as its wait ends");
                    };
                    let entry = match admitted {
                        Ok(entry) => entry,
                        Err(err) => {
                            let (parts, _body) = request.into_parts();
                            let config = &waiting.config;
                            let response = (config.blocked)(&err, &parts, &config.spillway);
                            this.state.set(State::Blocked {
                                response: Some(Box::new(response)),
                            });
                            continue;
                        }
                    };
                    let mut request = request;
                    ShadowRefusal::mark(&entry, request.extensions_mut());
                    let future = service.call(request);
                    let classify = waiting.config.classify.clone();
                    this.state.set(State::Calling {
                        future,
                        entry: Some(entry),
                        classify,
                    });
                }
                StateProj::Calling {
                    future,
                    entry,
                    classify,
                } => {
                    let result = ready!(future.poll(cx));
                    let Some(mut entry) = entry.take() else {
                        unreachable!("a calling state ends once");
                    };
                    return Poll::Ready(match result {
                        Ok(response) => {
                            let (status, headers) = (response.status(), response.headers());
                            // Read once: the default classification needs it too.
                            let grpc = is_grpc(headers);
                            let error = match classify {
                                Some(classify) => classify(status, headers),
                                None => default_is_error(status, headers, grpc),
                            };
                            entry.set_error(error);
                            let mut response = response;
                            ShadowRefusal::mark(&entry, response.extensions_mut());
                            Ok(response.map(|body| ResponseBody::inner(body, entry, grpc)))
                        }
                        Err(err) => {
                            entry.mark_error();
                            Err(err)
                        }
                    });
                }
                StateProj::Blocked { response } => {
                    let Some(response) = response.take() else {
                        unreachable!("a blocked response is returned once");
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
            State::Blocked { .. } => "blocked",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
