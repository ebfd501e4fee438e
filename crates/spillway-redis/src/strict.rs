//! The *strict* check of a shared limit, for a request path that can wait for one round trip:
//! one atomic script call per request, with the same protection from a failing Redis as a
//! lease has (a short timeout, no calls until the next probe after a failure, a fallback).

use crate::driver::{connect, Connection, Target};
use crate::health::{Health, RateFallback};
use crate::lease::{check_lease_settings, default_member, lock, LeaseMode, LeaseSettings};
use crate::shared::{self, Beat, Mode, Shared};
use crate::Error;
use spillway::cluster::SharedRefusal;
use spillway::Clock;
use std::sync::{Arc, Mutex};

/// A shared limit checked with one script call per request: exact across the fleet while Redis
/// answers, a round trip per request.
///
/// - [`Strict::check`] counts and decides in one atomic call (within `call_timeout`), sending
///   this process's heartbeat with it.
/// - A call that fails or is slow switches to the fallback at once (logged once): until the
///   next probe (every `probe_every`), requests are decided by [`Fallback`](crate::Fallback)
///   with no call, so they do not each wait for the timeout. The request due at a probe tries Redis; the first
///   answer switches back.
/// - [`Strict::connect`] keeps a connection: made when it is missing, dropped after a failed
///   call and made again at the next probe. Run it in a task of its own.
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
}

#[derive(Default)]
struct State {
    connection: Option<Connection>,
    /// Whether Redis answers (ms, this process's clock).
    health: Health,
    /// Live processes, from the last answer.
    live: u64,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("connected", &self.connection.is_some())
            .field("health", &self.health)
            .field("live", &self.live)
            .finish()
    }
}

impl<S: Shared> Strict<S> {
    /// A strict check of `limit`, as `settings` say (`max_batch` is not used). It starts in its
    /// fallback until [`Strict::connect`] has a connection.
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
            health: Health::unreached(),
            connection: None,
        };
        Ok(Self {
            members_key: shared::members_key(limit.key()),
            limit,
            clock,
            fallback: RateFallback::new(settings.fallback),
            settings,
            member,
            state: Mutex::new(state),
            lost: tokio::sync::Notify::new(),
        })
    }

    /// Counts `count` and decides, in one call to Redis; or, while Redis fails, by the fallback
    /// with no call.
    ///
    /// # Errors
    ///
    /// The refusal: the limit's reading against it (in the fallback, the local rate against the
    /// share).
    pub async fn check(&self, count: u32) -> Result<(), SharedRefusal> {
        let now = self.clock.now_millis();
        let connection = {
            let mut state = lock(&self.state);
            match (state.health.probe_at_ms, state.connection.clone()) {
                // Healthy.
                (None, Some(connection)) => Some(connection),
                // Failing, and a probe is due: this request is it; the next waits a period.
                (Some(at), Some(connection)) if now >= at => {
                    state.health.probe_at_ms = Some(now + self.probe_ms());
                    Some(connection)
                }
                _ => None,
            }
        };
        let Some(mut connection) = connection else {
            return self.fallback_takes(count);
        };
        let beat = Beat {
            key: &self.members_key,
            member: &self.member,
            ttl_ms: self.settings.heartbeat_ttl.as_millis() as u64,
        };
        let invocation = self
            .limit
            .invocation(Mode::All, u64::from(count), 0, Some(&beat));
        let call = shared::call(&mut connection, invocation);
        match crate::driver::timed(self.settings.call_timeout, call).await {
            Ok(answer) => {
                let mut state = lock(&self.state);
                state.health.answered(self.limit.key());
                state.live = answer.live.max(1);
                drop(state);
                if count > 0 && answer.count == u64::from(count) {
                    Ok(())
                } else {
                    Err(SharedRefusal::new(
                        self.limit.reading(&answer),
                        self.limit.rate(),
                    ))
                }
            }
            Err(err) => {
                self.failed(&err);
                self.fallback_takes(count)
            }
        }
    }

    /// Admits `count` by the fallback.
    fn fallback_takes(&self, count: u32) -> Result<(), SharedRefusal> {
        let live = lock(&self.state).live;
        let now = self.clock.now_nanos();
        self.fallback.takes(self.limit.rate(), live, now, count)
    }

    fn probe_ms(&self) -> u64 {
        self.settings.probe_every.as_millis() as u64
    }

    /// Redis failed: the fallback from now on (logged once), the connection dropped, and a
    /// probe after `probe_every`.
    fn failed(&self, err: &Error) {
        let now = self.clock.now_millis();
        let (key, fallback, every) = (
            self.limit.key(),
            self.settings.fallback,
            self.settings.probe_every,
        );
        let mut state = lock(&self.state);
        state.health.failed(key, err, fallback, now, every);
        state.connection = None;
        drop(state);
        self.lost.notify_one();
    }

    /// Keeps a connection to `target` for [`Strict::check`], for good (run it in a task of its
    /// own): makes one when there is none (within four call timeouts; every `probe_every` until
    /// one is made), and makes a new one after a failed call drops it.
    pub async fn connect(&self, target: impl Into<Target>) {
        let target = target.into();
        let mut first = true;
        loop {
            let missing = lock(&self.state).connection.is_none();
            if missing {
                match connect(&target, self.settings.call_timeout).await {
                    // The next request is the probe.
                    Ok(connection) => lock(&self.state).connection = Some(connection),
                    Err(err) => {
                        if first {
                            tracing::warn!(limit = %self.limit.key(), error = %err, fallback = ?self.settings.fallback, "shared limit: cannot reach Redis, falling back until it answers");
                        }
                        self.failed(&err);
                    }
                }
                first = false;
            }
            let _ = tokio::time::timeout(self.settings.probe_every, self.lost.notified()).await;
        }
    }

    /// Whether it holds a connection ([`Strict::connect`] made one, and no call has failed on
    /// it since).
    pub fn is_connected(&self) -> bool {
        lock(&self.state).connection.is_some()
    }

    /// Whether it decides against the shared limit or by its fallback.
    pub fn mode(&self) -> LeaseMode {
        lock(&self.state).health.mode()
    }

    /// The processes sharing the limit, as the last answer counted them.
    pub fn live_processes(&self) -> u64 {
        lock(&self.state).live
    }

    /// The limit it checks.
    pub fn limit(&self) -> &S {
        &self.limit
    }
}
