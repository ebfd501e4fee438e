//! The *strict* check of a shared limit, for a request path that can wait for one round trip:
//! one atomic script call per request, with the same protection from a failing Redis as a
//! lease has (a short timeout, no calls until the next probe after a failure, a fallback).

use crate::driver::Target;
use crate::lease::{
    check_lease_settings, default_member, lock, Fallback, LeaseMode, LeaseSettings,
};
use crate::shared::{self, Beat, Mode, Shared};
use crate::Error;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use spillway::cluster::SharedRefusal;
use spillway::flow::{Decision, QpsReject};
use spillway::stats::{NodeConfig, ResourceNode};
use spillway::Clock;
use std::sync::{Arc, Mutex};

/// A connection to one Redis or to a Redis Cluster, as [`Strict`] holds it.
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(redis) => redis.req_packed_command(cmd),
            Self::Cluster(redis) => redis.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(redis) => redis.req_packed_commands(cmd, offset, count),
            Self::Cluster(redis) => redis.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(redis) => redis.get_db(),
            Self::Cluster(redis) => redis.get_db(),
        }
    }
}

/// A shared limit checked with one script call per request: exact across the fleet while Redis
/// answers, a round trip per request.
///
/// - [`Strict::check`] counts and decides in one atomic call (within `call_timeout`), sending
///   this process's heartbeat with it.
/// - A call that fails or is slow switches to the fallback at once (logged once): until the
///   next probe (every `probe_every`), requests are decided by [`Fallback`] with no call, so
///   they do not each wait for the timeout. The request due at a probe tries Redis; the first
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
    /// The fallback's local window.
    local: ResourceNode,
    /// Wakes [`Strict::connect`] when the connection was dropped.
    lost: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    connection: Option<Connection>,
    /// While Redis fails: when to try it again (ms, this process's clock).
    probe_at_ms: Option<u64>,
    /// Live processes, from the last answer.
    live: u64,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("connected", &self.connection.is_some())
            .field("probe_at_ms", &self.probe_at_ms)
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
            probe_at_ms: Some(0),
            connection: None,
        };
        Ok(Self {
            members_key: shared::members_key(limit.key()),
            limit,
            clock,
            settings,
            member,
            state: Mutex::new(state),
            local: ResourceNode::new(NodeConfig::default()),
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
            match (state.probe_at_ms, state.connection.clone()) {
                // Healthy.
                (None, Some(connection)) => Some(connection),
                // Failing, and a probe is due: this request is it; the next waits a period.
                (Some(at), Some(connection)) if now >= at => {
                    state.probe_at_ms = Some(now + self.probe_ms());
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
                if state.probe_at_ms.take().is_some() {
                    tracing::info!(limit = %self.limit.key(), "shared limit: Redis answers again, back to the global limit");
                }
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

    fn probe_ms(&self) -> u64 {
        self.settings.probe_every.as_millis() as u64
    }

    /// Redis failed: the fallback from now on (logged once), the connection dropped, and a
    /// probe after `probe_every`.
    fn failed(&self, err: &Error) {
        let now = self.clock.now_millis();
        let mut state = lock(&self.state);
        if state.probe_at_ms.is_none() {
            tracing::warn!(limit = %self.limit.key(), error = %err, fallback = ?self.settings.fallback, "shared limit: Redis failed, falling back until it answers");
        }
        state.probe_at_ms = Some(now + self.probe_ms());
        state.connection = None;
        drop(state);
        self.lost.notify_one();
    }

    fn fallback_takes(&self, count: u32) -> Result<(), SharedRefusal> {
        match self.settings.fallback {
            Fallback::Open => Ok(()),
            Fallback::Closed => Err(SharedRefusal::new(0.0, 0.0)),
            Fallback::LocalShare => {
                let now = self.clock.now_nanos();
                let share = self.limit.rate() / lock(&self.state).live.max(1) as f64;
                if QpsReject::new(share).check(&self.local, now, count) == Decision::Pass {
                    self.local.add_pass(now, u64::from(count));
                    Ok(())
                } else {
                    Err(SharedRefusal::new(self.local.pass_qps(now), share))
                }
            }
        }
    }

    /// Keeps a connection to `target` for [`Strict::check`], for good (run it in a task of its
    /// own): makes one when there is none (within four call timeouts; every `probe_every` until
    /// one is made), and makes a new one after a failed call drops it.
    pub async fn connect(&self, target: impl Into<Target>) {
        let target = target.into();
        let timeout = self.settings.call_timeout * 4;
        let mut first = true;
        loop {
            let missing = lock(&self.state).connection.is_none();
            if missing {
                let connected = match &target {
                    Target::Single(client) => {
                        let config = redis::aio::ConnectionManagerConfig::new()
                            .set_connection_timeout(self.settings.call_timeout)
                            .set_response_timeout(self.settings.call_timeout)
                            .set_number_of_retries(1);
                        let connecting = client.get_connection_manager_with_config(config);
                        match tokio::time::timeout(timeout, connecting).await {
                            Ok(Ok(redis)) => Ok(Connection::Single(redis)),
                            Ok(Err(err)) => Err(Error::from(err)),
                            Err(_) => Err(Error::Timeout(timeout)),
                        }
                    }
                    Target::Cluster(client) => {
                        match tokio::time::timeout(timeout, client.get_async_connection()).await {
                            Ok(Ok(redis)) => Ok(Connection::Cluster(redis)),
                            Ok(Err(err)) => Err(Error::from(err)),
                            Err(_) => Err(Error::Timeout(timeout)),
                        }
                    }
                };
                match connected {
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
        match lock(&self.state).probe_at_ms {
            Some(_) => LeaseMode::Fallback,
            None => LeaseMode::Global,
        }
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
