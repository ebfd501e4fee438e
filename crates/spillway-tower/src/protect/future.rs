use super::body::ResponseBody;
use super::config::{is_grpc, Config};
use http::Response;
use pin_project_lite::pin_project;
use spillway::{OwnedEntry, OwnedPending};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::time::Sleep;
use tower::Service;

pin_project! {
    /// The response future of [`Spillway`](super::Spillway): waits out a pacing rule on a
    /// tokio timer if the request was queued, then runs the inner service's future, or is the
    /// ready response of a blocked request.
    ///
    /// Dropped while it waits, it gives the queue slot back; dropped while the service runs,
    /// the entry completes.
    pub struct ResponseFuture<F, S, R> {
        #[pin]
        state: State<F, S, R>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, R> {
        Waiting {
            #[pin]
            sleep: Sleep,
            pending: Option<OwnedPending>,
            call: Option<(S, R)>,
            config: Arc<Config>,
        },
        Calling {
            #[pin]
            future: F,
            entry: Option<OwnedEntry>,
            config: Arc<Config>,
        },
        Blocked {
            response: Option<Response<bytes::Bytes>>,
        },
    }
}

impl<F, S, R> ResponseFuture<F, S, R> {
    pub(super) fn calling(future: F, entry: OwnedEntry, config: Arc<Config>) -> Self {
        Self {
            state: State::Calling {
                future,
                entry: Some(entry),
                config,
            },
        }
    }

    pub(super) fn waiting(
        pending: OwnedPending,
        service: S,
        request: R,
        config: Arc<Config>,
    ) -> Self {
        Self {
            state: State::Waiting {
                sleep: tokio::time::sleep(pending.wait()),
                pending: Some(pending),
                call: Some((service, request)),
                config,
            },
        }
    }

    pub(super) fn blocked(response: Response<bytes::Bytes>) -> Self {
        Self {
            state: State::Blocked {
                response: Some(response),
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
                StateProj::Waiting {
                    sleep,
                    pending,
                    call,
                    config,
                } => {
                    ready!(sleep.poll(cx));
                    let (Some(pending), Some((mut service, request))) =
                        (pending.take(), call.take())
                    else {
                        unreachable!("a waiting state is left as soon as its wait ends");
                    };
                    let entry = pending.enter();
                    let future = service.call(request);
                    let config = config.clone();
                    this.state.set(State::Calling {
                        future,
                        entry: Some(entry),
                        config,
                    });
                }
                StateProj::Calling {
                    future,
                    entry,
                    config,
                } => {
                    let result = ready!(future.poll(cx));
                    let Some(mut entry) = entry.take() else {
                        unreachable!("a calling state ends once");
                    };
                    return Poll::Ready(match result {
                        Ok(response) => {
                            let (parts, body) = response.into_parts();
                            entry.set_error((config.classify)(&parts));
                            let grpc = is_grpc(&parts.headers);
                            Ok(Response::from_parts(
                                parts,
                                ResponseBody::inner(body, entry, grpc),
                            ))
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
                    return Poll::Ready(Ok(response.map(ResponseBody::blocked)));
                }
            }
        }
    }
}

impl<F, S, R> fmt::Debug for ResponseFuture<F, S, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Waiting { .. } => "waiting",
            State::Calling { .. } => "calling",
            State::Blocked { .. } => "blocked",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
