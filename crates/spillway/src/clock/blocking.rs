//! A hook told of each blocking wait on a real clock before the thread sleeps or parks.
//!
//! On an async runtime's worker thread a blocking wait stalls every task the worker serves, and
//! only the runtime's own crate can tell such a thread: `spillway-tower` sets a hook that warns
//! when a blocking wait runs inside a tokio runtime. The core only calls it.

use std::sync::RwLock;
use std::time::Duration;

static HOOK: RwLock<Option<fn(Duration)>> = RwLock::new(None);

/// Sets the function called before each blocking wait on a clock that really waits (the
/// default [`Clock::sleep`](super::Clock::sleep) and
/// [`Clock::park_timeout`](super::Clock::park_timeout): [`SystemClock`](super::SystemClock),
/// [`CoarseClock`](super::CoarseClock); not [`ManualClock`](super::ManualClock), which only
/// advances), with the time it is about to wait; `None` removes it. It replaces any hook set
/// before. `spillway-tower` sets one when its layer or clock is first made (unless one is set
/// already), which warns once if a blocking wait runs inside a tokio runtime; set `None` after
/// that to silence it.
///
/// The hook runs on the waiting thread, just before it waits: keep it short, and do not wait
/// on a spillway clock from it.
///
/// # Examples
///
/// ```
/// use spillway::{set_blocking_wait_hook, Clock, SystemClock};
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
///
/// static WAITS: AtomicU64 = AtomicU64::new(0);
/// set_blocking_wait_hook(Some(|_wait: Duration| {
///     WAITS.fetch_add(1, Ordering::Relaxed);
/// }));
/// SystemClock::new().sleep(Duration::ZERO);
/// assert!(WAITS.load(Ordering::Relaxed) >= 1);
/// set_blocking_wait_hook(None);
/// ```
pub fn set_blocking_wait_hook(hook: Option<fn(Duration)>) {
    *HOOK.write().unwrap_or_else(|e| e.into_inner()) = hook;
}

/// The hook [`set_blocking_wait_hook`] set, if any.
pub fn blocking_wait_hook() -> Option<fn(Duration)> {
    *HOOK.read().unwrap_or_else(|e| e.into_inner())
}

/// Tells the hook, if one is set, of a blocking wait of `duration` about to start.
pub(crate) fn before_blocking_wait(duration: Duration) {
    if let Some(hook) = blocking_wait_hook() {
        hook(duration);
    }
}
