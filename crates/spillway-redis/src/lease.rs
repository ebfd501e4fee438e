//! The *leased* check of a shared limit: each process takes batches of passes from Redis ahead
//! of need and admits from them locally, so that a request never waits on the network; and
//! when Redis fails, a local limit of the process's fair share until it is back.

use crate::driver::{self, Driven, Target};
use crate::health::Health;
use crate::lock::lock;
use crate::rate_fallback::RateFallback;
use crate::settings::{check_lease_settings, default_member, LeaseMode, LeaseSettings};
use crate::shared::{self, Beat, Mode, Shared};
use crate::{Error, SharedBucket, SharedWindow};
use redis::aio::ConnectionLike;
use spillway::cluster::{SharedLimit, SharedRefusal};
use spillway::Clock;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A process's share of a [`SharedWindow`] or a [`SharedBucket`], taken from Redis in batches:
/// a [`LeasedWindow`] or a [`LeasedBucket`].
///
/// - [`Leased::try_acquire`] admits from the passes this process holds: no I/O, no wait.
/// - [`Leased::refill`] takes the next batch (one script call, which also sends this
///   process's heartbeat), when [`Leased::wants_refill`] says so: requests found the
///   passes held short, an unused lease has expired, or a heartbeat is due.
///   [`Leased::drive`] does it in a task of its own.
/// - A batch follows this process's demand: what it asked for since the last refill, at that
///   pace over a lease's life, from 1 up to `max_batch`.
/// - Passes are counted in the shared limit when they are leased (a window counts them in
///   its current bucket; a bucket reserves them, as one `tryAcquire(batch)` of Guava's). A
///   lease of a window lives one bucket width by this process's clock, and the passes left
///   when it expires are given back to the bucket they were counted in, if it is still in the
///   window. A lease of a bucket lives 100 ms, and its unused permits go back to the bucket
///   (first shortening the wait it owes, then stored, up to the burst).
/// - A refused lease is not asked again before the limit has room (a window's next bucket, a
///   bucket's next free moment).
/// - A call that fails or takes longer than `call_timeout` switches to
///   [`LeaseMode::Fallback`] at once; Redis is probed every `probe_every`, and the first
///   success switches back. Each switch is logged once.
///
/// **Bound.** With one refiller per process ([`Leased::drive`]), a process holds fewer than
/// `2 x max_batch` passes at any time (it refills below one batch, and a batch is at most
/// `max_batch`). Every pass it admits was counted in the shared limit when leased, so in any two
/// consecutive buckets of a window (the span the strict check bounds) the fleet admits at most
/// the limit plus what its processes held when the first began: the limit plus `2 x max_batch` a
/// process. A bucket admits what Guava's limiter would grant to the leases as requests: over
/// any span, the rate times the span, plus the burst, plus the batches (one each) paid for
/// in advance. Passes leased and not used in time are lost to the others until given back, so
/// the fleet may admit less than the limit, never more than the bound (while Redis answers).
#[derive(Debug)]
pub struct Leased<S: Shared> {
    limit: S,
    clock: Arc<dyn Clock>,
    settings: LeaseSettings,
    member: String,
    members_key: String,
    lease: Mutex<Lease>,
    /// What it admits while Redis fails.
    fallback: RateFallback,
    /// Wakes [`Leased::drive`] when a refill is wanted.
    wanted: tokio::sync::Notify,
    /// Wakes the requests waiting for a refill.
    refilled: crate::ready::Refilled,
}

#[derive(Debug, Default)]
struct Lease {
    /// Passes this process may still admit.
    left: u64,
    /// What they go back to (a window's bucket, on its clock).
    tag: u64,
    /// When they expire, on this process's clock (ms).
    expires_ms: u64,
    /// Passes asked for (admitted or refused) since the last refill.
    asked: u64,
    /// When the last refill began (ms, this process's clock): with `asked`, this process's
    /// demand.
    refilled_ms: u64,
    /// No lease before this (ms, this process's clock): the limit had no room until then.
    full_until_ms: u64,
    /// When the last call answered (ms, this process's clock): the next heartbeat is due a
    /// third of the TTL later.
    answered_ms: Option<u64>,
    /// Live processes, as the last heartbeat's answer counted them.
    live: u64,
    /// Whether Redis answers (ms, this process's clock).
    health: Health,
    /// What a refusal reports (the window's passes at the last answer, this process's batch
    /// included; a bucket's rate).
    reading: f64,
}

