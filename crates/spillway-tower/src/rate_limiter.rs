use spillway::{RateLimiter, Reservation};
use std::time::Duration;

/// Reserves `permits` and awaits them on a tokio timer: Guava's `acquire`, without blocking a
/// runtime thread. Returns the time waited.
///
/// Cancellation-safe: if the future is dropped while it waits, its reservation is given back
/// (when nothing was reserved after it, the next caller gets its moment; otherwise the permits
/// stay reserved and unused, and no later caller's moment moves). No permits are granted at
/// once.
///
/// # Examples
///
/// ```
/// use spillway::RateLimiter;
/// use spillway_tower::{acquire, TokioClock};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), spillway::RateLimiterError> {
/// let limiter = RateLimiter::bursty_with_clock(2.0, TokioClock::new())?;
/// acquire(&limiter, 1).await; // free
/// // A caller that gives up after 100 ms gives its 500 ms slot back...
/// let gave_up = tokio::time::timeout(Duration::from_millis(100), acquire(&limiter, 1)).await;
/// assert!(gave_up.is_err());
/// // ...so the next caller waits for that slot: 400 ms from now, not 900.
/// assert_eq!(acquire(&limiter, 1).await, Duration::from_millis(400));
/// # Ok(())
/// # }
/// ```
pub async fn acquire(limiter: &RateLimiter, permits: u32) -> Duration {
    let reservation = limiter.reserve_cancellable(permits);
    let wait = reservation.wait();
    let guard = CancelOnDrop(Some(reservation));
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    guard.keep();
    wait
}

/// Guava's `tryAcquire(permits, timeout)`, awaited: reserves `permits` only if they can be had
/// within `timeout` and awaits them on a tokio timer, returning the time waited; `None` at once,
/// with nothing reserved and no time spent, if the wait would be longer. (Wrapping
/// [`acquire`] in `tokio::time::timeout` instead waits the whole timeout out before it gives
/// up, and holds a reservation meanwhile.)
///
/// Cancellation-safe as [`acquire`] is.
///
/// # Examples
///
/// ```
/// use spillway::RateLimiter;
/// use spillway_tower::{try_acquire_within, TokioClock};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), spillway::RateLimiterError> {
/// let limiter = RateLimiter::bursty_with_clock(2.0, TokioClock::new())?;
/// let start = tokio::time::Instant::now();
/// assert_eq!(try_acquire_within(&limiter, 1, Duration::ZERO).await, Some(Duration::ZERO));
/// // The next permit is 500 ms away: refused at once within 100 ms...
/// assert_eq!(try_acquire_within(&limiter, 1, Duration::from_millis(100)).await, None);
/// assert_eq!(start.elapsed(), Duration::ZERO);
/// // ...and waited for within a second.
/// let waited = try_acquire_within(&limiter, 1, Duration::from_secs(1)).await;
/// assert_eq!(waited, Some(Duration::from_millis(500)));
/// # Ok(())
/// # }
/// ```
pub async fn try_acquire_within(
    limiter: &RateLimiter,
    permits: u32,
    timeout: Duration,
) -> Option<Duration> {
    let reservation = limiter.try_reserve_cancellable(permits, timeout)?;
    let wait = reservation.wait();
    let guard = CancelOnDrop(Some(reservation));
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    guard.keep();
    Some(wait)
}

/// Gives a reservation back unless [`keep`](Self::keep) was called.
struct CancelOnDrop<'a>(Option<Reservation<'a>>);

impl CancelOnDrop<'_> {
    fn keep(mut self) {
        if let Some(reservation) = self.0.take() {
            reservation.commit();
        }
    }
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(reservation) = self.0.take() {
            reservation.cancel();
        }
    }
}
