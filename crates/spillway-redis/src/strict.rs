//! The *strict* check of a shared limit, for a request path that can wait for one round trip:
//! one atomic script call per request, with the same protection from a failing Redis as a
//! lease has (a short timeout, no calls until the next probe after a failure, a fallback).

use crate::driver::{connect, Connection, Target};
use crate::health::Health;
use crate::lock::lock;
use crate::rate_fallback::RateFallback;
use crate::settings::{check_lease_settings, default_member, LeaseMode, LeaseSettings};
use crate::shared::{self, Beat, Mode, Shared};
use crate::Error;
use spillway::cluster::SharedRefusal;
use spillway::Clock;
use std::sync::{Arc, Mutex};

/// A shared limit checked with one script call per request: exact across the fleet while Redis
/// answers, a round trip per request.
///
/// - [`Strict::connect`] keeps a connection, in a task of its own. Once connected, it asks
///   Redis for the fleet's state (one call that sends this process's heartbeat) before any
///   request is decided: until that first answer, requests wait (at most
///   [`LeaseSettings::startup_wait`]), so that the first requests of a process are decided by
///   Redis, not by a fallback that does not know the fleet yet.
/// - [`Strict::check`] counts and decides in one atomic call (within `call_timeout`), sending
///   this process's heartbeat with it.
/// - A call that fails or is slow switches to the fallback at once (logged): requests are
///   decided by [`Fallback`](crate::Fallback) with no call, so they do not each wait for the
///   timeout. The fallback's local window starts from what this process admitted through
///   Redis in the last second. [`Strict::connect`] probes every `probe_every`; at the first
///   answer it first tells Redis what the fallback admitted (so the window counts it, whether
///   Redis kept its state or restarted empty), then switches back (logged).
///
/// ```no_run
/// # async fn demo() -> Result<(), spillway_redis::Error> {
/// use spillway_redis::{LeaseSettings, SharedWindow, Strict};
/// use std::sync::Arc;
/// let window = SharedWindow::per_second("orders", 1000.0)?;
/// let clock = Arc::new(spillway::SystemClock::new());
/// let strict = Arc::new(Strict::new(window, clock, LeaseSettings::default())?);
/// let connector = strict.clone();
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// tokio::spawn(async move { connector.connect(client).await });
/// if strict.check(1).await.is_ok() {
///     // serve it
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Strict<S: Shared> {
    limit: S,
    clock: Arc<dyn Clock>,
    settings: LeaseSettings,
    member: String,
    members_key: String,
    state: Mutex<State>,
    /// What it admits while Redis fails.
    fallback: RateFallback,
    /// Wakes [`Strict::connect`] when the connection was dropped.
    lost: tokio::sync::Notify,
    /// Wakes the requests waiting for the first answer.
    answered: crate::ready::Refilled,
}

#[derive(Default)]
struct State {
    connection: Option<Connection>,
    /// How many times the connection was dropped after a failure: a call made on a connection
    /// dropped since (another call on it failed first) neither ends nor starts a fallback.
    dropped: u64,
    /// Whether Redis answers (ms, this process's clock).
    health: Health,
    /// Live processes, from the last answer.
    live: u64,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("connected", &self.connection.is_some())
            .field("dropped", &self.dropped)
            .field("health", &self.health)
            .field("live", &self.live)
            .finish()
    }
}

