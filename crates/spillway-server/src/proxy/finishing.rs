//! A forwarded call that runs on to the upstream's answer when its client leaves
//! (`listener.finish_when_client_leaves`).
//!
//! A client that gives up (its timeout, a closed connection, a reset stream) drops the proxy's
//! handling of its request. Cancelled there, the upstream request would be abandoned and its
//! places and entry given back at once, while an upstream that does not notice (most do not)
//! goes on with the work: a limit would then count fewer calls than the upstream works on, and
//! admit more just as clients give up, which they do under overload. Run on, the call keeps its
//! places until the upstream has answered, and its latency sample is the upstream's own.
//!
//! Only a call already forwarded runs on: one still waiting for a place (an adaptive limit's
//! queue, a pacing rule, a cluster lease) is cancelled and leaves its queue, as before. One
//! whose body was still coming runs on with its body waiting out the body timeout (its
//! upstream must not take what came as the whole body), so that an upstream that works before
//! it reads its whole body is never sent more than the limits allow.
//!
//! A call that runs on holds a place under the listener's connection cap until it ends, as
//! nginx counts such a request against its `worker_connections`, and a place of its client's
//! under `max_connections_per_client`; without either it is cancelled (run on past them,
//! requests reset by the hundred from one address took 800 MB and every upstream descriptor:
//! found by an attack). A connection with many calls running on or cancelled (an HTTP/2 client
//! resetting stream after stream) is asked to go away: its new requests are refused. Such
//! calls were all cancelled past 8 before, which freed their places while the upstream still
//! worked, so that one connection sent the upstream 20 to 50 times a concurrency limit (found
//! by an attack).

use super::forward::Peer;
use super::forwarding::Forwarding;
use crate::conn::ListenerCounts;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// `call`, which, dropped before it completes (its client left), is counted in `counts` and,
/// if it may run on (`forwarding`: forwarded, with the client's whole body), runs on to its
/// end in a task of its own on the current runtime, holding a place under the listener's cap
/// (if one is left), a run-on of its connection (`peer`, which is asked to go away at
/// [`MAX_RUN_ONS`](super::forward::MAX_RUN_ONS), and whose client holds one more place under
/// its cap) and `kept` (the request's access log line, which is written when it is dropped),
/// its output then given to what `at_end` makes (the route's counts); else it is cancelled
/// there. Completed, it gives its output and `kept` back, and `at_end` is not
/// called.
pub(super) struct Finishing<'a, F: Future + Send + 'static, K: Send + 'static>
where
    F::Output: Send,
{
    /// `None` once it has completed.
    call: Option<Pin<Box<F>>>,
    forwarding: Option<Forwarding>,
    counts: &'a ListenerCounts,
    /// The client connection, which lets so many of its requests run on.
    peer: &'a Arc<Peer>,
    kept: Option<K>,
    /// Makes what takes the output of a call that ran on (called only then).
    at_end: &'a AtEnd<'a, F::Output>,
}

/// What makes the end of a call that ran on (borrowing for `'a`): an owned function given its
/// output, moved into the call's task.
pub(super) type AtEnd<'a, O> = dyn Fn() -> Box<dyn FnOnce(O) + Send> + Sync + 'a;

impl<'a, F: Future + Send + 'static, K: Send + 'static> Finishing<'a, F, K>
where
    F::Output: Send,
{
    pub(super) fn new(
        call: F,
        forwarding: Option<Forwarding>,
        counts: &'a ListenerCounts,
        peer: &'a Arc<Peer>,
        kept: K,
        at_end: &'a AtEnd<'a, F::Output>,
    ) -> Self {
        Self {
            call: Some(Box::pin(call)),
            forwarding,
            counts,
            peer,
            kept: Some(kept),
            at_end,
        }
    }
}

// The call is boxed, and `kept` is never pinned.
impl<F: Future + Send + 'static, K: Send + 'static> Unpin for Finishing<'_, F, K> where
    F::Output: Send
{
}

impl<F: Future + Send + 'static, K: Send + 'static> Future for Finishing<'_, F, K>
where
    F::Output: Send,
{
    type Output = (F::Output, K);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(call) = this.call.as_mut() else {
            // Polled after it completed: it never completes again.
            return Poll::Pending;
        };
        let output = ready!(call.as_mut().poll(cx));
        this.call = None;
        match this.kept.take() {
            Some(kept) => Poll::Ready((output, kept)),
            None => Poll::Pending,
        }
    }
}

