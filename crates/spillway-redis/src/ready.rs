//! Waiting for a lease's next refill: a request that finds its process holding no pass, while
//! the shared limit is not known to be full, asks the lease's driver for one and waits (a
//! bounded time) for the refill, rather than being refused on a quiet route for want of a
//! lease. One refiller per process stays the rule: the driver refills, the request only asks.

use crate::settings::{LeaseMode, LeaseSettings};
use std::time::Duration;
use tokio::sync::Notify;

/// How long a request waits for a limit in `mode`: before Redis first answers,
/// `startup_wait`; after, a refill's two calls (an expired lease's return and the next).
pub(crate) fn bound(settings: &LeaseSettings, mode: LeaseMode) -> Duration {
    match mode {
        LeaseMode::Starting => settings.startup_wait,
        _ => settings.call_timeout.saturating_mul(2),
    }
}

/// Where a lease says that a refill (or a failed try) is done.
#[derive(Debug, Default)]
pub(crate) struct Refilled(Notify);

impl Refilled {
    /// A refill ended: every waiting request looks again.
    pub(crate) fn done(&self) {
        self.0.notify_waiters();
    }

    /// Unless `ready()` already, calls `ask` (which marks the demand and wakes the driver),
    /// then waits until `ready()` holds after a refill, or `within` has passed.
    pub(crate) async fn wait(
        &self,
        within: Duration,
        ask: impl FnOnce(),
        ready: impl Fn() -> bool,
    ) {
        if ready() {
            return;
        }
        let deadline = tokio::time::Instant::now() + within;
        let mut ask = Some(ask);
        loop {
            let notified = self.0.notified();
            tokio::pin!(notified);
            // Registered before asking, so that a refill that ends at once is not missed.
            notified.as_mut().enable();
            if let Some(ask) = ask.take() {
                ask();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() || ready() {
                return;
            }
        }
    }
}