impl<S: Shared> Strict<S> {
    /// A strict check of `limit`, as `settings` say (`max_batch` is not used). It is
    /// [`LeaseMode::Starting`] until [`Strict::connect`] has had Redis's first answer.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if a setting cannot work, as for a lease.
    pub fn new(limit: S, clock: Arc<dyn Clock>, settings: LeaseSettings) -> Result<Self, Error> {
        check_lease_settings(&settings)?;
        let member = match &settings.member {
            Some(member) if member.is_empty() => {
                return Err(Error::Invalid("member must not be empty".into()))
            }
            Some(member) => member.clone(),
            None => default_member(clock.as_ref()),
        };
        let state = State {
            live: settings.assumed_processes,
            health: Health::default(),
            connection: None,
            dropped: 0,
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
            state: Mutex::new(state),
            lost: tokio::sync::Notify::new(),
            answered: crate::ready::Refilled::default(),
        })
    }

    /// Counts `count` and decides, in one call to Redis; or, while Redis fails, by the fallback
    /// with no call. Before the first answer it waits for it (at most `startup_wait`), and
    /// refuses if none came by then (Redis neither answered nor failed).
    ///
    /// # Errors
    ///
    /// The refusal: the limit's reading against it (in the fallback, the local rate against the
    /// share).
    pub async fn check(&self, count: u32) -> Result<(), SharedRefusal> {
        if self.mode() == LeaseMode::Starting {
            let within = crate::ready::bound(&self.settings, LeaseMode::Starting);
            let starting = || self.mode() == LeaseMode::Starting;
            self.answered.wait(within, || {}, || !starting()).await;
        }
        let now = self.clock.now_nanos();
        let (mode, connection, dropped, returning, asking) = {
            let state = lock(&self.state);
            let returning = state.health.returning(now / 1_000_000, state.live);
            let connection = state.connection.clone();
            let mode = state.health.mode();
            // To be asked of Redis: counted against the share from under the lock a failure
            // takes to start the fallback, so that a fallback that starts before its answer
            // does not admit its place too (unless the share counts it already).
            let asks = mode == LeaseMode::Global && connection.is_some() && returning.is_none();
            let asking = asks.then(|| self.fallback.asking(count));
            (mode, connection, state.dropped, returning, asking)
        };
        let mut connection = match (mode, connection) {
            (LeaseMode::Global, Some(connection)) => connection,
            (LeaseMode::Fallback, _) => return self.fallback_takes(count),
            // No answer from Redis within `startup_wait`: not admitted without it.
            _ => return Err(SharedRefusal::new(0.0, self.limit.rate())),
        };
        if let Some(live) = returning {
            // Just back on Redis: within the share too, while the others may still be in
            // their fallbacks (counted here whatever Redis says).
            let rate = self.limit.rate();
            self.fallback
                .within_share(rate, live, self.clock.as_ref(), count)?;
        }
        let beat = self.beat();
        let invocation = self
            .limit
            .invocation(Mode::All, u64::from(count), 0, Some(&beat));
        let call = shared::call(&mut connection, invocation);
        match crate::timed::timed(self.settings.call_timeout, call).await {
            Ok(answer) => {
                let mut state = lock(&self.state);
                // Sent before another call on its connection failed: only a probe, which
                // first tells Redis what the fallback admitted, ends the fallback.
                if state.dropped == dropped {
                    self.answered(&mut state, &answer, now);
                }
                drop(state);
                if count > 0 && answer.count == u64::from(count) {
                    if let Some(asking) = asking {
                        asking.admitted(answer.now_ms);
                    }
                    Ok(())
                } else {
                    Err(SharedRefusal::new(
                        self.limit.reading(&answer),
                        self.limit.rate(),
                    ))
                }
            }
            Err(err) => {
                // Decided by the fallback, not asked any more.
                drop(asking);
                self.failed(&err, dropped);
                self.fallback_takes(count)
            }
        }
    }

    /// This process's heartbeat, sent with each call.
    fn beat(&self) -> Beat<'_> {
        Beat {
            key: &self.members_key,
            member: &self.member,
            ttl_ms: self.settings.heartbeat_ttl.as_millis() as u64,
        }
    }

    /// Redis answered a call sent at `sent_nanos` on the connection `state` holds: on the
    /// shared limit, with the live processes it counted; after a failure, keeping to the
    /// fallback's share for a while.
    fn answered(&self, state: &mut State, answer: &shared::Answer, sent_nanos: u64) {
        let answered_nanos = self.clock.now_nanos();
        self.fallback
            .observe(answer.now_ms, sent_nanos, answered_nanos);
        let now = answered_nanos / 1_000_000;
        let before = state.live;
        state.live = answer.live.max(1);
        let live = state.live;
        if state.health.answered(self.limit.key(), live, now) {
            let (span, group) = (self.limit.span_ms(), self.limit.report_group_ms());
            let calls = crate::health::rate_probe_calls(span, group);
            let within = crate::health::return_ms(&self.settings, calls);
            let ttl = crate::health::ttl_ms(&self.settings);
            state.health.returned(now, before, within, ttl);
        }
    }

    /// Admits `count` by the fallback.
    fn fallback_takes(&self, count: u32) -> Result<(), SharedRefusal> {
        let live = {
            let state = lock(&self.state);
            state.health.share_live(state.live)
        };
        let clock = self.clock.as_ref();
        self.fallback.takes(self.limit.rate(), live, clock, count)
    }

    /// A request's call, made after `on` drops of the connection, failed: the fallback from
    /// now on (logged once), the connection dropped, and [`Strict::connect`] woken to probe
    /// `probe_every` later. A call on a connection dropped since is only counted: the failure
    /// before it switched already, and a probe may have made a new connection since, which
    /// this failure says nothing of.
    fn failed(&self, err: &Error, on: u64) {
        let mut state = lock(&self.state);
        if on != state.dropped {
            state.health.failed_before();
            return;
        }
        self.fall_back(&mut state, err);
        drop(state);
        self.answered.done();
        self.lost.notify_one();
    }

    /// Redis failed: the fallback (logged when it was not), no connection, a probe after
    /// `probe_every`. The caller then wakes the requests waiting for a first answer, which
    /// decide now.
    fn fall_back(&self, state: &mut State, err: &Error) {
        let now = self.clock.now_millis();
        let (key, fallback, every) = (
            self.limit.key(),
            self.settings.fallback,
            self.settings.probe_every,
        );
        state.health.failed(key, err, fallback, now, every);
        if state.connection.take().is_some() {
            state.dropped += 1;
        }
    }

    /// Keeps a connection to `target` for [`Strict::check`], for good (run it in a task of its
    /// own): connects and asks Redis for the fleet's state at once (each within the call
    /// timeout; the connection within four), again every third of `heartbeat_ttl` while Redis
    /// answers (this process's heartbeat, requests or not), and every `probe_every` while it
    /// fails.
    /// The first answer after a failure is preceded by the report of what the fallback
    /// admitted.
    pub async fn connect(&self, target: impl Into<Target>) {
        let target = target.into();
        loop {
            let (failing, connected) = {
                let state = lock(&self.state);
                (state.health.in_fallback(), state.connection.is_some())
            };
            if failing {
                // The probe period after a failure (a request's or a probe's).
                tokio::time::sleep(self.settings.probe_every).await;
                self.probe(&target).await;
            } else if connected {
                // Redis answers: a beat every third of the heartbeat's TTL besides the
                // requests' own, so that a quiet process stays counted among the live ones,
                // knows how many they are, and finds a failing Redis without a request.
                let beat_every = self.settings.heartbeat_ttl / 3;
                let lost = tokio::time::timeout(beat_every, self.lost.notified()).await;
                if lost.is_err() {
                    self.probe(&target).await;
                }
            } else {
                // Before the first answer.
                self.probe(&target).await;
            }
        }
    }

    /// One probe: a connection (a new one if there is none), the fallback's admissions
    /// reported, and the fleet's state read with this process's heartbeat.
    async fn probe(&self, target: &Target) {
        let timeout = self.settings.call_timeout;
        let (existing, dropped) = {
            let state = lock(&self.state);
            (state.connection.clone(), state.dropped)
        };
        let reused = existing.is_some();
        let group = self.limit.report_group_ms();
        let probed = async {
            let mut connection = match existing {
                Some(connection) => connection,
                None => connect(target, timeout).await?,
            };
            // Taken once connected, so that their ages are as of the calls (a report's age
            // tells a bucket made meanwhile whether its passes came before it).
            let now = self.clock.now_nanos();
            let reports = self.fallback.take_unreported(now, group);
            let taken = (self.clock.as_ref(), now);
            let reported = shared::report(&self.limit, &mut connection, &reports, timeout, taken);
            if let Err((sent, err)) = reported.await {
                // What Redis did not count is reported at the next probe.
                self.fallback.restore(now, &reports[sent..]);
                return Err(err);
            }
            let beat = self.beat();
            let invocation = self.limit.invocation(Mode::UpTo, 0, 0, Some(&beat));
            let sent = self.clock.now_nanos();
            let answer =
                crate::timed::timed(timeout, shared::call(&mut connection, invocation)).await?;
            Ok::<_, Error>((connection, answer, sent))
        };
        match probed.await {
            Ok((connection, answer, sent)) => {
                let mut state = lock(&self.state);
                // A request's call failed meanwhile on the connection it reused: dropped, and
                // the fallback that failure started is the next probe's to end.
                if !reused || state.dropped == dropped {
                    state.connection = Some(connection);
                    self.answered(&mut state, &answer, sent);
                }
                drop(state);
                self.answered.done();
            }
            Err(err) => {
                self.fall_back(&mut lock(&self.state), &err);
                self.answered.done();
            }
        }
    }

    /// Whether it holds a connection ([`Strict::connect`] made one, and no call has failed on
    /// it since).
    pub fn is_connected(&self) -> bool {
        lock(&self.state).connection.is_some()
    }

    /// Whether it decides against the shared limit or by its fallback, or has not heard from
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

    /// The limit it checks.
    pub fn limit(&self) -> &S {
        &self.limit
    }
}
