//! A call to Redis within a timeout.

use crate::Error;
use std::future::Future;
use std::time::Duration;

/// `call`, within `timeout`: a call that takes longer is a failure.
pub(crate) async fn timed<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or(Err(Error::Timeout(timeout)))
}
