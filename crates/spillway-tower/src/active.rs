use spillway::dubbo::{ActiveAdmission, ActiveKey, ActivePermit};
use spillway::BlockError;
use std::time::Duration;

/// Takes a slot of a Dubbo `actives` key, awaiting up to `timeout` on a tokio timer for one: the
/// async twin of [`ActiveKey::acquire`].
///
/// Waiters are served oldest first; a caller that times out leaves the queue, and one whose
/// future is dropped (cancelled) leaves it too. Either way, a slot handed to it in the meantime
/// goes on to the next waiter (or, on a timeout, is returned), so no wake-up is ever lost.
///
/// # Errors
///
/// A [`BlockKind::Actives`](spillway::BlockKind::Actives) error when no slot came within
/// `timeout` (with the time waited, the calls in flight and `max`), or
/// [`BlockKind::ActivesQueueFull`](spillway::BlockKind::ActivesQueueFull) when too many wait.
///
/// # Examples
///
/// ```
/// use spillway::dubbo::ActiveLimiter;
/// use spillway::BlockKind;
/// use spillway_tower::{acquire_active, TokioClock};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), spillway::BlockError> {
/// let actives = ActiveLimiter::new_with_clock(TokioClock::new());
/// let key = actives.key("OrderService.create")?;
/// let held = acquire_active(&key, 1, Duration::from_secs(1)).await?;
/// let err = acquire_active(&key, 1, Duration::from_millis(300)).await.unwrap_err();
/// assert_eq!((err.kind(), err.waited()), (BlockKind::Actives, Some(Duration::from_millis(300))));
/// drop(held);
/// let _permit = acquire_active(&key, 1, Duration::from_secs(1)).await?;
/// # Ok(())
/// # }
/// ```
pub async fn acquire_active(
    key: &ActiveKey,
    max: u32,
    timeout: Duration,
) -> Result<ActivePermit, BlockError> {
    match key.acquire_or_queue(max, timeout)? {
        ActiveAdmission::Ready(permit) => Ok(permit),
        ActiveAdmission::Queued(mut wait) => {
            // Dropping this future drops `wait`, which leaves the queue (passing on any grant).
            match tokio::time::timeout(wait.remaining(), &mut wait).await {
                Ok(permit) => Ok(permit),
                Err(_elapsed) => wait.give_up(),
            }
        }
    }
}
