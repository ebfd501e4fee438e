//! Running one operation on several threads at once and reporting the per-call cost.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Runs `op` `iters` times on each of `threads` threads, all started together, and returns the
/// slowest thread's time: criterion divides it by `iters`, giving the per-call cost while
/// `threads` threads call concurrently.
#[allow(clippy::disallowed_methods)] // benches time with the OS clock, which is what they measure
pub(crate) fn run_parallel<F>(threads: usize, iters: u64, op: F) -> Duration
where
    F: Fn() + Sync,
{
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        op();
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .max()
            .unwrap_or_default()
    })
}
