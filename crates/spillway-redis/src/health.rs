//! Whether a limit reaches Redis, and what it admits when it does not: one place for the
//! switches between starting, the shared limit and the fallback (each logged), for the local
//! share, and for the passes the fallback admitted that Redis must be told of.

use crate::settings::{Fallback, LeaseMode, LeaseSettings};
use crate::unreported::{Report, Unreported};
use crate::Error;
use spillway::cluster::SharedRefusal;
use spillway::flow::{Decision, QpsReject};
use spillway::stats::{NodeConfig, ResourceNode, WindowConfig};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A limit's link to Redis: starting (no answer yet), healthy, or failing with the time of the
/// next probe and why.
#[derive(Debug, Clone, Default)]
pub(crate) struct Health {
    /// Whether Redis has answered once.
    reached: bool,
    /// While Redis fails: when to try it again (ms, the limit's process clock).
    pub(crate) probe_at_ms: Option<u64>,
    /// While Redis fails: the last failure's error.
    error: Option<String>,
    /// The calls and connections that failed, in all.
    failures: u64,
    /// Just back on Redis after a failure: the others may not be yet.
    returning: Option<Returning>,
}

/// A return to Redis after a failure. Until `until_ms` the other processes may still be in
/// their fallbacks, admitting passes Redis has not been told of: this process keeps to its
/// share meanwhile. And until Redis has answered at `trust_at_ms` or later with no failure
/// between (a heartbeat TTL after the return, when every live process has beaten again),
/// Redis's count of the live processes may be short (a Redis that restarted empty, or was
/// flushed, first counts this process alone): the fleet is taken to be at least as large as
/// the fallback counted it.
#[derive(Debug, Clone, Copy)]
struct Returning {
    /// The end of the time it keeps to its share (ms, the limit's process clock).
    until_ms: u64,
    /// From when an answer's count of the live processes is believed again.
    trust_at_ms: u64,
    /// The processes the share is counted among: as many as the fallback counted.
    live: u64,
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
        self.error = Some(err.to_string());
        self.failures += 1;
    }

    /// Redis answered at `now_ms`, counting `live` processes: on the shared limit (logged when
    /// it was not). Returns whether it was failing.
    pub(crate) fn answered(&mut self, key: &str, live: u64, now_ms: u64) -> bool {
        let was_failing = self.probe_at_ms.take().is_some();
        if !was_failing
            && self
                .returning
                .is_some_and(|back| now_ms >= back.trust_at_ms)
        {
            // A heartbeat TTL on Redis since the return: its count is every live process.
            self.returning = None;
        }
        if !self.reached {
            tracing::info!(limit = %key, processes = live, "shared limit: Redis reached, on the global limit");
        } else if was_failing {
            tracing::info!(limit = %key, processes = live, "shared limit: Redis answers again, back to the global limit");
        }
        self.reached = true;
        self.error = None;
        was_failing
    }

    /// Redis answered at `now_ms` after a failure, while the fallback shared the limit among
    /// `live` processes: until every other process has had the chance to probe it
    /// (`return_ms`, see [`return_ms`]), this one admits no more than that share
    /// ([`Health::returning`]); and until Redis has answered for a heartbeat TTL (`ttl_ms`)
    /// with no failure, its fleet is at least as large ([`Health::share_live`]).
    pub(crate) fn returned(&mut self, now_ms: u64, live: u64, return_ms: u64, ttl_ms: u64) {
        let live = self.share_live(live);
        self.returning = Some(Returning {
            until_ms: now_ms.saturating_add(return_ms),
            trust_at_ms: now_ms.saturating_add(return_ms.max(ttl_ms)),
            live: live.max(1),
        });
    }

    /// While the limit is just back on Redis at `now_ms` (and not failing again): the
    /// processes its share is counted among, the fallback's or `live` (as Redis counts them
    /// now) if more (see [`Health::returned`]).
    pub(crate) fn returning(&self, now_ms: u64, live: u64) -> Option<u64> {
        self.returning
            .filter(|back| now_ms < back.until_ms && self.probe_at_ms.is_none())
            .map(|back| back.live.max(live))
    }

    /// Whether the limit, just back on Redis at `now_ms`, keeps to its share under `policy`
    /// (only [`Fallback::LocalShare`] has a share to keep to).
    pub(crate) fn keeps_to_share(&self, now_ms: u64, policy: Fallback) -> bool {
        policy == Fallback::LocalShare && self.returning(now_ms, 0).is_some()
    }

    /// The processes a fallback shares the limit among: `live`, as Redis last counted them, or
    /// more since a return that Redis has not answered a heartbeat TTL after (see
    /// [`Health::returned`]), so that a failure after a Redis that restarted empty does not
    /// give one process the whole limit (found by an attack: a strict limit of 100 admitted
    /// 183 a second, 100 + 50 + 33, through a second outage).
    pub(crate) fn share_live(&self, live: u64) -> u64 {
        match self.returning {
            Some(back) => live.max(back.live),
            None => live,
        }
    }

    /// Whether the fallback decides: Redis fails. (Before its first answer, nothing is
    /// admitted locally: requests wait for it, and those it does not reach in time are
    /// refused.)
    pub(crate) fn in_fallback(&self) -> bool {
        self.probe_at_ms.is_some()
    }

    /// While Redis fails: the last failure's error.
    pub(crate) fn error(&self) -> Option<String> {
        self.error.clone()
    }

    /// The calls and connections that failed since the limit was made.
    pub(crate) fn failures(&self) -> u64 {
        self.failures
    }

    /// Whether the limit decides against the shared state, by its fallback, or has not heard
    /// from Redis yet.
    pub(crate) fn mode(&self) -> LeaseMode {
        match (self.probe_at_ms, self.reached) {
            (Some(_), _) => LeaseMode::Fallback,
            (None, true) => LeaseMode::Global,
            (None, false) => LeaseMode::Starting,
        }
    }
}

