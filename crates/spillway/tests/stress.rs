//! Many threads, exact totals: no add is lost, none counted twice.

mod support;

use spillway::stats::{Event, SlidingWindow, StripedCounter, WindowConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::manual;

const THREADS: usize = 8;
const PER_THREAD: u64 = 20_000;

#[test]
fn striped_counter_sums_every_add() {
    let counter = StripedCounter::new();
    let taken = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..PER_THREAD {
                    counter.increment();
                }
            });
        }
        // A reader taking while the adders run must not lose any of their adds.
        s.spawn(|| {
            for _ in 0..1_000 {
                taken.fetch_add(counter.take(), Ordering::Relaxed);
            }
        });
    });
    let total = taken.load(Ordering::Relaxed) + counter.sum();
    assert_eq!(total, THREADS as u64 * PER_THREAD);
}

#[test]
fn entries_from_eight_threads_are_all_counted() {
    let (spillway, _clock) = manual();
    let resource = spillway.resource("stress").unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let resource = &resource;
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    let mut entry = resource.entry().enter().unwrap();
                    if (i + t as u64) % 10 == 0 {
                        entry.mark_error();
                    }
                }
            });
        }
    });
    let stats = resource.stats();
    let total = THREADS as u64 * PER_THREAD;
    assert_eq!(stats.total_pass, total);
    assert_eq!(stats.total_success, total);
    assert_eq!(stats.total_error, total / 10);
    assert_eq!(stats.concurrency, 0);
    assert_eq!(stats.pass_qps, total as f64);
}

/// Adds from eight threads while another thread moves the clock across many bucket boundaries
/// (but less than one interval, so every bucket stays in the window): the window's sum is exactly
/// the number of adds, with nothing refused as late.
#[test]
fn window_rolls_under_load_without_losing_adds() {
    let (_, clock) = manual();
    let window = SlidingWindow::new(WindowConfig::new(60, Duration::from_secs(60)).unwrap());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let ticker = s.spawn(|| {
            for _ in 0..50 {
                clock.advance_millis(1_000);
                std::thread::yield_now();
            }
            stop.store(true, Ordering::SeqCst);
        });
        let adders: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    while n < PER_THREAD || !stop.load(Ordering::SeqCst) {
                        window.add(clock_now(&clock), Event::Pass, 1);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        ticker.join().unwrap();
        let total: u64 = adders.into_iter().map(|a| a.join().unwrap()).sum();
        assert_eq!(window.sum(clock_now(&clock), Event::Pass), total);
        assert_eq!(window.late_events(), 0);
    });
}

fn clock_now(clock: &spillway::ManualClock) -> u64 {
    use spillway::Clock;
    clock.now_nanos()
}
