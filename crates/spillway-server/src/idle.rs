//! Requests in flight on one connection, for closing a connection that has been idle too long:
//! HTTP/2 has no head deadline between requests, and a client that answers pings would
//! otherwise hold its connection for ever.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One connection's requests in flight (a request counts until its response body ends), and
/// when the last one ended. Cheap to clone; a request costs two atomic updates and a clock
/// read, and the watch wakes once per timeout at most.
#[derive(Debug, Clone)]
pub(crate) struct Activity {
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    in_flight: AtomicUsize,
    /// When the last request ended, in nanoseconds from `opened`.
    last_end: AtomicU64,
    opened: Instant,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            state: Arc::new(State {
                in_flight: AtomicUsize::new(0),
                last_end: AtomicU64::new(0),
                opened: Instant::now(),
            }),
        }
    }
}

/// A request in flight, until dropped.
#[derive(Debug)]
pub(crate) struct Busy {
    state: Arc<State>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let state = &self.state;
        let since = u64::try_from(state.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        state.last_end.fetch_max(since, Ordering::Relaxed);
        // Release: whoever reads the count then reads this end time or a later one.
        state.in_flight.fetch_sub(1, Ordering::Release);
    }
}

impl Activity {
    /// Counts a request in flight until the guard is dropped.
    pub(crate) fn busy(&self) -> Busy {
        self.state.in_flight.fetch_add(1, Ordering::Relaxed);
        Busy {
            state: Arc::clone(&self.state),
        }
    }

    /// Completes once no request has been in flight for `timeout`.
    pub(crate) async fn idle_for(&self, timeout: Duration) {
        let state = &self.state;
        loop {
            if state.in_flight.load(Ordering::Acquire) > 0 {
                // Busy: look again in a while.
                tokio::time::sleep(timeout).await;
                continue;
            }
            let last_end = Duration::from_nanos(state.last_end.load(Ordering::Relaxed));
            let idle_until = state.opened + last_end + timeout;
            if Instant::now() >= idle_until {
                // A request may have started since the count was read: look once more.
                if state.in_flight.load(Ordering::Acquire) == 0 {
                    return;
                }
                continue;
            }
            tokio::time::sleep_until(idle_until).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