/// A process's share of a [`SharedWindow`]: see [`Leased`].
pub type LeasedWindow = Leased<SharedWindow>;

/// A process's share of a [`SharedBucket`]: see [`Leased`].
pub type LeasedBucket = Leased<SharedBucket>;

impl<S: Shared> Leased<S> {
    /// A lease of `limit`'s passes in batches of at most `max_batch`, expiring by `clock` (for
    /// a limit on [`crate::Time::Clock`], the same clock); the other settings their defaults.
    ///
    /// # Errors
    ///
    /// As [`Leased::with_settings`].
    pub fn new(limit: S, clock: Arc<dyn Clock>, max_batch: u64) -> Result<Self, Error> {
        let settings = LeaseSettings {
            max_batch,
            ..LeaseSettings::default()
        };
        Self::with_settings(limit, clock, settings)
    }

    /// A lease of `limit`'s passes, as `settings` say.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if `max_batch` or `assumed_processes` is 0, a duration is zero, or
    /// `member` is empty.
    pub fn with_settings(
        limit: S,
        clock: Arc<dyn Clock>,
        settings: LeaseSettings,
    ) -> Result<Self, Error> {
        check_lease_settings(&settings)?;
        let member = match &settings.member {
            Some(member) if member.is_empty() => {
                return Err(Error::Invalid("member must not be empty".into()))
            }
            Some(member) => member.clone(),
            None => default_member(clock.as_ref()),
        };
        let lease = Lease {
            live: settings.assumed_processes,
            ..Lease::default()
        };
        Ok(Self {
            members_key: shared::members_key(limit.key()),
            fallback: RateFallback::new(
                settings.fallback,
                limit.span_ms(),
                limit.report_group_ms(),
            ),
            limit,
            clock,
            settings,
            member,
            lease: Mutex::new(lease),
            wanted: tokio::sync::Notify::new(),
            refilled: crate::ready::Refilled::default(),
        })
    }

    /// Admits `count` passes from this process's lease, or, while Redis fails, by its
    /// fallback; or refuses. Never waits, never calls Redis. A refusal while the lease is being
    /// refilled is a refusal.
    pub fn try_acquire(&self, count: u32) -> bool {
        self.take(count).is_ok()
    }

    /// [`Leased::try_acquire`], with what a refusal saw: the limit's reading at the last answer
    /// against the limit (in the fallback, the local pass rate against the share), and when the
    /// limit has room again if a lease found none.
    fn take(&self, count: u32) -> Result<(), SharedRefusal> {
        let now_nanos = self.clock.now_nanos();
        let now = now_nanos / 1_000_000;
        let mut lease = lock(&self.lease);
        lease.asked = lease.asked.saturating_add(u64::from(count));
        let taken = if lease.health.in_fallback() {
            let rate = self.limit.rate();
            let live = lease.health.share_live(lease.live);
            self.fallback.takes(rate, live, self.clock.as_ref(), count)
        } else if now < lease.expires_ms && lease.left >= u64::from(count) {
            let kept = match lease.health.returning(now, lease.live) {
                // Just back on Redis: within the share too, while the others may still be in
                // their fallbacks.
                Some(live) => {
                    let rate = self.limit.rate();
                    self.fallback
                        .within_share(rate, live, self.clock.as_ref(), count)
                }
                None => {
                    self.fallback.record(now_nanos, count);
                    Ok(())
                }
            };
            match kept {
                Ok(()) => lease.left -= u64::from(count),
                // Refused by the share, not for want of a lease: no demand for a refill.
                Err(_) => lease.asked = lease.asked.saturating_sub(u64::from(count)),
            }
            kept
        } else {
            let refusal = SharedRefusal::new(lease.reading, self.limit.rate());
            Err(match lease.full_until_ms.checked_sub(now) {
                Some(wait) if wait > 0 => refusal.with_retry_after(Duration::from_millis(wait)),
                _ => refusal,
            })
        };
        let wanted = self.wants(&lease, now);
        drop(lease);
        if wanted {
            self.wanted.notify_one();
        }
        taken
    }

