//! Whether a limit reaches Redis, and what it admits when it does not: one place for the
//! switch to the fallback and back (each logged once) and for the local share.

use crate::lease::{Fallback, LeaseMode};
use crate::Error;
use spillway::cluster::SharedRefusal;
use spillway::flow::{Decision, QpsReject};
use spillway::stats::{NodeConfig, ResourceNode};
use std::time::Duration;

/// A limit's link to Redis: healthy, or failing with the time of the next probe.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Health {
    /// While Redis fails: when to try it again (ms, the limit's process clock).
    pub(crate) probe_at_ms: Option<u64>,
}

impl Health {
    /// Failing from the start, a probe due at once (a limit with no connection yet).
    pub(crate) fn unreached() -> Self {
        Self {
            probe_at_ms: Some(0),
        }
    }

    /// Redis failed at `now`: in the fallback (logged when it was not), next probe after
    /// `probe_every`.
    pub(crate) fn failed(
        &mut self,
        key: &str,
        err: &Error,
        fallback: Fallback,
        now: u64,
        probe_every: Duration,
    ) {
        if self.probe_at_ms.is_none() {
            tracing::warn!(limit = %key, error = %err, ?fallback, "shared limit: Redis failed, falling back until it answers");
        }
        self.probe_at_ms = Some(now + probe_every.as_millis() as u64);
    }

    /// Redis answered: back on the shared limit (logged when it was not).
    pub(crate) fn answered(&mut self, key: &str) {
        if self.probe_at_ms.take().is_some() {
            tracing::info!(limit = %key, "shared limit: Redis answers again, back to the global limit");
        }
    }

    /// Whether the limit decides against the shared state or by its fallback.
    pub(crate) fn mode(self) -> LeaseMode {
        match self.probe_at_ms {
            Some(_) => LeaseMode::Fallback,
            None => LeaseMode::Global,
        }
    }
}

/// A rate's fallback: its policy, and the local window that counts the fair share.
#[derive(Debug)]
pub(crate) struct RateFallback {
    policy: Fallback,
    local: ResourceNode,
}

impl RateFallback {
    pub(crate) fn new(policy: Fallback) -> Self {
        Self {
            policy,
            local: ResourceNode::new(NodeConfig::default()),
        }
    }

    /// Admits `count` at `now_nanos` by the policy: all, none, or the fair share of `rate`
    /// among `live` processes over a local sliding window (Sentinel's, two 500 ms buckets).
    pub(crate) fn takes(
        &self,
        rate: f64,
        live: u64,
        now_nanos: u64,
        count: u32,
    ) -> Result<(), SharedRefusal> {
        match self.policy {
            Fallback::Open => Ok(()),
            Fallback::Closed => Err(SharedRefusal::new(0.0, 0.0)),
            Fallback::LocalShare => {
                let share = rate / live.max(1) as f64;
                if QpsReject::new(share).check(&self.local, now_nanos, count) == Decision::Pass {
                    self.local.add_pass(now_nanos, u64::from(count));
                    Ok(())
                } else {
                    Err(SharedRefusal::new(self.local.pass_qps(now_nanos), share))
                }
            }
        }
    }
}
