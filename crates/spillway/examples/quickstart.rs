//! The quick start: one resource, a few thousand entries on the real clock, and a live table.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```
//!
//! Four worker threads call a simulated service (about 1 ms of work, one call in 20 failing) for
//! five seconds, about 3700 calls a second. One flow rule limits the resource to 2500 calls a
//! second; a refused caller backs off for a millisecond. Every second the example prints what
//! spillway measured: passes, blocks, completions, errors, average RT and concurrency.

use spillway::flow::FlowRule;
use spillway::{Spillway, TrafficType};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const WORKERS: usize = 4;
const SECONDS: u64 = 5;

fn main() {
    let spillway = Spillway::new();
    spillway
        .load_flow_rules(vec![FlowRule::qps("orders-qps", "GET /orders", 2_500.0)])
        .expect("a valid rule");
    let resource = spillway
        .resource("GET /orders")
        .expect("the default registry has room");
    let running = AtomicBool::new(true);
    let calls = AtomicU64::new(0);

    println!(
        "resource: {}  ({WORKERS} workers, {SECONDS} s, rule: at most 2500 passes per second)",
        resource.name()
    );
    println!(
        "{:>4} {:>8} {:>8} {:>10} {:>8} {:>12} {:>12}",
        "sec", "pass/s", "block/s", "success/s", "error/s", "avg RT (µs)", "concurrency"
    );
    std::thread::scope(|s| {
        for worker in 0..WORKERS {
            let (resource, running, calls) = (&resource, &running, &calls);
            s.spawn(move || {
                let mut n = worker as u64;
                while running.load(Ordering::Relaxed) {
                    match resource.entry().traffic(TrafficType::Inbound).enter() {
                        Ok(mut entry) => {
                            // The "service": about a millisecond of work, some calls fail.
                            std::thread::sleep(Duration::from_micros(800 + (n % 5) * 100));
                            if n % 20 == 0 {
                                entry.mark_error();
                            }
                        }
                        // Refused: back off a little, as a polite client would.
                        Err(_blocked) => std::thread::sleep(Duration::from_millis(1)),
                    }
                    n += WORKERS as u64;
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for second in 1..=SECONDS {
            std::thread::sleep(Duration::from_secs(1));
            // The previous full second, as the minute window counted it.
            let second_stats = resource.last_second();
            let avg_rt = second_stats.avg_rt_micros();
            println!(
                "{second:>4} {:>8} {:>8} {:>10} {:>8} {:>12.0} {:>12}",
                second_stats.pass,
                second_stats.block,
                second_stats.success,
                second_stats.error,
                avg_rt,
                resource.node().concurrency()
            );
        }
        running.store(false, Ordering::Relaxed);
    });
    let stats = resource.stats();
    println!(
        "total: {} calls; in the last minute {} passed, {} blocked, {} completed, {} errors",
        calls.load(Ordering::Relaxed),
        stats.total_pass,
        stats.total_block,
        stats.total_success,
        stats.total_error
    );
}
