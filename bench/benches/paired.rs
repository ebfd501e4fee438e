//! spillway against governor, interleaved: the ratios the issues' targets are stated in, measured
//! so that this VM's noise falls on both sides alike.
//!
//! Criterion measures one function after another, so a noisy minute lands on whichever row ran
//! then, and two rows of one group can differ by more than the effect in question. Here each
//! pair runs in rounds: a burst of calls to one side, then as many to the other (the side that
//! goes first alternates), and each round gives one ratio. The table reports the median of each
//! side's per-round times, the median of the per-round ratios, and the 10th and 90th percentiles
//! of those ratios (how much they scatter). One thread, and for the rate limiter also two
//! threads calling the same side at once (each side's time in a round is the slower thread's).
//!
//! Written to `target/paired.json` under this harness's directory, for `bench/report.py`; also
//! printed. Run alone with `cargo bench --manifest-path bench/Cargo.toml --bench paired`.

mod rounds;

use governor::{Quota, RateLimiter};
use rounds::Outcome;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

fn main() {
    // The same limiters as the `rate_limiter` and `qps_rule` groups of `peers`.
    let governor_pass = RateLimiter::direct(Quota::per_second(NonZeroU32::MAX));
    let governor_reject = RateLimiter::direct(Quota::per_hour(NonZeroU32::MIN));
    let _ = governor_reject.check();
    let limiter_pass = spillway::RateLimiter::bursty(1e9).unwrap();
    let limiter_reject = spillway::RateLimiter::bursty(1e-9).unwrap();
    let _ = limiter_reject.try_acquire(1, Duration::ZERO);
    let rules = || {
        vec![
            spillway::flow::FlowRule::qps("pass", "pass", 1e12),
            spillway::flow::FlowRule::qps("block", "block", 0.0),
        ]
    };
    let tsc = spillway::Spillway::new();
    tsc.load_flow_rules(rules()).unwrap();
    let coarse = spillway::Spillway::new_with_clock(spillway::CoarseClock::new());
    coarse.load_flow_rules(rules()).unwrap();
    let (tsc_pass, tsc_block) = (
        tsc.resource("pass").unwrap(),
        tsc.resource("block").unwrap(),
    );
    let (coarse_pass, coarse_block) = (
        coarse.resource("pass").unwrap(),
        coarse.resource("block").unwrap(),
    );

    let governor_passes = || {
        black_box(governor_pass.check().is_ok());
    };
    let governor_rejects = || {
        black_box(governor_reject.check().is_ok());
    };
    let limiter_passes = || {
        black_box(limiter_pass.try_acquire(1, Duration::ZERO));
    };
    let limiter_rejects = || {
        black_box(limiter_reject.try_acquire(1, Duration::ZERO));
    };
    let rows: Vec<(&str, &str, Outcome)> = vec![
        (
            "`RateLimiter::try_acquire(1, 0)`",
            "pass",
            rounds::one_thread(limiter_passes, governor_passes),
        ),
        (
            "`RateLimiter::try_acquire(1, 0)`",
            "reject",
            rounds::one_thread(limiter_rejects, governor_rejects),
        ),
        (
            "`RateLimiter::try_acquire(1, 0)`",
            "pass",
            rounds::two_threads(limiter_passes, governor_passes),
        ),
        (
            "`RateLimiter::try_acquire(1, 0)`",
            "reject",
            rounds::two_threads(limiter_rejects, governor_rejects),
        ),
        (
            "entry + exit, QPS reject rule, `CoarseClock`",
            "pass",
            rounds::one_thread(
                || drop(black_box(coarse_pass.entry().enter())),
                governor_passes,
            ),
        ),
        (
            "entry + exit, QPS reject rule, `CoarseClock`",
            "reject",
            rounds::one_thread(
                || drop(black_box(coarse_block.entry().enter())),
                governor_rejects,
            ),
        ),
        (
            "entry + exit, QPS reject rule, default (TSC) clock",
            "pass",
            rounds::one_thread(
                || drop(black_box(tsc_pass.entry().enter())),
                governor_passes,
            ),
        ),
        (
            "entry + exit, QPS reject rule, default (TSC) clock",
            "reject",
            rounds::one_thread(
                || drop(black_box(tsc_block.entry().enter())),
                governor_rejects,
            ),
        ),
    ];

    let mut json = String::from("[\n");
    for (index, (what, outcome, o)) in rows.iter().enumerate() {
        println!(
            "{what} {outcome}, {} thread(s): spillway {:.2} ns, governor {:.2} ns, ratio {:.3} (p10 {:.3}, p90 {:.3})",
            o.threads, o.spillway_ns, o.governor_ns, o.ratio, o.ratio_p10, o.ratio_p90
        );
        let comma = if index + 1 < rows.len() { "," } else { "" };
        json.push_str(&format!(
            "  {{\"what\": \"{what}\", \"outcome\": \"{outcome}\", \"threads\": {}, \
             \"spillway_ns\": {:.3}, \"governor_ns\": {:.3}, \"ratio\": {:.4}, \"ratio_p10\": {:.4}, \
             \"ratio_p90\": {:.4}}}{comma}\n",
            o.threads, o.spillway_ns, o.governor_ns, o.ratio, o.ratio_p10, o.ratio_p90
        ));
    }
    json.push_str("]\n");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/paired.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, json).unwrap();
}