/// How long a process back on Redis keeps to its share, by `settings`, when a probe makes
/// `calls` calls once connected: until every other process that reaches Redis has had its
/// next probe. Another process's failed probe may be under way as Redis returns (a
/// connection, up to four call timeouts); its next comes a probe period later and takes the
/// longest a probe takes (a connection, four call timeouts, then its calls, one each).
pub(crate) fn return_ms(settings: &LeaseSettings, calls: u64) -> u64 {
    let calls = 4 + 4 + u32::try_from(calls).unwrap_or(u32::MAX).min(1_000);
    let probe = settings.probe_every + settings.call_timeout.saturating_mul(calls);
    u64::try_from(probe.as_millis()).unwrap_or(u64::MAX)
}

/// The calls a rate limit's probe makes once connected, for a limit whose passes matter for
/// `span_ms` and are reported in groups of `group_ms`: a report call per group (the groups one
/// more than the span holds), a lease's unused passes given back, and the read.
pub(crate) fn rate_probe_calls(span_ms: u64, group_ms: u64) -> u64 {
    span_ms.div_ceil(group_ms.max(1)).saturating_add(1) + 1 + 1
}

/// A heartbeat's TTL by `settings`, in ms.
pub(crate) fn ttl_ms(settings: &LeaseSettings) -> u64 {
    u64::try_from(settings.heartbeat_ttl.as_millis()).unwrap_or(u64::MAX)
}

/// A rate's fallback: its policy, the local window that counts the fair share, and what it
/// admitted that Redis has not counted.
#[derive(Debug)]
pub(crate) struct RateFallback {
    policy: Fallback,
    /// Every pass this process admitted, through Redis or not, in a window of the limit's
    /// shape whose buckets are the limit's (on its clock, as last read): the share is counted
    /// over it, so that a fallback starts from what the process admitted in the limit's
    /// current window.
    local: ResourceNode,
    /// The limit's clock less this process's, in ms, as the last answer showed.
    offset_ms: AtomicI64,
    /// Passes the fallback admitted, until Redis is told of them.
    unreported: Mutex<Unreported>,
    /// How long a pass can matter to the limit (a window's interval), in milliseconds.
    keep_ms: u64,
}

impl RateFallback {
    /// A fallback by `policy` for a limit whose window is `keep_ms` long in buckets of
    /// `bucket_ms` (its passes matter that long).
    pub(crate) fn new(policy: Fallback, keep_ms: u64, bucket_ms: u64) -> Self {
        let buckets = (keep_ms / bucket_ms.max(1)).max(1) as usize;
        let shape = WindowConfig::new(buckets, std::time::Duration::from_millis(keep_ms))
            .unwrap_or_else(|_| WindowConfig::sentinel_second());
        Self {
            policy,
            local: ResourceNode::new(NodeConfig::default().with_second_window(shape)),
            offset_ms: AtomicI64::new(0),
            unreported: Mutex::default(),
            keep_ms,
        }
    }

