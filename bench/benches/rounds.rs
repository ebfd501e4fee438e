//! Two sides run in alternating rounds, on one thread or on two at once, and each round gives one
//! ratio of their times.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Calls per side per round on one thread: about 0.2 ms a side at 10 ns a call.
const CALLS: u32 = 20_000;
/// Rounds measured, after `WARM_UP` rounds thrown away.
const ROUNDS: usize = 301;
const WARM_UP: usize = 20;

/// One side's burst of `calls` calls, in nanoseconds a call. Generic, so that each side's call
/// is inlined into its own loop, as it is into a caller's code (and into criterion's loop).
#[inline(never)]
#[allow(clippy::disallowed_methods)] // the harness times real work
fn burst(calls: u32, op: &impl Fn()) -> f64 {
    let start = Instant::now();
    for _ in 0..calls {
        op();
    }
    start.elapsed().as_nanos() as f64 / f64::from(calls)
}

/// The medians of a pair's rounds.
pub struct Outcome {
    /// Threads calling at once.
    pub threads: usize,
    /// The median of spillway's per-round times, in nanoseconds a call.
    pub spillway_ns: f64,
    /// The median of governor's per-round times, in nanoseconds a call.
    pub governor_ns: f64,
    /// The median of the per-round ratios, spillway's time over governor's.
    pub ratio: f64,
    /// The per-round ratios' 10th percentile.
    pub ratio_p10: f64,
    /// The per-round ratios' 90th percentile.
    pub ratio_p90: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// Each round's pair of times, spillway's first, in nanoseconds a call.
fn outcome(threads: usize, rounds: &[(f64, f64)]) -> Outcome {
    let measured = &rounds[WARM_UP..];
    let ours = sorted(measured.iter().map(|r| r.0).collect());
    let theirs = sorted(measured.iter().map(|r| r.1).collect());
    let ratios = sorted(measured.iter().map(|r| r.0 / r.1).collect());
    Outcome {
        threads,
        spillway_ns: percentile(&ours, 0.5),
        governor_ns: percentile(&theirs, 0.5),
        ratio: percentile(&ratios, 0.5),
        ratio_p10: percentile(&ratios, 0.1),
        ratio_p90: percentile(&ratios, 0.9),
    }
}

/// Runs `spillway` and `governor` in alternating rounds on one thread, the side that goes first
/// alternating.
pub fn one_thread(spillway: impl Fn(), governor: impl Fn()) -> Outcome {
    let rounds: Vec<(f64, f64)> = (0..WARM_UP + ROUNDS)
        .map(|round| {
            if round % 2 == 0 {
                let a = burst(CALLS, &spillway);
                (a, burst(CALLS, &governor))
            } else {
                let b = burst(CALLS, &governor);
                (burst(CALLS, &spillway), b)
            }
        })
        .collect();
    outcome(1, &rounds)
}

/// Where two threads meet before each burst. They spin, so that both start within about one
/// cache-line transfer of each other: a sleeping thread takes tens of microseconds to wake, a
/// good part of a burst, and the other thread would run that part alone.
struct Meeting {
    arrived: AtomicUsize,
}

impl Meeting {
    /// Waits until both threads have arrived at meeting number `index` (0, 1, 2, ...).
    fn meet(&self, index: usize) {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        while self.arrived.load(Ordering::Acquire) < 2 * (index + 1) {
            std::hint::spin_loop();
        }
    }
}

/// Calls per side per round on two threads: about 0.2 ms a side at 100 ns a call.
const CALLS_TWO_THREADS: u32 = CALLS / 10;

/// One thread's part of [`two_threads`]: every round, a burst of each side, each after both
/// threads have met, the side that goes first alternating; returns this thread's times,
/// spillway's first.
fn rounds_on_this_thread(
    meeting: &Meeting,
    spillway: &(impl Fn() + Sync),
    governor: &(impl Fn() + Sync),
) -> Vec<(f64, f64)> {
    (0..WARM_UP + ROUNDS)
        .map(|round| {
            meeting.meet(2 * round);
            if round % 2 == 0 {
                let a = burst(CALLS_TWO_THREADS, spillway);
                meeting.meet(2 * round + 1);
                (a, burst(CALLS_TWO_THREADS, governor))
            } else {
                let b = burst(CALLS_TWO_THREADS, governor);
                meeting.meet(2 * round + 1);
                (burst(CALLS_TWO_THREADS, spillway), b)
            }
        })
        .collect()
}

/// Runs `spillway` and `governor` in alternating rounds on two threads at once, both calling
/// the same side in each burst. A side's time in a round is the slower thread's own time (the
/// criterion benches' `run_parallel` times from the first thread's start to the last one's end).
pub fn two_threads(spillway: impl Fn() + Sync, governor: impl Fn() + Sync) -> Outcome {
    let meeting = Meeting {
        arrived: AtomicUsize::new(0),
    };
    let (here, there) = std::thread::scope(|s| {
        let other = s.spawn(|| rounds_on_this_thread(&meeting, &spillway, &governor));
        let here = rounds_on_this_thread(&meeting, &spillway, &governor);
        (here, other.join().expect("bench thread panicked"))
    });
    let rounds: Vec<(f64, f64)> = here
        .iter()
        .zip(&there)
        .map(|(a, b)| (a.0.max(b.0), a.1.max(b.1)))
        .collect();
    outcome(2, &rounds)
}
