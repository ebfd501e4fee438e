//! The one place that picks between std and loom primitives.
//!
//! Lock-free code in this crate imports its atomics from here, so that `RUSTFLAGS="--cfg spillway_loom"` (a crate-specific cfg, so that dependencies with loom support of their own, like boxcar, are not switched too)
//! swaps every one of them for loom's model-checked version.

#[cfg(not(spillway_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
#[cfg(not(spillway_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(not(spillway_loom))]
pub(crate) use std::{hint::spin_loop, thread::yield_now};

#[cfg(spillway_loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(spillway_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(spillway_loom)]
pub(crate) use loom::{hint::spin_loop, thread::yield_now};

/// Slot of a thread that has none (its slot was already released during thread exit).
#[cfg(not(spillway_loom))]
pub(crate) const NO_SLOT: usize = usize::MAX;

/// The calling thread's slot: a small number that no other live thread holds.
///
/// Slots are handed out on a thread's first call, lowest free number first, and given back when
/// the thread exits, so the threads that use spillway hold the lowest numbers. Because a slot is
/// exclusive, per-slot data has a single writer and can be updated with plain loads and stores.
/// A slot changes hands through the pool's mutex, which orders the old owner's last writes before
/// the new owner's first reads.
#[cfg(not(spillway_loom))]
#[inline]
pub(crate) fn thread_slot() -> usize {
    match cached_thread_slot() {
        Some(slot) => slot,
        None => slots::first(),
    }
}

/// [`thread_slot`] if this thread has asked for its slot before (one load, and nothing to call:
/// for paths that must not make calls); `None` before the first [`thread_slot`].
#[cfg(not(spillway_loom))]
#[inline(always)]
pub(crate) fn cached_thread_slot() -> Option<usize> {
    let slot = slots::CACHED.get();
    (slot != slots::UNSET).then_some(slot)
}

#[cfg(not(spillway_loom))]
mod slots {
    use super::NO_SLOT;
    use std::cell::Cell;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::sync::Mutex;

    struct Pool {
        next: usize,
        free: BinaryHeap<Reverse<usize>>,
    }
    static POOL: Mutex<Pool> = Mutex::new(Pool {
        next: 0,
        free: BinaryHeap::new(),
    });

    /// A thread's hold on its slot, given back when the thread exits.
    struct Slot(usize);

    impl Slot {
        fn acquire() -> Self {
            let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
            match pool.free.pop() {
                Some(Reverse(slot)) => Slot(slot),
                None => {
                    pool.next += 1;
                    Slot(pool.next - 1)
                }
            }
        }
    }

    impl Drop for Slot {
        fn drop(&mut self) {
            // From now on this thread has no slot (another thread may take this one).
            let _ = CACHED.try_with(|cached| cached.set(NO_SLOT));
            let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
            pool.free.push(Reverse(self.0));
        }
    }

    /// `CACHED` before the thread's first call.
    pub(super) const UNSET: usize = usize::MAX - 1;

    thread_local! {
        /// The slot `SLOT` holds: a constant-initialised cell without a destructor, read with
        /// one load (`SLOT`'s lazy state costs a test on every read).
        pub(super) static CACHED: Cell<usize> = const { Cell::new(UNSET) };
        static SLOT: Slot = Slot::acquire();
    }

    /// Takes a slot for this thread and remembers it in `CACHED`.
    #[cold]
    #[inline(never)]
    pub(super) fn first() -> usize {
        let slot = SLOT.try_with(|slot| slot.0).unwrap_or(NO_SLOT);
        CACHED.set(slot);
        slot
    }
}

#[cfg(spillway_loom)]
pub(crate) fn thread_slot() -> usize {
    loom::lazy_static! {
        static ref NEXT: AtomicUsize = AtomicUsize::new(0);
    }
    loom::thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|slot| *slot)
}

#[cfg(spillway_loom)]
pub(crate) fn cached_thread_slot() -> Option<usize> {
    Some(thread_slot())
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

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn a_thread_keeps_its_slot_and_live_threads_hold_different_ones() {
        let barrier = Barrier::new(4);
        let slots: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let first = thread_slot();
                        // All four are alive while each reads its slot again.
                        barrier.wait();
                        assert_eq!(thread_slot(), first);
                        barrier.wait();
                        first
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut distinct = slots.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "{slots:?}");
        assert!(slots.iter().all(|&slot| slot < NO_SLOT - 1));
    }

    #[test]
    fn slots_of_exited_threads_are_handed_out_again() {
        // Two hundred threads one after another: without reuse the last would hold slot 200 or
        // more; with it, slots stay below the number of threads ever alive at once (this test's
        // and the other tests' running beside it).
        let highest = (0..200)
            .map(|_| std::thread::spawn(thread_slot).join().unwrap())
            .max()
            .unwrap();
        assert!(highest < 64, "highest slot {highest}");
    }
}
