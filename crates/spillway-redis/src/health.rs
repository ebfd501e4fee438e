//! Whether a limit reaches Redis: one place for the switches between starting, the shared
//! limit and the fallback (each logged), and for the return from a failure (how long a
//! process back on Redis keeps to its share, and among how many). What a rate's fallback
//! admits is `rate_fallback`'s.

use crate::settings::{Fallback, LeaseMode, LeaseSettings};
use crate::Error;
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

    /// A call made on a connection dropped since failed: counted among the failures, with no
    /// switch (the failure that dropped it switched).
    pub(crate) fn failed_before(&mut self) {
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
