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

#[test]
fn reloads_racing_entries_never_admit_past_a_kept_rule() {
    use spillway::flow::FlowRule;
    // The clock stands still: every entry falls in one bucket, so a rule of 50 admits 50 in all.
    let (spillway, _clock) = manual();
    let kept = FlowRule::qps("kept", "r", 50.0);
    spillway.load_flow_rules(vec![kept.clone()]).unwrap();
    let done = AtomicBool::new(false);
    let passed = std::sync::atomic::AtomicU64::new(0);
    let attempts = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let resource = spillway.resource("r").unwrap();
                while !done.load(Ordering::Relaxed) {
                    if resource.entry().enter().is_ok() {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                    attempts.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Reloads that keep "kept" and add or drop a looser rule: the gate closes and reopens,
        // rings pass between rules, and entries switch between the gate and the rule set.
        let mut round = 0;
        while round < 400 || attempts.load(Ordering::Relaxed) < 100_000 {
            round += 1;
            let mut rules = vec![kept.clone()];
            if round % 2 == 0 {
                rules.push(FlowRule::qps(format!("loose-{round}"), "r", 1_000.0));
            }
            spillway.load_flow_rules(rules).unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    assert_eq!(passed.load(Ordering::Relaxed), 50);
    assert_eq!(spillway.resource("r").unwrap().stats().total_pass, 50);
}
