//! Requests in flight on one connection, for closing a connection that has been idle too long:
//! HTTP/2 has no head deadline between requests, and a client that answers pings would
//! otherwise hold its connection for ever.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// One connection's requests in flight (a request counts until its response body ends).
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Activity {
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    in_flight: AtomicUsize,
    changed: Notify,
}

/// A request in flight, until dropped.
#[derive(Debug)]
pub(crate) struct Busy {
    state: Arc<State>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.state.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.state.changed.notify_waiters();
    }
}

impl Activity {
    /// Counts a request in flight until the guard is dropped.
    pub(crate) fn busy(&self) -> Busy {
        self.state.in_flight.fetch_add(1, Ordering::AcqRel);
        self.state.changed.notify_waiters();
        Busy {
            state: Arc::clone(&self.state),
        }
    }

    /// Completes once no request has been in flight for `timeout`.
    pub(crate) async fn idle_for(&self, timeout: Duration) {
        loop {
            let changed = self.state.changed.notified();
            let mut changed = std::pin::pin!(changed);
            // Registered before the count is read: no change between the two is missed.
            changed.as_mut().enable();
            if self.state.in_flight.load(Ordering::Acquire) == 0 {
                tokio::select! {
                    () = tokio::time::sleep(timeout) => return,
                    () = changed => {}
                }
            } else {
                changed.await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_end_of_the_last_request() {
        let activity = Activity::default();
        let start = Instant::now();
        let busy = activity.busy();
        let watching = activity.clone();
        let idle = tokio::spawn(async move {
            watching.idle_for(Duration::from_secs(5)).await;
            Instant::now()
        });
        // A request held 60 s: never idle meanwhile.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!idle.is_finished());
        let second = activity.busy();
        drop(busy);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!idle.is_finished(), "one request is still in flight");
        drop(second);
        let closed = idle.await.unwrap();
        assert_eq!(closed - start, Duration::from_secs(75));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_with_no_request_is_idle_from_the_start() {
        let start = Instant::now();
        Activity::default().idle_for(Duration::from_secs(5)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
