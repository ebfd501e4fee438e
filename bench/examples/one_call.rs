//! One call, many times, for `bench/count` to count under callgrind: the instructions, atomic
//! read-modify-writes and TSC reads of one spillway entry + exit against one governor `check`.
//!
//! `cargo run --release --example one_call -- CASE N`, CASE one of `spillway-free`,
//! `spillway-coarse-pass`, `spillway-coarse-refuse`, `spillway-tsc-pass`,
//! `spillway-tsc-refuse`, `spillway-breaker`, `spillway-adaptive`, `spillway-keyed`,
//! `governor-pass`, `governor-refuse`. Only the case's limiter is built (a `CoarseClock`'s
//! ticking thread would count too). The last three spillway cases are the kinds checked after
//! the flow rules, each alone on the resource: a closed error-ratio breaker, an AIMD limit far
//! from full, a per-key QPS rule passing the entry's key.

use governor::{Quota, RateLimiter};
use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
use spillway::breaker::{BreakerRule, BreakerStrategy};
use spillway::flow::FlowRule;
use spillway::keyed::KeyedRule;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::ExitCode;
use std::time::Duration;

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
    let later = |load: &dyn Fn(&spillway::Spillway)| {
        let (spillway, resource) = spillway("coarse", None);
        load(&spillway);
        (spillway, resource)
    };
    let keyed = |(_spillway, resource): (spillway::Spillway, spillway::Resource)| {
        for _ in 0..n {
            drop(black_box(resource.entry().key("client").enter()));
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
        "spillway-breaker" => entries(later(&|spillway| {
            let errors = BreakerStrategy::ErrorRatio { threshold: 0.5 };
            let rule = BreakerRule::new("breaker", "limited", errors, Duration::from_secs(1));
            spillway
                .load_breaker_rules(vec![rule])
                .expect("a valid rule");
        })),
        "spillway-adaptive" => entries(later(&|spillway| {
            let aimd = AdaptiveAlgorithm::Aimd(AimdConfig::default());
            let rule = AdaptiveRule::resource("adaptive", "limited", aimd);
            spillway
                .load_adaptive_rules(vec![rule])
                .expect("a valid rule");
        })),
        "spillway-keyed" => keyed(later(&|spillway| {
            let rule = KeyedRule::qps("per-key", "limited", 4e9);
            spillway.load_keyed_rules(vec![rule]).expect("a valid rule");
        })),
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
