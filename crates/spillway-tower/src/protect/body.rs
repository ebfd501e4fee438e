use crate::grpc::{has_error_status, GRPC_STATUS};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use spillway::OwnedEntry;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The body of a response through [`SpillwayService`](super::SpillwayService): the service's body, which
    /// holds the request's spillway entry until it ends (or is dropped), or the body of a
    /// blocked request's response.
    ///
    /// The time from a frame handed out to the reader's asking for the next is the reader's
    /// (see [`OwnedEntry::set_waiting_on_caller`]): a call whose reader took more than a
    /// quarter of its time was paced by its reader, and gives an adaptive limit no sample and
    /// a slow-call breaker no verdict, so that a client that reads slowly cannot make the
    /// service look slow. The call holds its places until the body ends either way.
    ///
    /// A gRPC call whose status was to come in its trailers and whose body is dropped before
    /// they came (its client left) gets no verdict, unless its head already said it failed:
    /// the service's status is unknown, and counted as a success (or as an error) a client
    /// could make the calls of a failing (or a healthy) service count as it liked, by leaving
    /// after the head. One whose body ended without them failed, as gRPC clients see it.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }

    impl<B> PinnedDrop for ResponseBody<B> {
        fn drop(this: Pin<&mut Self>) {
            if let KindProj::Inner { entry: Some(entry), grpc: Grpc::Awaiting, .. } =
                this.project().kind.project()
            {
                if !entry.is_error() {
                    entry.mark_abandoned();
                }
            }
        }
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
            entry: Option<OwnedEntry>,
            grpc: Grpc,
        },
        Blocked {
            data: Option<Bytes>,
        },
    }
}

/// What a response is to gRPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grpc {
    /// Not a gRPC response.
    No,
    /// A gRPC response whose head has its status (or whose status is in its body: gRPC-Web).
    Answered,
    /// A gRPC response whose status is to come in its trailers: a call that ends without one
    /// failed, as gRPC clients see it.
    Awaiting,
}

impl Grpc {
    /// What the response with `headers` is, `grpc` saying whether it is gRPC's.
    pub(super) fn of(grpc: bool, headers: &http::HeaderMap) -> Self {
        match (grpc, crate::grpc::status_to_come(headers)) {
            (false, _) => Grpc::No,
            (true, false) => Grpc::Answered,
            (true, true) => Grpc::Awaiting,
        }
    }
}

impl<B> ResponseBody<B> {
    pub(super) fn inner(body: B, entry: Option<OwnedEntry>, grpc: Grpc) -> Self {
        Self {
            kind: Kind::Inner { body, entry, grpc },
        }
    }

    /// Counts the call as failed, if its entry has not ended yet: for what happens after the
    /// response (a tunnel after an upgrade that fails, say).
    pub fn mark_error(&mut self) {
        if let Kind::Inner {
            entry: Some(entry), ..
        } = &mut self.kind
        {
            entry.mark_error();
        }
    }

    /// Says whether the body's reader holds the call from now on (see
    /// [`OwnedEntry::set_waiting_on_caller`]): for a body that is never read, held while the
    /// connection is a tunnel (a WebSocket session, whose length is its client's, and no
    /// latency of the service's).
    pub fn set_waiting_on_caller(&mut self, waiting: bool) {
        if let Kind::Inner {
            entry: Some(entry), ..
        } = &mut self.kind
        {
            entry.set_waiting_on_caller(waiting);
        }
    }

    pub(super) fn blocked(data: Bytes) -> Self {
        Self {
            kind: Kind::Blocked {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner {
                mut body,
                entry,
                grpc,
            } => {
                // Asked for more: from now the wait is the service's, until a frame is handed
                // out (then the reader's, unless that frame ends the body).
                if let Some(entry) = entry.as_mut() {
                    entry.set_waiting_on_caller(false);
                }
                let polled = body.as_mut().poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        let ended = body.is_end_stream();
                        if let (Some(entry), false) = (entry.as_mut(), ended) {
                            entry.set_waiting_on_caller(true);
                        }
                        if let (Some(trailers), true) = (frame.trailers_ref(), *grpc != Grpc::No) {
                            let failed = has_error_status(trailers)
                                || (*grpc == Grpc::Awaiting && !trailers.contains_key(GRPC_STATUS));
                            *grpc = Grpc::Answered;
                            if let (true, Some(entry)) = (failed, entry.as_mut()) {
                                entry.mark_error();
                            }
                        }
                        // The last frame, and no status came: failed (a reader such as hyper's
                        // server drops a body whose last frame ended it, unpolled to its end).
                        if let (true, Grpc::Awaiting, Some(entry)) = (ended, *grpc, entry.as_mut())
                        {
                            entry.mark_error();
                        }
                    }
                    Poll::Ready(Some(Err(_))) => {
                        if let Some(mut entry) = entry.take() {
                            entry.mark_error();
                        }
                    }
                    // The body ended: the call is complete (failed, if its gRPC status never
                    // came).
                    Poll::Ready(None) => {
                        if let Some(mut entry) = entry.take() {
                            if *grpc == Grpc::Awaiting {
                                entry.mark_error();
                            }
                        }
                    }
                    Poll::Pending => {}
                }
                polled
            }
            KindProj::Blocked { data } => {
                Poll::Ready(data.take().map(|data| Ok(Frame::data(data.into()))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Blocked { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Blocked { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |data| data.len() as u64))
            }
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { entry, .. } => {
                if entry.is_some() {
                    "streaming"
                } else {
                    "ended"
                }
            }
            Kind::Blocked { .. } => "blocked",
        };
        f.debug_struct("ResponseBody").field("kind", &kind).finish()
    }
}