    /// Whether a refill is due: requests found the lease short (and the limit was not found
    /// without room until later), an unused lease expired, a heartbeat is due, or, while
    /// Redis fails, a probe.
    pub fn wants_refill(&self) -> bool {
        self.wants(&lock(&self.lease), self.clock.now_millis())
    }

    fn wants(&self, lease: &Lease, now: u64) -> bool {
        if let Some(probe_at) = lease.health.probe_at_ms {
            return now >= probe_at;
        }
        now >= self.next_due(lease)
    }

    /// When a refill is next due (ms, this process's clock), if nothing changes before.
    fn next_due(&self, lease: &Lease) -> u64 {
        let now = self.clock.now_millis();
        let expired = now >= lease.expires_ms;
        let short =
            lease.asked > 0 && (expired || lease.left < lease.asked.min(self.settings.max_batch));
        let mut due = u64::MAX;
        if short {
            due = lease.full_until_ms;
        }
        if lease.left > 0 {
            // An unused lease, to give back.
            due = due.min(lease.expires_ms);
        }
        let beat = self.beat_every_ms();
        due.min(lease.answered_ms.map_or(0, |at| at + beat))
    }

    fn beat_every_ms(&self) -> u64 {
        (self.settings.heartbeat_ttl.as_millis() as u64 / 3).max(1)
    }

    /// Takes the next batch from Redis (giving back an expired lease's passes first), with
    /// this process's heartbeat. Returns the passes granted. A failure switches to the
    /// fallback; a success while in it switches back.
    ///
    /// # Errors
    ///
    /// Redis failed or took longer than the call timeout: the lease is as it was, less what
    /// expired.
    pub async fn refill<C: ConnectionLike + Send>(&self, redis: &mut C) -> Result<u64, Error> {
        let refilled = match self.try_refill(redis).await {
            Ok(granted) => Ok(granted),
            Err(err) => {
                self.failed(&err);
                Err(err)
            }
        };
        self.refilled.done();
        refilled
    }

    /// Whether `count` passes can be decided now without waiting for a refill: the lease holds
    /// them, the limit is known to be full (a refusal is due), or Redis fails (the fallback
    /// decides). Not before Redis first answers.
    pub fn is_ready(&self, count: u32) -> bool {
        let now = self.clock.now_millis();
        let lease = lock(&self.lease);
        lease.health.in_fallback()
            || (now < lease.expires_ms && lease.left >= u64::from(count))
            || now < lease.full_until_ms
    }

    /// Asks for a refill with `count` passes more and waits for it (at most twice the call
    /// timeout: giving back an expired lease and taking the next; before Redis first answers,
    /// at most `startup_wait`), unless [`is_ready`](Self::is_ready) already. Its driver
    /// ([`Leased::drive`]) must be running.
    /// Afterwards [`try_acquire`](Self::try_acquire) decides as always: a request on a quiet
    /// route is admitted from the lease its wait brought, not refused for want of one.
    pub async fn until_ready(&self, count: u32) {
        let ask = || {
            let mut lease = lock(&self.lease);
            lease.asked = lease.asked.saturating_add(u64::from(count));
            drop(lease);
            self.wanted.notify_one();
        };
        let within = crate::ready::bound(&self.settings, self.mode());
        self.refilled
            .wait(within, ask, || self.is_ready(count))
            .await;
    }

    /// Redis failed: the fallback from now on (logged once), and a probe after `probe_every`.
    fn failed(&self, err: &Error) {
        let now = self.clock.now_millis();
        let (key, fallback, every) = (
            self.limit.key(),
            self.settings.fallback,
            self.settings.probe_every,
        );
        lock(&self.lease)
            .health
            .failed(key, err, fallback, now, every);
        // Requests waiting for a first answer decide by the fallback now.
        self.refilled.done();
    }