    /// Redis's answer said `limit_ms` on the limit's clock when this process's read `now_ms`:
    /// the local window's buckets follow the limit's. Moves of 2 ms or less (a call's
    /// latency) are not followed, so that the local window's times do not jitter.
    pub(crate) fn align(&self, limit_ms: u64, now_ms: u64) {
        let offset = limit_ms as i64 - now_ms as i64;
        let old = self.offset_ms.load(Ordering::Relaxed);
        if (offset - old).abs() > 2 {
            self.offset_ms.store(offset, Ordering::Relaxed);
        }
    }

    /// `now_nanos` of this process's clock on the limit's.
    fn on_limit_clock(&self, now_nanos: u64) -> u64 {
        let offset = self.offset_ms.load(Ordering::Relaxed);
        let nanos = offset.saturating_mul(1_000_000);
        now_nanos.saturating_add_signed(nanos)
    }

    /// `count` passes admitted through Redis at `now_nanos`: counted in the local window, which
    /// a fallback starts from.
    pub(crate) fn record(&self, now_nanos: u64, count: u32) {
        let at = self.on_limit_clock(now_nanos);
        self.local.add_pass(at, u64::from(count));
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
        let mut unreported = crate::lock::lock(&self.unreported);
        let at = self.on_limit_clock(now_nanos);
        let taken = match self.policy {
            Fallback::Open => Ok(()),
            Fallback::Closed => Err(SharedRefusal::new(0.0, 0.0)),
            Fallback::LocalShare => self.share_admits(rate, live, at, count),
        };
        if taken.is_ok() {
            self.local.add_pass(at, u64::from(count));
            unreported.add(at / 1_000_000, u64::from(count), self.keep_ms);
        }
        taken
    }

    /// Just back on Redis (see [`Health::returned`]): admits `count` at `now_nanos` only within
    /// the fair share of `rate` among `live` processes (under [`Fallback::LocalShare`]; the
    /// other policies leave no share to keep to), and counts it in the local window as
    /// [`RateFallback::record`] does. Redis decides it too; one it refuses stays counted
    /// here, which only makes the share stricter for a window.
    pub(crate) fn within_share(
        &self,
        rate: f64,
        live: u64,
        now_nanos: u64,
        count: u32,
    ) -> Result<(), SharedRefusal> {
        // One decision at a time, as in `takes`.
        let _one = crate::lock::lock(&self.unreported);
        let at = self.on_limit_clock(now_nanos);
        if self.policy == Fallback::LocalShare {
            self.share_admits(rate, live, at, count)?;
        }
        self.local.add_pass(at, u64::from(count));
        Ok(())
    }

    /// Whether the fair share of `rate` among `live` processes has room for `count` at `at`
    /// (the limit's clock) in the local window.
    fn share_admits(&self, rate: f64, live: u64, at: u64, count: u32) -> Result<(), SharedRefusal> {
        let share = rate / live.max(1) as f64;
        if QpsReject::new(share).check(&self.local, at, count) == Decision::Pass {
            Ok(())
        } else {
            Err(SharedRefusal::new(self.local.pass_qps(at), share))
        }
    }

    /// Takes the passes to report to Redis at `now_nanos` (this process's clock), in groups
    /// of `group_ms` of the limit's clock.
    pub(crate) fn take_unreported(&self, now_nanos: u64, group_ms: u64) -> Vec<Report> {
        let mut unreported = crate::lock::lock(&self.unreported);
        if unreported.is_empty() {
            return Vec::new();
        }
        let now_ms = self.on_limit_clock(now_nanos) / 1_000_000;
        unreported.take(now_ms, self.keep_ms, group_ms)
    }

    /// Puts back `reports` taken at `now_nanos` that Redis did not take.
    pub(crate) fn restore(&self, now_nanos: u64, reports: &[Report]) {
        if reports.is_empty() {
            return;
        }
        let now_ms = self.on_limit_clock(now_nanos) / 1_000_000;
        crate::lock::lock(&self.unreported).restore(now_ms, reports, self.keep_ms);
    }
}
