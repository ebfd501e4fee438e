//! The one place that picks between std and loom primitives.
//!
//! Lock-free code in this crate imports its atomics from here, so that `RUSTFLAGS="--cfg spillway_loom"` (a crate-specific cfg, so that dependencies with loom support of their own, like boxcar, are not switched too)
//! swaps every one of them for loom's model-checked version.

#[cfg(not(spillway_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(spillway_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A small number that is stable for the calling thread and differs between threads created one
/// after another; stripes are chosen with it.
#[cfg(not(spillway_loom))]
pub(crate) fn thread_index() -> usize {
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;
    static NEXT: StdAtomicUsize = StdAtomicUsize::new(0);
    thread_local! {
        // Relaxed: the value only has to be unique-ish, it orders nothing.
        static INDEX: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    INDEX.with(|index| *index)
}

#[cfg(spillway_loom)]
pub(crate) fn thread_index() -> usize {
    loom::lazy_static! {
        static ref NEXT: AtomicUsize = AtomicUsize::new(0);
    }
    loom::thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|index| *index)
}

/// Waits a moment for another thread to finish a short critical step.
#[cfg(not(spillway_loom))]
pub(crate) fn spin_wait(spins: &mut u32) {
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    *spins = spins.saturating_add(1);
}

#[cfg(spillway_loom)]
pub(crate) fn spin_wait(_spins: &mut u32) {
    loom::thread::yield_now();
}
