//! One call, many times, for `bench/count` to count under callgrind: the instructions, atomic
//! read-modify-writes and TSC reads of one spillway entry + exit against one governor `check`.
//!
//! `cargo run --release --example one_call -- CASE N`, CASE one of `spillway-free`,
//! `spillway-coarse-pass`, `spillway-coarse-refuse`, `spillway-tsc-pass`,
//! `spillway-tsc-refuse`, `governor-pass`, `governor-refuse`. Only the case's limiter is built
//! (a `CoarseClock`'s ticking thread would count too).

use governor::{Quota, RateLimiter};
use spillway::flow::FlowRule;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::ExitCode;

/// A spillway on `clock` with a QPS rule of `count` on resource `limited`, and that resource.
fn spillway_with(
    clock: impl spillway::Clock,
    count: Option<f64>,
) -> (spillway::Spillway, spillway::Resource) {
    let spillway = spillway::Spillway::new_with_clock(clock);
    if let Some(count) = count {
        let rule = FlowRule::qps("limit", "limited", count);
        spillway.load_flow_rules(vec![rule]).expect("a valid rule");
    }
    let resource = spillway.resource("limited").expect("room for one resource");
    (spillway, resource)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(case), Some(Ok(n))) = (args.next(), args.next().map(|n| n.parse::<u64>())) else {
        eprintln!("usage: one_call CASE N");
        return ExitCode::FAILURE;
    };
    let spillway = |clock: &str, count: Option<f64>| match clock {
        "coarse" => spillway_with(spillway::CoarseClock::new(), count),
        _ => spillway_with(spillway::SystemClock::new(), count),
    };
    let entries = |(_spillway, resource): (spillway::Spillway, spillway::Resource)| {
        for _ in 0..n {
            drop(black_box(resource.entry().enter()));
        }
    };
    let checks = |limiter: governor::DefaultDirectRateLimiter| {
        for _ in 0..n {
            black_box(limiter.check().is_ok());
        }
    };
    match case.as_str() {
        "spillway-free" => entries(spillway("coarse", None)),
        "spillway-coarse-pass" => entries(spillway("coarse", Some(1e12))),
        "spillway-coarse-refuse" => entries(spillway("coarse", Some(0.0))),
        "spillway-tsc-pass" => entries(spillway("tsc", Some(1e12))),
        "spillway-tsc-refuse" => entries(spillway("tsc", Some(0.0))),
        "governor-pass" => checks(RateLimiter::direct(Quota::per_second(NonZeroU32::MAX))),
        "governor-refuse" => {
            let limiter = RateLimiter::direct(Quota::per_hour(NonZeroU32::MIN));
            let _ = limiter.check();
            checks(limiter)
        }
        _ => {
            eprintln!("unknown case {case}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
