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
//! queue, a pacing rule, a cluster lease) is cancelled, and leaves its queue, as before.

use crate::conn::ListenerCounts;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// A request extension the forwarder marks when it sends the request on: from then on the
/// call runs on if its client leaves.
#[derive(Debug, Clone)]
pub(super) struct Forwarding(Arc<AtomicBool>);

impl Forwarding {
    /// A new mark for a call that may run on (`run_on`), to put in its request; `None` if it
    /// may not.
    pub(super) fn when(run_on: bool) -> Option<Self> {
        run_on.then(|| Self(Arc::new(AtomicBool::new(false))))
    }

    /// The request is being sent to its upstream.
    pub(super) fn mark(&self) {
        // Relaxed: read by the same task's drop, or after it on the same thread.
        self.0.store(true, Ordering::Relaxed);
    }

    fn marked(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// `call`, which, dropped before it completes (its client left), is counted in `counts` and,
/// if its request was forwarded (`forwarding`, when the call may run on), runs on to its end in
/// a task of its own on the current runtime, its output then dropped; else it is cancelled
/// there.
pub(super) struct Finishing<'a, F: Future + Send + 'static>
where
    F::Output: Send,
{
    /// `None` once it has completed.
    call: Option<Pin<Box<F>>>,
    forwarding: Option<Forwarding>,
    counts: &'a ListenerCounts,
}

impl<'a, F: Future + Send + 'static> Finishing<'a, F>
where
    F::Output: Send,
{
    pub(super) fn new(call: F, forwarding: Option<Forwarding>, counts: &'a ListenerCounts) -> Self {
        Self {
            call: Some(Box::pin(call)),
            forwarding,
            counts,
        }
    }
}

impl<F: Future + Send + 'static> Future for Finishing<'_, F>
where
    F::Output: Send,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Unpin: the call is boxed.
        let Some(call) = self.call.as_mut() else {
            // Polled after it completed: it never completes again.
            return Poll::Pending;
        };
        let output = ready!(call.as_mut().poll(cx));
        self.call = None;
        Poll::Ready(output)
    }
}

impl<F: Future + Send + 'static> Drop for Finishing<'_, F>
where
    F::Output: Send,
{
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        self.counts.count_client_left();
        if !self.forwarding.as_ref().is_some_and(Forwarding::marked) {
            return;
        }
        // Outside a runtime (it is shutting down) the call ends here, cancelled.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                drop(call.await);
            });
        }
    }
}

#[cfg(test)]
mod tests {
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

    fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    /// Dropped while it waits (as hyper drops a request whose client left), the call is
    /// counted, goes on, and ends when its answer comes.
    #[tokio::test]
    async fn a_call_dropped_before_its_end_runs_on_to_it() {
        let counts = ListenerCounts::default();
        let (answer, answered) = oneshot::channel();
        let (done, finished) = oneshot::channel();
        let ended = Arc::new(AtomicBool::new(false));
        let forwarding = Forwarding::when(true);
        let mut running = Box::pin(Finishing::new(
            call(answered, &ended, done),
            forwarding.clone(),
            &counts,
        ));
        assert!(poll_once(running.as_mut()).is_pending());
        forwarding.unwrap().mark();
        drop(running);
        assert_eq!(counts.clients_left(), 1);
        assert!(!ended.load(Ordering::SeqCst));
        answer.send(7).unwrap();
        assert_eq!(finished.await.unwrap(), 7);
        assert!(ended.load(Ordering::SeqCst));
    }

    /// A dropped call that may not run on, or whose request was not forwarded yet (it waits
    /// for a place), is counted and cancelled.
    #[tokio::test]
    async fn a_call_not_run_on_or_not_forwarded_is_cancelled() {
        let counts = ListenerCounts::default();
        for run_on in [false, true] {
            let (answer, answered) = oneshot::channel();
            let (done, finished) = oneshot::channel();
            let ended = Arc::new(AtomicBool::new(false));
            // Never marked: not forwarded.
            let forwarding = Forwarding::when(run_on);
            assert_eq!(forwarding.is_some(), run_on);
            let mut running = Box::pin(Finishing::new(
                call(answered, &ended, done),
                forwarding,
                &counts,
            ));
            assert!(poll_once(running.as_mut()).is_pending());
            drop(running);
            // Cancelled: its receiver is gone, and so is its sender.
            assert!(answer.send(7).is_err());
            assert!(finished.await.is_err());
            assert!(!ended.load(Ordering::SeqCst));
        }
        assert_eq!(counts.clients_left(), 2);
    }

    /// Not dropped, it is the call itself, and nothing is counted.
    #[tokio::test]
    async fn a_call_that_completes_gives_its_output() {
        let counts = ListenerCounts::default();
        let forwarding = Forwarding::when(true);
        assert_eq!(Finishing::new(async { 5 }, forwarding, &counts).await, 5);
        assert_eq!(counts.clients_left(), 0);
    }
}
