//! Running one operation on several threads at once and reporting the per-call cost.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Runs `op` `iters` times on each of `threads` threads, all started together, and returns the
/// time from the first thread's start to the last one's end: criterion divides it by `iters`,
/// giving the per-call cost while `threads` threads call concurrently.
///
/// The threads meet on a spinning counter, not a sleeping barrier: a thread woken from a futex
/// can start tens of microseconds after the others, and in a short sample the threads then took
/// turns more than they contended, so that a sample's time per call depended on its length.
#[allow(clippy::disallowed_methods)] // benches time with the OS clock, which is what they measure
pub(crate) fn run_parallel<F>(threads: usize, iters: u64, op: F) -> Duration
where
    F: Fn() + Sync,
{
    let arrived = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    arrived.fetch_add(1, Ordering::AcqRel);
                    while arrived.load(Ordering::Acquire) < threads {
                        spin_loop();
                    }
                    let start = Instant::now();
                    for _ in 0..iters {
                        op();
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        let spans: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect();
        let start = spans.iter().map(|span| span.0).min();
        let end = spans.iter().map(|span| span.1).max();
        match (start, end) {
            (Some(start), Some(end)) => end.duration_since(start),
            _ => Duration::ZERO,
        }
    })
}
