//! The *leased* check of a shared concurrency limit: a process holds a number of the fleet's
//! permits in Redis and admits locally while its requests in flight fit in them, growing its
//! hold when requests find it short and giving back what stays unused.

use crate::concurrency::SharedConcurrency;
use crate::driver::{self, Driven, Target};
use crate::health::Health;
use crate::lock::lock;
use crate::settings::{Fallback, LeaseMode, LeaseSettings};
use crate::Error;
use redis::aio::ConnectionLike;
use spillway::cluster::{SharedLimit, SharedRefusal};
use spillway::Clock;
use std::sync::{Arc, Mutex};

/// After Redis had no free permit for a request, how long before it is asked again.
const RETRY_FULL_MS: u64 = 20;
/// Spare permits (held, not in use) that stayed spare for a whole period this long go back.
const RETURN_SPARE_MS: u64 = 100;

/// A process's share of a [`SharedConcurrency`], held in Redis and admitted from locally.
///
/// - [`LeasedConcurrency::try_acquire`] admits while this process's requests in flight fit in
///   the permits it holds: no I/O, no wait. [`LeasedConcurrency::release`] ends one.
/// - The driver ([`LeasedConcurrency::drive`]) grows the hold when requests found it short (by
///   their demand, at most `max_batch` at once, plus any requests in flight it does not cover),
///   gives back the permits that stayed spare through a whole 100 ms period (so within 200 ms
///   of their last use), and beats at least every third of the
///   heartbeat TTL, which keeps the hold. A process that stops beating loses its hold after the
///   TTL, to the others.
/// - **Bound:** while every process's hold is alive and it admits from it, the fleet's requests
///   in flight never exceed the limit: each process admits only within its hold, and Redis
///   grants holds only within the limit.
/// - When Redis fails, it falls back at once ([`Fallback`]): the process's share is the limit
///   divided by the live processes, rounded down, in flight at once; or open, or closed.
///   Requests admitted in the fallback are still counted in flight when Redis answers again,
///   and the hold grows to cover them.
#[derive(Debug)]
pub struct LeasedConcurrency {
    shared: SharedConcurrency,
    clock: Arc<dyn Clock>,
    settings: LeaseSettings,
    state: Mutex<Places>,
    wanted: tokio::sync::Notify,
    /// Wakes the requests waiting for a refill.
    refilled: crate::ready::Refilled,
}

#[derive(Debug, Default)]
struct Places {
    /// Permits this process holds in Redis, as its last answer said.
    held: u64,
    /// Its requests in flight.
    in_use: u64,
    /// Permits asked for by requests refused since the last refill.
    asked: u64,
    /// The 100 ms period (its number on this process's clock) `spare_low` is of.
    period: u64,
    /// The fewest spare permits (held, not in use) in the current period so far.
    spare_low: u64,
    /// The fewest in the last whole period: to give back.
    spare_prev: u64,
    /// When the last refill began (ms, this process's clock).
    refilled_ms: u64,
    /// Not asked for more before this (ms): Redis had none free.
    full_until_ms: u64,
    /// When the last call answered (ms).
    answered_ms: Option<u64>,
    /// Live processes, from the last answer.
    live: u64,
    /// Whether Redis answers.
    health: Health,
    /// Permits in use across the fleet at the last answer.
    fleet_in_use: u64,
}

impl LeasedConcurrency {
    /// A leased hold of `shared`'s permits, as `settings` say. The holder's name and the hold's
    /// TTL are `shared`'s (`settings.member` and `settings.heartbeat_ttl` are not used); it
    /// beats every third of that TTL.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if `max_batch` or `assumed_processes` is 0, or a duration is zero.
    pub fn new(
        shared: SharedConcurrency,
        clock: Arc<dyn Clock>,
        settings: LeaseSettings,
    ) -> Result<Self, Error> {
        crate::settings::check_lease_settings(&settings)?;
        let state = Places {
            live: settings.assumed_processes,
            ..Places::default()
        };
        Ok(Self {
            shared,
            clock,
            settings,
            state: Mutex::new(state),
            wanted: tokio::sync::Notify::new(),
            refilled: crate::ready::Refilled::default(),
        })
    }

