//! Which worker a thread is.

use std::cell::Cell;

thread_local! {
    /// This thread's worker number; 0 on threads that are not workers.
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

/// The worker this thread is (from 0), or 0 on a thread that is not one: what picks the
/// idle upstream connections a request may take.
pub(crate) fn current() -> usize {
    INDEX.get()
}

/// This thread is worker `index`.
pub(super) fn set(index: usize) {
    INDEX.set(index);
}
