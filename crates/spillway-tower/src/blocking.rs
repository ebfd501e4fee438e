//! A warning when one of spillway's blocking waits runs inside a tokio runtime, where it
//! stalls the tasks of the thread it blocks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;
use std::time::Duration;

/// Whether the warning was given (once per process).
static WARNED: AtomicBool = AtomicBool::new(false);

/// The default hook is set at most once.
static INSTALL: Once = Once::new();

/// Makes spillway's blocking waits ([`RateLimiter::acquire`](spillway::RateLimiter::acquire),
/// a blocking [`enter`](spillway::EntryBuilder::enter) that waits for a pacing rule's turn,
/// Dubbo's `actives` waiting for a place) call [`warn_if_in_runtime`] before they wait: see
/// [`spillway::set_blocking_wait_hook`], which it sets. The layer and [`TokioClock`](crate::TokioClock)
/// set it when first made, unless a hook is set already; `spillway::set_blocking_wait_hook(None)`
/// silences it.
///
/// # Examples
///
/// ```
/// spillway_tower::warn_on_blocking_waits();
/// assert!(spillway::blocking_wait_hook().is_some());
/// ```
pub fn warn_on_blocking_waits() {
    spillway::set_blocking_wait_hook(Some(warn_if_in_runtime_hook));
}

/// Sets [`warn_on_blocking_waits`]' hook unless a hook is set: once per process.
pub(crate) fn install_default() {
    INSTALL.call_once(|| {
        if spillway::blocking_wait_hook().is_none() {
            warn_on_blocking_waits();
        }
    });
}

fn warn_if_in_runtime_hook(wait: Duration) {
    warn_if_in_runtime(wait);
}

/// Logs a warning (at most once per process, through `tracing`) if a blocking wait of `wait`
/// is about to run on a thread inside a tokio runtime, and returns whether it did. On a
/// runtime's worker thread, or in `#[tokio::main]`'s body, the wait stalls every task the
/// thread serves: wait with [`acquire`](crate::acquire), [`try_acquire_within`](crate::try_acquire_within)
/// or [`enter`](crate::enter) instead, which put the task to sleep, not the thread.
///
/// Tokio does not say whether a thread inside its runtime is a worker or one of its blocking
/// threads (`spawn_blocking`, `block_in_place`), where waiting is right: the warning is given
/// in both, once, and says so. A wait of zero is no wait and never warns.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// // Outside a runtime: nothing to warn of.
/// assert!(!spillway_tower::warn_if_in_runtime(Duration::from_millis(200)));
/// ```
pub fn warn_if_in_runtime(wait: Duration) -> bool {
    if wait.is_zero() || tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    if WARNED.swap(true, Ordering::Relaxed) {
        return false;
    }
    tracing::warn!(
        wait = ?wait,
        thread = std::thread::current().name().unwrap_or("unnamed"),
        "a blocking spillway wait runs on a thread inside a tokio runtime: on a worker (or in \
         #[tokio::main]'s body) it stalls every task of that thread; await spillway_tower::acquire, \
         try_acquire_within or enter instead (inside spawn_blocking or block_in_place, where \
         blocking is right, ignore this; it is given once)"
    );
    true
}