    /// Admits `count` requests in flight if they fit in this process's hold (in the fallback:
    /// its share), or refuses. Never waits, never calls Redis.
    pub fn try_acquire(&self, count: u32) -> bool {
        self.take(count).is_ok()
    }

    /// Ends `count` requests admitted by [`LeasedConcurrency::try_acquire`].
    pub fn release(&self, count: u32) {
        let now = self.clock.now_millis();
        let mut state = lock(&self.state);
        roll(&mut state, now);
        state.in_use = state.in_use.saturating_sub(u64::from(count));
    }

    fn take(&self, count: u32) -> Result<(), SharedRefusal> {
        let count = u64::from(count);
        let now = self.clock.now_millis();
        let mut state = lock(&self.state);
        roll(&mut state, now);
        let limit = self.shared.limit();
        let share = |live: u64| limit / live.max(1);
        let room = if state.health.in_fallback() {
            match self.settings.fallback {
                Fallback::Open => u64::MAX,
                Fallback::Closed => 0,
                Fallback::LocalShare => share(state.health.share_live(state.live)),
            }
        } else {
            match (
                state.health.returning(now, state.live),
                self.settings.fallback,
            ) {
                // Just back on Redis, which may grant places the others' fallbacks still hold
                // (one that restarted empty lost every hold): the share too, until they are
                // back. (Found by an attack: 9 in flight under a limit of 6 for 520 ms.)
                (Some(live), Fallback::LocalShare) => state.held.min(share(live)),
                _ => state.held,
            }
        };
        let taken = if state.in_use.saturating_add(count) <= room {
            state.in_use += count;
            Ok(())
        } else {
            // Refused by the share while the hold has room (just back on Redis): no demand
            // for more places, which this process could not use and the others could.
            if state.in_use.saturating_add(count) > state.held || state.health.in_fallback() {
                state.asked = state.asked.saturating_add(count);
            }
            let reading = if state.health.in_fallback() {
                state.in_use
            } else {
                state.fleet_in_use
            };
            let refusal = SharedRefusal::new(reading as f64, room.min(limit) as f64);
            Err(refusal)
        };
        let spare = state.held.saturating_sub(state.in_use);
        state.spare_low = state.spare_low.min(spare);
        let wanted = self.wants(&state, now);
        drop(state);
        if wanted {
            self.wanted.notify_one();
        }
        taken
    }

    /// Whether a refill is due: requests found the hold short (and Redis was not found without
    /// a free permit just before), permits stayed spare, a heartbeat is due, or a probe.
    pub fn wants_refill(&self) -> bool {
        let now = self.clock.now_millis();
        let mut state = lock(&self.state);
        roll(&mut state, now);
        self.wants(&state, now)
    }

    fn wants(&self, state: &Places, now: u64) -> bool {
        match state.health.probe_at_ms {
            Some(probe_at) => now >= probe_at,
            None => now >= self.next_due(state),
        }
    }

    fn next_due(&self, state: &Places) -> u64 {
        let mut due = u64::MAX;
        if state.asked > 0 || state.in_use > state.held {
            due = state.full_until_ms;
        }
        if state.spare_prev > 0 {
            due = 0;
        } else if state.held > state.in_use {
            // Spare now: the end of this period tells whether it stayed spare through it.
            due = due.min((state.period + 1) * RETURN_SPARE_MS);
        }
        let beat = (self.shared.ttl_ms() / 3).max(1);
        due.min(state.answered_ms.map_or(0, |at| at + beat))
    }

    /// One call to Redis: grows the hold, gives spare permits back, or beats. Returns the
    /// permits taken or given back. A failure switches to the fallback; a success while in it
    /// switches back.
    ///
    /// # Errors
    ///
    /// Redis failed or took longer than the call timeout.
    pub async fn refill<C: ConnectionLike + Send>(&self, redis: &mut C) -> Result<u64, Error> {
        let refilled = match self.try_refill(redis).await {
            Ok(moved) => Ok(moved),
            Err(err) => {
                self.failed(&err);
                Err(err)
            }
        };
        self.refilled.done();
        refilled
    }

