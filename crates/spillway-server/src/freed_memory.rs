//! Giving freed memory back to the system. mimalloc, the binary's allocator, keeps the pages a
//! thread freed until that thread allocates or frees again: after a burst of connections (a
//! thousand unfinished request heads, say) a worker that then idles would hold their buffers
//! for good. Each worker collects its heap once a second instead, which returns them within a
//! second or two of the close.

use std::time::Duration;

/// How often a worker gives back what it freed.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// Collects the calling thread's heap every [`EVERY`], for as long as the task runs (on a
/// worker's own runtime: the thread that freed the memory).
pub(crate) async fn give_back_periodically() {
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        every.tick().await;
        collect();
    }
}

/// Returns the pages this thread's mimalloc heap holds free to the system.
fn collect() {
    // SAFETY: `mi_collect` takes no pointer and may be called on any thread at any time; with
    // `false` it frees and purges what is already free, without forcing anything.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(false);
    }
}
