//! The task that keeps a leased limit supplied: refills when one is due, connects (and keeps
//! trying to) when Redis is down at startup. One loop for every kind of lease.

use crate::settings::LeaseSettings;
use crate::Error;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::future::Future;
use std::time::Duration;

/// A lease the driver refills.
pub(crate) trait Driven {
    /// Its settings (the timeouts, the probe period).
    fn settings(&self) -> &LeaseSettings;
    /// Whether a refill is due now.
    fn wants_refill(&self) -> bool;
    /// Milliseconds until the next refill is due if nothing changes before.
    fn wait_ms(&self) -> u64;
    /// Woken when a request finds a refill due.
    fn wanted(&self) -> &tokio::sync::Notify;
    /// Redis failed: the fallback from now on, and a probe later.
    fn failed(&self, err: &Error);
    /// One refill.
    fn refill<C: ConnectionLike + Send>(
        &self,
        redis: &mut C,
    ) -> impl Future<Output = Result<u64, Error>> + Send;
}

/// Refills whenever one is due, until the future is dropped. A failed refill leaves the
/// connection to reconnect by itself (a connection manager does).
pub(crate) async fn drive<D: Driven + Sync, C: ConnectionLike + Send>(
    lease: &D,
    mut redis: C,
    mut on_refill: impl FnMut(Result<u64, &Error>),
) {
    loop {
        drive_until_failure(lease, &mut redis, &mut on_refill, false).await;
    }
}

/// Refills whenever one is due (and at once if `now`), until a refill fails.
async fn drive_until_failure<D: Driven + Sync, C: ConnectionLike + Send>(
    lease: &D,
    redis: &mut C,
    on_refill: &mut impl FnMut(Result<u64, &Error>),
    mut now: bool,
) {
    loop {
        if std::mem::take(&mut now) || lease.wants_refill() {
            match lease.refill(redis).await {
                Ok(granted) => on_refill(Ok(granted)),
                Err(err) => {
                    on_refill(Err(&err));
                    return;
                }
            }
        }
        let wait = Duration::from_millis(lease.wait_ms().max(1));
        let _ = tokio::time::timeout(wait, lease.wanted().notified()).await;
    }
}

/// Where a lease's driver connects: one Redis, or a Redis Cluster.
///
/// ```
/// use spillway_redis::Target;
/// let one = Target::from(redis::Client::open("redis://127.0.0.1:6379")?);
/// let cluster = Target::from(redis::cluster::ClusterClient::new(vec![
///     "redis://10.0.0.1:7000",
///     "redis://10.0.0.2:7000",
/// ])?);
/// # Ok::<(), redis::RedisError>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum Target {
    /// One Redis, through redis-rs's connection manager (which reconnects by itself).
    Single(redis::Client),
    /// A Redis Cluster, through redis-rs's cluster connection (which follows the slots).
    Cluster(redis::cluster::ClusterClient),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Single(client) => write!(f, "Single({:?})", client.get_connection_info().addr),
            Self::Cluster(_) => f.write_str("Cluster"),
        }
    }
}

impl From<redis::Client> for Target {
    fn from(client: redis::Client) -> Self {
        Self::Single(client)
    }
}

impl From<redis::cluster::ClusterClient> for Target {
    fn from(client: redis::cluster::ClusterClient) -> Self {
        Self::Cluster(client)
    }
}

/// A connection to one Redis or to a Redis Cluster, as a driver or a
/// [`crate::Strict`] holds it.
#[derive(Clone)]
pub(crate) enum Connection {
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

/// A connection to `target`, each call within `call_timeout` (one Redis: the connection
/// manager's own attempts too), made within four of them. One attempt: the caller tries again
/// at its next probe, and a refused connection or a refused password is its own error, not
/// the timeout of a retry's back-off (redis-rs waits a second or more before its first).
pub(crate) async fn connect(target: &Target, call_timeout: Duration) -> Result<Connection, Error> {
    let timeout = call_timeout * 4;
    let connected = match target {
        Target::Single(client) => {
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(call_timeout)
                .set_response_timeout(call_timeout)
                .set_number_of_retries(0);
            let connecting = client.get_connection_manager_with_config(config);
            tokio::time::timeout(timeout, connecting)
                .await
                .map(|made| made.map(Connection::Single))
        }
        Target::Cluster(client) => tokio::time::timeout(timeout, client.get_async_connection())
            .await
            .map(|made| made.map(Connection::Cluster)),
    };
    match connected {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(err)) => Err(Error::from(err)),
        Err(_) => Err(Error::Timeout(timeout)),
    }
}

/// Connects to `target`, then refills whenever one is due. Until a connection is made, the
/// lease is in its fallback and a connection is tried every `probe_every`; after a failed
/// refill, the connection is dropped and a new one made at the next probe, so that a Redis
/// that comes back is found by the first probe after (not by the connection's own reconnection
/// backoff).
pub(crate) async fn connect_and_drive<D: Driven + Sync>(
    lease: &D,
    target: Target,
    mut on_refill: impl FnMut(Result<u64, &Error>),
) {
    let timeout = lease.settings().call_timeout;
    loop {
        let failure = match connect(&target, timeout).await {
            Ok(mut redis) => {
                // A new connection is a probe that succeeded: refill at once.
                drive_until_failure(lease, &mut redis, &mut on_refill, true).await;
                None
            }
            Err(err) => Some(err),
        };
        if let Some(err) = failure {
            lease.failed(&err);
            on_refill(Err(&err));
        }
        // The lease is in its fallback now: the next connection at its next probe.
        tokio::time::sleep(lease.settings().probe_every).await;
    }
}