    /// Whether `count` more requests can be decided now without waiting for a refill: they fit
    /// in the hold, Redis was just found with no place free (a refusal is due), or Redis fails
    /// (the fallback decides).
    pub fn is_ready(&self, count: u32) -> bool {
        let now = self.clock.now_millis();
        let state = lock(&self.state);
        state.health.in_fallback()
            || state.in_use.saturating_add(u64::from(count)) <= state.held
            || now < state.full_until_ms
    }

    /// Asks for a hold of `count` places more and waits for it (at most twice the call
    /// timeout), unless [`is_ready`](Self::is_ready) already; see
    /// [`Leased::until_ready`](crate::Leased::until_ready).
    pub async fn until_ready(&self, count: u32) {
        let ask = || {
            let mut state = lock(&self.state);
            state.asked = state.asked.saturating_add(u64::from(count));
            drop(state);
            self.wanted.notify_one();
        };
        let within = crate::ready::bound(&self.settings, self.mode());
        self.refilled
            .wait(within, ask, || self.is_ready(count))
            .await;
    }

    async fn try_refill<C: ConnectionLike + Send>(&self, redis: &mut C) -> Result<u64, Error> {
        let (mode, count): (&str, u64) = {
            let now = self.clock.now_millis();
            let mut state = lock(&self.state);
            let elapsed = now.saturating_sub(state.refilled_ms).max(1);
            let deficit = state.in_use.saturating_sub(state.held);
            let call = if (state.asked > 0 || deficit > 0) && now >= state.full_until_ms {
                // The demand at its pace over the spare period, at least what was asked, at
                // most a batch; and the requests in flight the hold does not cover.
                let expected = state.asked.saturating_mul(RETURN_SPARE_MS) / elapsed;
                let want = expected.max(state.asked).min(self.settings.max_batch);
                ("upto", want + deficit)
            } else if state.spare_prev > 0 {
                let spare = std::mem::take(&mut state.spare_prev)
                    .min(state.held.saturating_sub(state.in_use));
                // Not admitted from while they go back.
                state.held -= spare;
                state.spare_low = state.spare_low.min(state.held - state.in_use);
                ("return", spare)
            } else {
                ("beat", 0)
            };
            state.asked = 0;
            state.refilled_ms = now;
            call
        };
        let call = self.shared.call_mode(redis, mode, count);
        let answer = crate::timed::timed(self.settings.call_timeout, call).await?;
        let now = self.clock.now_millis();
        let mut state = lock(&self.state);
        let live = answer.live.max(1);
        let before = std::mem::replace(&mut state.live, live);
        if state.health.answered(self.shared.key(), live, now) {
            // A probe: the connection, then its one call.
            let within = crate::health::return_ms(&self.settings, 1);
            let ttl = crate::health::ttl_ms(&self.settings);
            state.health.returned(now, before, within, ttl);
        }
        state.answered_ms = Some(now);
        state.fleet_in_use = answer.level;
        // Redis's word on what this process holds (a hold that ran out is 0).
        state.held = answer.tag;
        state.spare_low = state.spare_low.min(state.held.saturating_sub(state.in_use));
        if mode == "upto" && answer.count < count {
            state.full_until_ms = now + RETRY_FULL_MS;
        }
        Ok(answer.count)
    }

    /// Redis failed: the fallback from now on (logged once), and a probe after `probe_every`.
    fn failed(&self, err: &Error) {
        let now = self.clock.now_millis();
        let (key, fallback, every) = (
            self.shared.key(),
            self.settings.fallback,
            self.settings.probe_every,
        );
        lock(&self.state)
            .health
            .failed(key, err, fallback, now, every);
        // Requests waiting for a first answer decide by the fallback now.
        self.refilled.done();
    }

    /// Permits this process holds in Redis, as last answered.
    pub fn held(&self) -> u64 {
        lock(&self.state).held
    }

    /// This process's requests in flight.
    pub fn in_use(&self) -> u64 {
        lock(&self.state).in_use
    }

    /// Whether it admits against the shared limit or its fallback, or has not heard from
    /// Redis yet.
    pub fn mode(&self) -> LeaseMode {
        lock(&self.state).health.mode()
    }