    /// Connects to `target` (one Redis or a Redis Cluster) and then [`drive`](Self::drive)s, for
    /// good. Until a connection is made (Redis down at startup), the lease is in its fallback
    /// and a connection is tried every `probe_every`. The connection reconnects by itself
    /// afterwards (one Redis: each attempt within `call_timeout`).
    pub async fn connect_and_drive(
        &self,
        target: impl Into<Target>,
        on_refill: impl FnMut(Result<u64, &Error>),
    ) {
        driver::connect_and_drive(self, target.into(), on_refill).await;
    }

    async fn try_refill<C: ConnectionLike + Send>(&self, redis: &mut C) -> Result<u64, Error> {
        // What the fallback admitted first, so that the window the lease takes from counts it.
        let now = self.clock.now_nanos();
        let group = self.limit.report_group_ms();
        let reports = self.fallback.take_unreported(now, group);
        let timeout = self.settings.call_timeout;
        let taken = (self.clock.as_ref(), now);
        if let Err((sent, err)) = shared::report(&self.limit, redis, &reports, timeout, taken).await
        {
            // What Redis did not count is reported at the next refill.
            self.fallback.restore(now, &reports[sent..]);
            return Err(err);
        }
        let (unused, counted_in, batch) = {
            let now = self.clock.now_millis();
            let mut lease = lock(&self.lease);
            let unused = if now >= lease.expires_ms {
                std::mem::take(&mut lease.left)
            } else {
                0
            };
            // The demand since the last refill, over a lease's life at the same pace; at least
            // what was asked, at most `max_batch`.
            let elapsed = now.saturating_sub(lease.refilled_ms).max(1);
            let expected = lease.asked.saturating_mul(self.limit.lease_ms()) / elapsed;
            let batch = expected.max(lease.asked).min(self.settings.max_batch);
            lease.refilled_ms = now;
            let batch = if now < lease.full_until_ms { 0 } else { batch };
            lease.asked = 0;
            (unused, lease.tag, batch)
        };
        let beat = Beat {
            key: &self.members_key,
            member: &self.member,
            ttl_ms: self.settings.heartbeat_ttl.as_millis() as u64,
        };
        if unused > 0 {
            let invocation = self
                .limit
                .invocation(Mode::Return, unused, counted_in, None);
            crate::timed::timed(self.settings.call_timeout, shared::call(redis, invocation))
                .await?;
        }
        let invocation = self.limit.invocation(Mode::UpTo, batch, 0, Some(&beat));
        let sent = self.clock.now_nanos();
        let answer =
            crate::timed::timed(self.settings.call_timeout, shared::call(redis, invocation))
                .await?;
        let answered = self.clock.now_nanos();
        self.fallback.observe(answer.now_ms, sent, answered);
        let now = answered / 1_000_000;
        let mut lease = lock(&self.lease);
        let live = answer.live.max(1);
        let before = std::mem::replace(&mut lease.live, live);
        if lease.health.answered(self.limit.key(), live, now) {
            let (span, group) = (self.limit.span_ms(), self.limit.report_group_ms());
            let calls = crate::health::rate_probe_calls(span, group);
            let within = crate::health::return_ms(&self.settings, calls);
            let ttl = crate::health::ttl_ms(&self.settings);
            lease.health.returned(now, before, within, ttl);
        }
        lease.answered_ms = Some(now);
        lease.reading = self.limit.reading(&answer);
        if answer.count > 0 {
            lease.left += answer.count;
            lease.tag = answer.tag;
            lease.expires_ms = now + self.limit.lease_ms();
        }
        if answer.count < batch {
            // No room: nothing more until the limit has some (on its clock, from its answer).
            lease.full_until_ms = now + answer.free_at_ms.saturating_sub(answer.now_ms);
        }
        Ok(answer.count)
    }

    /// Passes this process holds now.
    pub fn held(&self) -> u64 {
        let lease = lock(&self.lease);
        if self.clock.now_millis() < lease.expires_ms {
            lease.left
        } else {
            0
        }
    }

