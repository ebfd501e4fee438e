//! The task that keeps a leased limit supplied: refills when one is due, connects (and keeps
//! trying to) when Redis is down at startup. One loop for every kind of lease.

use crate::lease::LeaseSettings;
use crate::Error;
use redis::aio::ConnectionLike;
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

/// Refills whenever one is due, until the future is dropped.
pub(crate) async fn drive<D: Driven + Sync, C: ConnectionLike + Send>(
    lease: &D,
    mut redis: C,
    mut on_refill: impl FnMut(Result<u64, &Error>),
) {
    loop {
        if lease.wants_refill() {
            match lease.refill(&mut redis).await {
                Ok(granted) => on_refill(Ok(granted)),
                Err(err) => on_refill(Err(&err)),
            }
        }
        let wait = Duration::from_millis(lease.wait_ms().max(1));
        let _ = tokio::time::timeout(wait, lease.wanted().notified()).await;
    }
}

/// Connects to `client`'s Redis, then [`drive`]s. Until a connection is made, the lease is in
/// its fallback and a connection is tried every `probe_every`.
pub(crate) async fn connect_and_drive<D: Driven + Sync>(
    lease: &D,
    client: redis::Client,
    mut on_refill: impl FnMut(Result<u64, &Error>),
) {
    let timeout = lease.settings().call_timeout;
    loop {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout)
            .set_number_of_retries(1);
        let connected = tokio::time::timeout(
            timeout * 4,
            client.get_connection_manager_with_config(config),
        )
        .await;
        let err = match connected {
            Ok(Ok(redis)) => return drive(lease, redis, on_refill).await,
            Ok(Err(err)) => Error::from(err),
            Err(_) => Error::Timeout(timeout * 4),
        };
        lease.failed(&err);
        on_refill(Err(&err));
        tokio::time::sleep(lease.settings().probe_every).await;
    }
}

/// `call`, within `timeout`: a call that takes longer is a failure.
pub(crate) async fn timed<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or(Err(Error::Timeout(timeout)))
}
