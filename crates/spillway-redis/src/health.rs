//! Whether a limit reaches Redis, and what it admits when it does not: one place for the
//! switches between starting, the shared limit and the fallback (each logged), for the local
//! share, and for the passes the fallback admitted that Redis must be told of.

use crate::lease::{Fallback, LeaseMode};
use crate::unreported::{Report, Unreported};
use crate::Error;
use spillway::cluster::SharedRefusal;
use spillway::flow::{Decision, QpsReject};
use spillway::stats::{NodeConfig, ResourceNode};
use std::sync::Mutex;
use std::time::Duration;

/// A limit's link to Redis: starting (no answer yet), healthy, or failing with the time of the
/// next probe.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Health {
    /// Whether Redis has answered once.
    reached: bool,
    /// While Redis fails: when to try it again (ms, the limit's process clock).
    pub(crate) probe_at_ms: Option<u64>,
}

impl Health {
    /// Redis failed at `now`: in the fallback (logged when it was not, a failure before the
    /// first answer included), next probe after `probe_every`.
    pub(crate) fn failed(
        &mut self,
        key: &str,
        err: &Error,
        fallback: Fallback,
        now: u64,
        probe_every: Duration,
    ) {
        if self.probe_at_ms.is_none() {
            if self.reached {
                tracing::warn!(limit = %key, error = %err, ?fallback, "shared limit: Redis failed, falling back until it answers");
            } else {
                tracing::warn!(limit = %key, error = %err, ?fallback, "shared limit: Redis not reached at start, falling back until it answers");
            }
        }
        self.probe_at_ms = Some(now + probe_every.as_millis() as u64);
    }

    /// Redis answered, counting `live` processes: on the shared limit (logged when it was not).
    pub(crate) fn answered(&mut self, key: &str, live: u64) {
        let was_failing = self.probe_at_ms.take().is_some();
        if !self.reached {
            tracing::info!(limit = %key, processes = live, "shared limit: Redis reached, on the global limit");
        } else if was_failing {
            tracing::info!(limit = %key, processes = live, "shared limit: Redis answers again, back to the global limit");
        }
        self.reached = true;
    }

    /// Whether the fallback decides: Redis fails. (Before its first answer, nothing is
    /// admitted locally: requests wait for it, and those it does not reach in time are
    /// refused.)
    pub(crate) fn in_fallback(self) -> bool {
        self.probe_at_ms.is_some()
    }

    /// Whether the limit decides against the shared state, by its fallback, or has not heard
    /// from Redis yet.
    pub(crate) fn mode(self) -> LeaseMode {
        match (self.probe_at_ms, self.reached) {
            (Some(_), _) => LeaseMode::Fallback,
            (None, true) => LeaseMode::Global,
            (None, false) => LeaseMode::Starting,
        }
    }
}

/// A rate's fallback: its policy, the local window that counts the fair share, and what it
/// admitted that Redis has not counted.
#[derive(Debug)]
pub(crate) struct RateFallback {
    policy: Fallback,
    /// Every pass this process admitted, through Redis or not: the share is counted over it,
    /// so that a fallback starts from what the process admitted in the current window.
    local: ResourceNode,
    /// Passes the fallback admitted, until Redis is told of them.
    unreported: Mutex<Unreported>,
    /// How long a pass can matter to the limit (a window's interval), in milliseconds.
    keep_ms: u64,
}

impl RateFallback {
    /// A fallback by `policy` for a limit whose passes matter for `keep_ms`.
    pub(crate) fn new(policy: Fallback, keep_ms: u64) -> Self {
        Self {
            policy,
            local: ResourceNode::new(NodeConfig::default()),
            unreported: Mutex::default(),
            keep_ms,
        }
    }

    /// `count` passes admitted through Redis at `now_nanos`: counted in the local window, which
    /// a fallback starts from.
    pub(crate) fn record(&self, now_nanos: u64, count: u32) {
        self.local.add_pass(now_nanos, u64::from(count));
    }

    /// Admits `count` at `now_nanos` by the policy: all, none, or the fair share of `rate`
    /// among `live` processes over a local sliding window (Sentinel's, two 500 ms buckets)
    /// that holds this process's admissions, through Redis or not. What it admits is kept to be
    /// reported to Redis.
    pub(crate) fn takes(
        &self,
        rate: f64,
        live: u64,
        now_nanos: u64,
        count: u32,
    ) -> Result<(), SharedRefusal> {
        // One decision at a time: the check and the count together, so that concurrent
        // requests cannot each pass the last place.
        let mut unreported = crate::lease::lock(&self.unreported);
        let taken = match self.policy {
            Fallback::Open => Ok(()),
            Fallback::Closed => Err(SharedRefusal::new(0.0, 0.0)),
            Fallback::LocalShare => {
                let share = rate / live.max(1) as f64;
                if QpsReject::new(share).check(&self.local, now_nanos, count) == Decision::Pass {
                    Ok(())
                } else {
                    Err(SharedRefusal::new(self.local.pass_qps(now_nanos), share))
                }
            }
        };
        if taken.is_ok() {
            self.record(now_nanos, count);
            let now_ms = now_nanos / 1_000_000;
            unreported.add(now_ms, u64::from(count), self.keep_ms);
        }
        taken
    }

    /// Takes the passes to report to Redis at `now_ms`, in groups of `group_ms`.
    pub(crate) fn take_unreported(&self, now_ms: u64, group_ms: u64) -> Vec<Report> {
        let mut unreported = crate::lease::lock(&self.unreported);
        if unreported.is_empty() {
            return Vec::new();
        }
        unreported.take(now_ms, self.keep_ms, group_ms)
    }

    /// Puts back `reports` taken at `now_ms` that Redis did not take.
    pub(crate) fn restore(&self, now_ms: u64, reports: &[Report]) {
        if reports.is_empty() {
            return;
        }
        crate::lease::lock(&self.unreported).restore(now_ms, reports, self.keep_ms);
    }
}