impl<F: Future + Send + 'static, K: Send + 'static> Drop for Finishing<'_, F, K>
where
    F::Output: Send,
{
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        self.counts.count_client_left();
        if !self.forwarding.as_ref().is_some_and(Forwarding::may_run_on) {
            return;
        }
        if let Some(forwarding) = &self.forwarding {
            // A body still coming waits out the body timeout from now.
            forwarding.client_left();
        }
        // A place of its client's, then one under the listener's cap; without either it is
        // cancelled (its places given back while the upstream may work on), and counts
        // toward its connection's going away.
        let Some(run_on) = self.peer.run_on() else {
            return;
        };
        let Some(place) = self.counts.hold_over() else {
            drop(run_on);
            self.peer.cancel();
            return;
        };
        // Outside a runtime the call ends here, cancelled; a runtime that shuts down cancels
        // the task.
        let kept = self.kept.take();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let at_end = (self.at_end)();
            runtime.spawn(async move {
                at_end(call.await);
                drop((place, run_on, kept));
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::forward::MAX_RUN_ONS;
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tokio::sync::oneshot;

    /// A call that ends when `answered` sends, noting it ended, and telling `done` its value.
    fn call(
        answered: oneshot::Receiver<u32>,
        ended: &Arc<AtomicBool>,
        done: oneshot::Sender<u32>,
    ) -> impl Future<Output = u32> + Send + 'static {
        let ended = ended.clone();
        async move {
            let value = answered.await.unwrap_or(0);
            ended.store(true, Ordering::SeqCst);
            let _ = done.send(value);
            value
        }
    }

    /// An end that does nothing with the output.
    fn ignored() -> Box<dyn FnOnce(u32) + Send> {
        Box::new(drop)
    }

    fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    /// Counts for a listener with a cap of `max` connections, and a handle on its places.
    async fn capped(max: usize) -> (ListenerCounts, spillway_tower::AcceptLimit) {
        let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let limit = spillway_tower::LimitedListener::new(socket, max).limit();
        let counts = ListenerCounts::default();
        counts.set_accepts(Arc::new(limit.clone()));
        (counts, limit)
    }

    fn peer() -> Arc<Peer> {
        Arc::new(Peer::new("127.0.0.1:1".parse().unwrap()))
    }

    /// A mark that says the request was forwarded (`forwarded`) and its body ended
    /// (`body_ended`).
    fn marked(forwarded: bool, body_ended: bool) -> Option<Forwarding> {
        let forwarding = Forwarding::when(true).unwrap();
        if forwarded {
            forwarding.forwarded();
        }
        if body_ended {
            forwarding.body_ended();
        }
        Some(forwarding)
    }

    /// Dropped while it waits (as hyper drops a request whose client left), a forwarded call
    /// is counted, goes on holding a place under the listener's cap, and ends when its answer
    /// comes, its output going to its end, giving the place back.
    #[tokio::test]
    async fn a_call_dropped_before_its_end_runs_on_to_it() {
        let (counts, limit) = capped(2).await;
        let (answer, answered) = oneshot::channel();
        let (done, finished) = oneshot::channel();
        let ended = Arc::new(AtomicBool::new(false));
        let forwarding = Forwarding::when(true);
        let peer = peer();
        let (output, at_end) = std::sync::mpsc::channel();
        let made = std::sync::Mutex::new(0);
        let end = || -> Box<dyn FnOnce(u32) + Send> {
            *made.lock().unwrap() += 1;
            let output = output.clone();
            Box::new(move |value| output.send(value).unwrap())
        };
        let mut running = Box::pin(Finishing::new(
            call(answered, &ended, done),
            forwarding.clone(),
            &counts,
            &peer,
            (),
            &end,
        ));
        assert!(poll_once(running.as_mut()).is_pending());
        // The forwarder sends it on, and its body (none) has ended.
        let forwarding = forwarding.unwrap();
        forwarding.forwarded();
        forwarding.body_ended();
        drop(running);
        assert_eq!(counts.clients_left(), 1);
        assert_eq!(limit.state().open, 1, "a place held while it runs on");
        assert_eq!(counts.running_on(), 1);
        assert!(!ended.load(Ordering::SeqCst));
        answer.send(7).unwrap();
        assert_eq!(finished.await.unwrap(), 7);
        assert!(ended.load(Ordering::SeqCst));
        while limit.state().open != 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(counts.running_on(), 0);
        assert_eq!(at_end.try_recv(), Ok(7), "its output at its end");
        assert_eq!(*made.lock().unwrap(), 1);
    }

    /// A dropped call is counted and cancelled when it may not run on (the listener says so),
    /// and when its request was not forwarded yet (it waits for a place).
    #[tokio::test]
    async fn a_call_that_may_not_run_on_is_cancelled() {
        let (free, limit) = capped(1).await;
        let one = peer();
        let cases = [
            (None, &free, &one, "may not run on"),
            (marked(false, true), &free, &one, "not forwarded"),
        ];
        for (forwarding, counts, peer, case) in cases {
            let (answer, answered) = oneshot::channel();
            let (done, finished) = oneshot::channel();
            let ended = Arc::new(AtomicBool::new(false));
            let mut running = Box::pin(Finishing::new(
                call(answered, &ended, done),
                forwarding,
                counts,
                peer,
                (),
                &ignored,
            ));
            assert!(poll_once(running.as_mut()).is_pending());
            drop(running);
            // Cancelled: its receiver is gone, and so is its sender.
            assert!(answer.send(7).is_err(), "{case}");
            assert!(finished.await.is_err(), "{case}");
            assert!(!ended.load(Ordering::SeqCst), "{case}");
        }
        assert_eq!(free.clients_left(), 2);
        assert_eq!(limit.state().open, 0, "no place taken");
        assert_eq!(one.running_on(), 0);
    }

    /// At the listener's cap, or at its client's, a forwarded call is cancelled (run on over
    /// them, requests reset by the hundred took 800 MB and every upstream descriptor: found by
    /// an attack), and counts toward its connection's going away.
    #[tokio::test]
    async fn at_the_listener_s_cap_or_the_client_s_a_call_is_cancelled() {
        let (full, limit) = capped(1).await;
        let taken = limit.hold_over().unwrap();
        let (free, _) = capped(100).await;
        let clients = crate::per_client::ClientConnections::new(
            1,
            spillway_tower::keys::PeerIpPrefixes::default(),
        );
        // A client whose cap of 1 is held by its connection, and one more place (a tunnel's):
        // a run-on may take its connection's place, and here finds none.
        let seat = clients.admit("127.0.0.1".parse().unwrap()).unwrap();
        let _tunnel = seat.another();
        let at_its_cap = |_: ()| Arc::new(Peer::new("127.0.0.1:1".parse().unwrap()).seated(seat));
        let cases = [
            (&full, peer(), "the listener's cap"),
            (&free, at_its_cap(()), "the client's cap"),
        ];
        for (counts, peer, case) in cases {
            for _ in 0..MAX_RUN_ONS {
                let (answer, answered) = oneshot::channel();
                let (done, finished) = oneshot::channel();
                let ended = Arc::new(AtomicBool::new(false));
                let running = Box::pin(Finishing::new(
                    call(answered, &ended, done),
                    marked(true, true),
                    counts,
                    &peer,
                    (),
                    &ignored,
                ));
                drop(running);
                assert!(answer.send(7).is_err(), "{case}: cancelled");
                assert!(finished.await.is_err(), "{case}");
                assert_eq!((counts.running_on(), peer.running_on()), (0, 0), "{case}");
            }
            let asked = tokio::time::timeout(std::time::Duration::ZERO, peer.gone_away()).await;
            assert!(asked.is_ok(), "{case}: asked to go away");
            assert!(peer.is_going_away(), "{case}");
        }
        drop(taken);
    }

    /// The calls of a connection run on however many leave, each holding a place under the
    /// cap (cancelled, each would free its limits' places while the upstream still works);
    /// the eighth asks the connection to go away.
    #[tokio::test(start_paused = true)]
    async fn a_connection_with_many_running_on_is_asked_to_go_away() {
        let (counts, limit) = capped(100).await;
        let peer = peer();
        let mut answers = Vec::new();
        for n in 1..=MAX_RUN_ONS + 2 {
            let (answer, answered) = oneshot::channel();
            let (done, _finished) = oneshot::channel();
            let ended = Arc::new(AtomicBool::new(false));
            let mut running = Box::pin(Finishing::new(
                call(answered, &ended, done),
                marked(true, true),
                &counts,
                &peer,
                (),
                &ignored,
            ));
            assert!(poll_once(running.as_mut()).is_pending());
            drop(running);
            answers.push(answer);
            assert_eq!(peer.running_on(), n);
            let asked = tokio::time::timeout(std::time::Duration::ZERO, peer.gone_away()).await;
            assert_eq!(asked.is_ok(), n == MAX_RUN_ONS, "asked at the {n}th");
        }
        assert_eq!(limit.state().open, MAX_RUN_ONS + 2);
        for answer in answers {
            answer.send(1).unwrap();
        }
        while limit.state().open != 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(peer.running_on(), 0);
    }

    /// Not dropped, it is the call itself, and nothing is counted.
    #[tokio::test]
    async fn a_call_that_completes_gives_its_output() {
        let counts = ListenerCounts::default();
        let forwarding = Forwarding::when(true);
        let peer = peer();
        let made = std::sync::atomic::AtomicBool::new(false);
        let end = || -> Box<dyn FnOnce(u32) + Send> {
            made.store(true, Ordering::SeqCst);
            Box::new(drop)
        };
        assert_eq!(
            Finishing::new(async { 5 }, forwarding, &counts, &peer, "kept", &end).await,
            (5, "kept")
        );
        assert_eq!(counts.clients_left(), 0);
        assert!(!made.load(Ordering::SeqCst), "no end made");
    }
}
