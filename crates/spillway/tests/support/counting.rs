//! The one counting allocator of the core's tests: the system allocator, counting the bytes
//! live and the allocations made (the whole process, and each thread's own: the test harness's
//! threads allocate now and then), and the allocations of the calling thread while
//! [`allocations_during`] counts them. A test file installs it with
//! `#[global_allocator] static ALLOCATOR: support::counting::Counting = support::counting::Counting;`.

#![allow(dead_code)] // each test file uses what it needs

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// The system allocator, counting.
pub(crate) struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static THREAD_ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// This thread's bytes allocated less those it freed, and its allocations.
    static OWN_LIVE: Cell<isize> = const { Cell::new(0) };
    static OWN_ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are atomics
// and thread-local `Cell`s of `Copy` types, touched without allocating. (The default `realloc`
// goes through these two.)
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        if COUNTING.try_with(Cell::get).unwrap_or(false) {
            let _ = THREAD_ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
        let _ = OWN_LIVE.try_with(|n| n.set(n.get() + layout.size() as isize));
        let _ = OWN_ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        let _ = OWN_LIVE.try_with(|n| n.set(n.get() - layout.size() as isize));
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Bytes allocated and not yet freed, by the whole process.
pub(crate) fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Allocations made so far, by the whole process.
pub(crate) fn allocations() -> usize {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Bytes the calling thread allocated and has not freed (less what it freed of other
/// threads').
pub(crate) fn own_live() -> isize {
    OWN_LIVE.with(Cell::get)
}

/// Allocations the calling thread made so far.
pub(crate) fn own_allocations() -> usize {
    OWN_ALLOCATIONS.with(Cell::get)
}

/// The allocations the calling thread makes while `f` runs.
pub(crate) fn allocations_during(f: impl FnOnce()) -> u64 {
    THREAD_ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    THREAD_ALLOCATIONS.with(Cell::get)
}