    /// Whether it admits against the shared limit or its fallback, or has not heard from
    /// Redis yet.
    pub fn mode(&self) -> LeaseMode {
        lock(&self.lease).health.mode()
    }

    /// While it is in its fallback: why, Redis's last error (a refused connection, a timeout,
    /// an error Redis answered with). `None` while Redis answers.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.lease).health.error()
    }

    /// The calls to Redis (and connections) that failed since it was made.
    pub fn failures(&self) -> u64 {
        lock(&self.lease).health.failures()
    }

    /// Whether it is just back on Redis after a failure and keeps to its fallback's share
    /// besides Redis's answer, until the other processes have had the chance to be back too
    /// (see docs/cluster.md, "The bound across a failure").
    pub fn keeps_to_share(&self) -> bool {
        let now = self.clock.now_millis();
        let policy = self.settings.fallback;
        lock(&self.lease).health.keeps_to_share(now, policy)
    }

    /// The processes sharing the limit, which its fallback shares it among: as the last
    /// heartbeat's answer counted them (before any: `assumed_processes`), or, after a return
    /// from a failure until Redis has answered for a heartbeat TTL, as many as the fallback
    /// counted if that is more (a Redis that restarted empty counts the first process back
    /// alone).
    pub fn live_processes(&self) -> u64 {
        let lease = lock(&self.lease);
        lease.health.share_live(lease.live)
    }

    /// This process's name among those sharing the limit.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// Refills whenever [`Leased::try_acquire`] finds one due, and at the latest when the
    /// next is due (an expiry, a heartbeat, a probe), until the future is dropped (run it in a
    /// task of its own). Each refill's outcome goes to `on_refill` (the passes granted, or the
    /// error).
    pub async fn drive<C: ConnectionLike + Send>(
        &self,
        redis: C,
        on_refill: impl FnMut(Result<u64, &Error>),
    ) {
        driver::drive(self, redis, on_refill).await;
    }
}

impl<S: Shared> Driven for Leased<S> {
    fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    fn wants_refill(&self) -> bool {
        Leased::wants_refill(self)
    }

    fn wait_ms(&self) -> u64 {
        let lease = lock(&self.lease);
        let due = lease
            .health
            .probe_at_ms
            .unwrap_or_else(|| self.next_due(&lease));
        due.saturating_sub(self.clock.now_millis())
    }

    fn wanted(&self) -> &tokio::sync::Notify {
        &self.wanted
    }

    fn failed(&self, err: &Error) {
        Leased::failed(self, err);
    }

    async fn refill<C: ConnectionLike + Send>(&self, redis: &mut C) -> Result<u64, Error> {
        Leased::refill(self, redis).await
    }
}

/// A leased limit as a cluster rule's limit: see [`spillway::cluster`].
impl<S: Shared> SharedLimit for Leased<S> {
    fn try_take(&self, count: u32) -> Result<(), SharedRefusal> {
        self.take(count)
    }

    /// Back to the lease it came from, unless that lease has expired (its passes then go back
    /// to Redis with the rest). In the fallback, a local pass stays counted: the share errs
    /// low.
    fn give_back(&self, count: u32) {
        let now = self.clock.now_millis();
        let mut lease = lock(&self.lease);
        if !lease.health.in_fallback() && now < lease.expires_ms {
            lease.left += u64::from(count);
        }
    }

    fn in_fallback(&self) -> bool {
        self.mode() == LeaseMode::Fallback
    }

    fn is_starting(&self) -> bool {
        self.mode() == LeaseMode::Starting
    }

    fn processes(&self) -> Option<u64> {
        Some(self.live_processes())
    }

    fn keeps_to_share(&self) -> bool {
        Leased::keeps_to_share(self)
    }

    fn last_error(&self) -> Option<String> {
        Leased::last_error(self)
    }

    fn failures(&self) -> u64 {
        Leased::failures(self)
    }

    fn is_ready(&self, count: u32) -> bool {
        Leased::is_ready(self, count)
    }

    fn until_ready(&self, count: u32) -> spillway::cluster::Ready<'_> {
        Box::pin(Leased::until_ready(self, count))
    }
}
