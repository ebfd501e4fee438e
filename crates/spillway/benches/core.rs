//! spillway's own hot paths, each next to the baseline it must be judged against.
//!
//! Run with `cargo bench -p spillway --bench core`; `bench/run` turns the results into
//! `docs/benchmarks.md`. Groups: `clock`, `counter/{1,2}t`, `window`, `entry/{1,2}t`,
//! `flow/{1,2}t`.

#![allow(missing_docs)] // criterion's macros generate undocumented functions

mod support;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use spillway::stats::{Event, NodeConfig, SlidingWindow, StripedCounter, WindowConfig};
use spillway::{Clock, CoarseClock, ManualClock, Spillway, StdClock, SystemClock};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use support::run_parallel;

fn clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    let system = SystemClock::new();
    group.bench_function("system", |b| b.iter(|| black_box(system.now_nanos())));
    let std_clock = StdClock::new();
    group.bench_function("std_instant", |b| {
        b.iter(|| black_box(std_clock.now_nanos()))
    });
    let manual = ManualClock::new();
    group.bench_function("manual", |b| b.iter(|| black_box(manual.now_nanos())));
    let coarse = CoarseClock::new();
    group.bench_function("coarse", |b| b.iter(|| black_box(coarse.now_nanos())));
    group.finish();
}

fn counter(c: &mut Criterion) {
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("counter/{threads}t"));
        let shared = AtomicU64::new(0);
        group.bench_function("shared_atomic_add", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    shared.fetch_add(1, Ordering::Relaxed);
                })
            })
        });
        let striped = StripedCounter::new();
        group.bench_function("striped_add", |b| {
            b.iter_custom(|iters| run_parallel(threads, iters, || striped.add(1)))
        });
        group.bench_function("shared_atomic_add_read", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    shared.fetch_add(1, Ordering::Relaxed);
                    black_box(shared.load(Ordering::Relaxed));
                })
            })
        });
        group.bench_function("striped_add_sum", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    striped.add(1);
                    black_box(striped.sum());
                })
            })
        });
        group.finish();
    }
}

fn window(c: &mut Criterion) {
    let mut group = c.benchmark_group("window");
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    let now = clock.now_nanos();
    for (name, config) in [
        ("2x500ms", WindowConfig::sentinel_second()),
        (
            "10x100ms",
            WindowConfig::new(10, std::time::Duration::from_secs(1)).unwrap(),
        ),
        ("60x1s", WindowConfig::sentinel_minute()),
    ] {
        let w = SlidingWindow::new(config);
        group.bench_function(BenchmarkId::new("add", name), |b| {
            b.iter(|| w.add(black_box(now), Event::Pass, 1))
        });
        group.bench_function(BenchmarkId::new("sum", name), |b| {
            b.iter(|| black_box(w.sum(black_box(now), Event::Pass)))
        });
        group.bench_function(BenchmarkId::new("add_sum", name), |b| {
            b.iter(|| {
                w.add(black_box(now), Event::Pass, 1);
                black_box(w.sum(now, Event::Pass))
            })
        });
    }
    group.finish();

    // The hot check of a rule: add a pass and read the window's pass sum, 2 threads at once, with
    // per-thread accumulators (the default) and with none (every thread on the shared ring).
    let mut group = c.benchmark_group("window/2t");
    for (name, stripes) in [
        ("accumulators", spillway::stats::default_stripes()),
        ("shared_ring", 0),
    ] {
        let w = SlidingWindow::new(WindowConfig::sentinel_second().with_stripes(stripes));
        group.bench_function(BenchmarkId::new("add", name), |b| {
            b.iter_custom(|iters| run_parallel(2, iters, || w.add(black_box(now), Event::Pass, 1)))
        });
        group.bench_function(BenchmarkId::new("add_sum", name), |b| {
            b.iter_custom(|iters| {
                run_parallel(2, iters, || {
                    w.add(black_box(now), Event::Pass, 1);
                    black_box(w.sum(now, Event::Pass));
                })
            })
        });
    }
    group.finish();
}

fn entry(c: &mut Criterion) {
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("entry/{threads}t"));
        let system = Spillway::new();
        let resource = system.resource("bench").unwrap();
        group.bench_function("handle_system_clock", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || drop(black_box(resource.entry().enter())))
            })
        });
        group.bench_function("by_name_system_clock", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    drop(black_box(system.entry("bench").enter()))
                })
            })
        });
        let coarse = Spillway::new_with_clock(CoarseClock::new());
        let coarse_resource = coarse.resource("bench").unwrap();
        group.bench_function("handle_coarse_clock", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    drop(black_box(coarse_resource.entry().enter()))
                })
            })
        });
        let manual = Spillway::new_with_clock(ManualClock::starting_at_millis(1_700_000_000_000));
        let fixed = manual.resource("bench").unwrap();
        group.bench_function("handle_manual_clock", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || drop(black_box(fixed.entry().enter())))
            })
        });
        group.finish();
    }
}

fn flow(c: &mut Criterion) {
    use spillway::flow::FlowRule;
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("flow/{threads}t"));
        let spillway = Spillway::new();
        spillway
            .load_flow_rules(vec![
                FlowRule::qps("pass", "pass", 1e12),
                FlowRule::qps("block", "block", 0.0),
            ])
            .unwrap();
        // The same rules on nodes whose second window has no per-thread accumulators: every
        // write goes to the shared ring, and the rule's read scans one line per bucket.
        let shared = Spillway::builder()
            .node_config(
                NodeConfig::default()
                    .with_second_window(WindowConfig::sentinel_second().with_stripes(0)),
            )
            .build();
        shared
            .load_flow_rules(vec![
                FlowRule::qps("pass", "pass", 1e12),
                FlowRule::qps("block", "block", 0.0),
            ])
            .unwrap();
        // The same rules on an instance reading the coarse clock.
        let coarse = Spillway::new_with_clock(CoarseClock::new());
        coarse
            .load_flow_rules(vec![
                FlowRule::qps("pass", "pass", 1e12),
                FlowRule::qps("block", "block", 0.0),
            ])
            .unwrap();
        let instances = [
            (&spillway, ""),
            (&shared, "_shared_ring"),
            (&coarse, "_coarse_clock"),
        ];
        for (instance, suffix) in instances {
            for name in ["pass", "block"] {
                let resource = instance.resource(name).unwrap();
                group.bench_function(format!("qps_reject_{name}{suffix}"), |b| {
                    b.iter_custom(|iters| {
                        run_parallel(threads, iters, || drop(black_box(resource.entry().enter())))
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, clock, counter, window, entry, flow);
criterion_main!(benches);