    /// While it is in its fallback: why, Redis's last error (a refused connection, a timeout,
    /// an error Redis answered with). `None` while Redis answers.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.state).health.error()
    }

    /// The calls to Redis (and connections) that failed since it was made.
    pub fn failures(&self) -> u64 {
        lock(&self.state).health.failures()
    }

    /// Whether it is just back on Redis after a failure and keeps to its fallback's share
    /// besides Redis's answer, until the other processes have had the chance to be back too
    /// (see docs/cluster.md, "The bound across a failure").
    pub fn keeps_to_share(&self) -> bool {
        let now = self.clock.now_millis();
        let policy = self.settings.fallback;
        lock(&self.state).health.keeps_to_share(now, policy)
    }

    /// The processes sharing the limit, which its fallback shares it among: as the last
    /// heartbeat's answer counted them (before any: `assumed_processes`), or, after a return
    /// from a failure until Redis has answered for a heartbeat TTL, as many as the fallback
    /// counted if that is more (a Redis that restarted empty counts the first process back
    /// alone).
    pub fn live_processes(&self) -> u64 {
        let state = lock(&self.state);
        state.health.share_live(state.live)
    }

    /// Refills whenever one is due, until the future is dropped (run it in a task of its own).
    pub async fn drive<C: ConnectionLike + Send>(
        &self,
        redis: C,
        on_refill: impl FnMut(Result<u64, &Error>),
    ) {
        driver::drive(self, redis, on_refill).await;
    }

    /// Connects to `target` (one Redis or a Redis Cluster), then [`drive`](Self::drive)s; in
    /// the fallback until it connects.
    pub async fn connect_and_drive(
        &self,
        target: impl Into<Target>,
        on_refill: impl FnMut(Result<u64, &Error>),
    ) {
        driver::connect_and_drive(self, target.into(), on_refill).await;
    }
}

impl Driven for LeasedConcurrency {
    fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    fn wants_refill(&self) -> bool {
        LeasedConcurrency::wants_refill(self)
    }

    fn wait_ms(&self) -> u64 {
        let state = lock(&self.state);
        let due = state
            .health
            .probe_at_ms
            .unwrap_or_else(|| self.next_due(&state));
        due.saturating_sub(self.clock.now_millis())
    }

    fn wanted(&self) -> &tokio::sync::Notify {
        &self.wanted
    }

    fn failed(&self, err: &Error) {
        LeasedConcurrency::failed(self, err);
    }

    async fn refill<C: ConnectionLike + Send>(&self, redis: &mut C) -> Result<u64, Error> {
        LeasedConcurrency::refill(self, redis).await
    }
}

/// Starts the period of `now` if it is a new one: the fewest spare permits of the last whole
/// period are those to give back.
fn roll(state: &mut Places, now: u64) {
    let period = now / RETURN_SPARE_MS;
    if period == state.period {
        return;
    }
    let spare = state.held.saturating_sub(state.in_use);
    // The period just ended had its low; any whole period since, nothing changed: `spare`.
    state.spare_prev = if period == state.period + 1 {
        state.spare_low.min(spare)
    } else {
        spare
    };
    state.spare_low = spare;
    state.period = period;
}

/// A leased concurrency limit as a cluster rule's limit: passes held until the entry ends.
impl SharedLimit for LeasedConcurrency {
    fn try_take(&self, count: u32) -> Result<(), SharedRefusal> {
        self.take(count)
    }

    fn give_back(&self, count: u32) {
        self.release(count);
    }

    fn held_until_exit(&self) -> bool {
        true
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
        LeasedConcurrency::keeps_to_share(self)
    }

    fn last_error(&self) -> Option<String> {
        LeasedConcurrency::last_error(self)
    }

    fn failures(&self) -> u64 {
        LeasedConcurrency::failures(self)
    }

    fn is_ready(&self, count: u32) -> bool {
        LeasedConcurrency::is_ready(self, count)
    }

    fn until_ready(&self, count: u32) -> spillway::cluster::Ready<'_> {
        Box::pin(LeasedConcurrency::until_ready(self, count))
    }
}
