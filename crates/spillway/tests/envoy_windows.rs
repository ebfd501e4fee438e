//! Envoy's gradient controller comparing each sample window with its minRTT: spillway takes a
//! window's first quartile (`window_percentile = 0.25`), Envoy its median (`0.5`). A burst that
//! drains (most calls waited a little, a quarter met no queue) shrinks the limit with the
//! median and not with the first quartile; a standing queue (every call waited) shrinks it with
//! both. Traces on a nanosecond time axis, calls fed to the algorithm as they end.

use spillway::adaptive::{EnvoyGradient, EnvoyGradientConfig, LimitAlgorithm};
use std::time::Duration;
use support::calls::call;

mod support;

const MS: u64 = 1_000_000;

/// The controller with `window_percentile`, its minRTT measured at 10 ms, and its limit after
/// that measurement.
fn measured(window_percentile: f64) -> (EnvoyGradient, u32) {
    let config = EnvoyGradientConfig {
        jitter: 0.0,
        window_percentile,
        // Envoy's 100 ms windows, which the traces count in (12 minRTTs would be 120 ms).
        window_min_rtts: 0.0,
        // Envoy's gradient alone: these traces are of windows in which the limit does not
        // bind, where the in-flight floor would hold it.
        in_flight_floor: 0.0,
        ..EnvoyGradientConfig::default()
    };
    let mut envoy = EnvoyGradient::with_seed(config, 1).unwrap();
    let mut limit = envoy.initial_limit();
    for end_ms in 10..60 {
        let sample = call(end_ms, 10, limit);
        if let Some(update) = envoy.on_sample(&sample, end_ms * MS, limit) {
            limit = update.limit;
        }
    }
    assert_eq!(
        envoy.estimates().baseline,
        Some(Duration::from_millis(10)),
        "the minRTT is measured"
    );
    (envoy, limit)
}

/// Feeds 40 calls ending evenly in `(from_ms, to_ms]`, the `i`-th taking `rtt_ms(i)`; returns
/// the limit after. The measurement ended at 59 ms, so sample windows end at 159 ms, 259 ms and
/// so on: the call at a window's end closes it, and counts in the next one.
fn window(
    envoy: &mut EnvoyGradient,
    limit: u32,
    (from_ms, to_ms): (u64, u64),
    rtt_ms: impl Fn(u64) -> u64,
) -> u32 {
    let mut limit = limit;
    for i in 0..40 {
        let end_ms = from_ms + (i + 1) * (to_ms - from_ms) / 40;
        let sample = call(end_ms, rtt_ms(i), 2);
        if let Some(update) = envoy.on_sample(&sample, end_ms * MS, limit) {
            limit = update.limit;
        }
    }
    limit
}

/// 3 calls in 10 met no queue (10 ms); the rest waited one call's time (20 ms).
fn draining_burst(i: u64) -> u64 {
    if i % 10 < 3 {
        10
    } else {
        20
    }
}

/// Every call waited one call's time.
fn standing_queue(_: u64) -> u64 {
    20
}

#[test]
fn a_draining_burst_shrinks_the_limit_with_the_median_and_not_with_the_first_quartile() {
    let (mut median, limit) = measured(0.5);
    let first = window(&mut median, limit, (59, 159), |_| 10);
    let after = window(&mut median, first, (159, 259), draining_burst);
    // 13 of the window's 40 calls took 10 ms (the one that closed the quiet window among
    // them): the median is 20 ms, gradient 12.5 / 20 = 0.625.
    assert!(after < first, "Envoy's median: {first} -> {after}");

    let (mut quartile, limit) = measured(0.25);
    let first = window(&mut quartile, limit, (59, 159), |_| 10);
    let after = window(&mut quartile, first, (159, 259), draining_burst);
    // The first quartile is 10 ms: gradient 12.5 / 10 = 1.25, the limit grows.
    assert!(
        after > first,
        "spillway's first quartile: {first} -> {after}"
    );
}

#[test]
fn a_standing_queue_shrinks_the_limit_with_either_percentile() {
    for percentile in [0.25, 0.5] {
        let (mut envoy, limit) = measured(percentile);
        let first = window(&mut envoy, limit, (59, 159), |_| 10);
        let after = window(&mut envoy, first, (159, 259), standing_queue);
        // gradient 12.5 / 20 = 0.625: the limit x 0.625 + its square root.
        let scaled = f64::from(first) * 0.625;
        assert_eq!(
            after,
            (scaled + scaled.sqrt()) as u32,
            "percentile {percentile}: {first} -> {after}"
        );
    }
}

#[test]
fn the_window_percentile_is_checked() {
    let err = EnvoyGradient::new(EnvoyGradientConfig {
        window_percentile: 1.5,
        ..EnvoyGradientConfig::default()
    })
    .unwrap_err();
    assert_eq!(err.field(), "window_percentile");
}
