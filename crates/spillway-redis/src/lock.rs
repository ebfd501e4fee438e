//! The one way this crate takes a lock.

use std::sync::Mutex;

/// The lock, even if a thread panicked while holding it: the lease is valid at every step.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
