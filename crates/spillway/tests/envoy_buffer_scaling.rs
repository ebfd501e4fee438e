//! Envoy's gradient controller with `buffer_scaling = spread`: the buffer is multiplied by the
//! spread of the service's RTTs at the minRTT measurement (third quartile over median), and
//! capped at one. A service whose calls all take as long keeps Envoy's buffer; one whose calls
//! vary gets a wider one. Traces on a nanosecond time axis, calls fed to the algorithm as they
//! end.

use spillway::adaptive::{
    BufferScaling, EnvoyGradient, EnvoyGradientConfig, LimitAlgorithm, Sample,
};
use std::time::Duration;
use support::calls::call;

mod support;

const MS: u64 = 1_000_000;

/// The controller measured on 50 calls ending at 20..70 ms, the `i`-th taking `rtt_ms(i)`;
/// then one sample window (12 minRTTs of 10 ms: ending at 189 ms) whose calls all take
/// `window_ms`. Returns the
/// minRTT and the limit after each.
fn trace(
    buffer: f64,
    scaling: BufferScaling,
    rtt_ms: impl Fn(u64) -> u64,
    window_ms: u64,
) -> (Option<Duration>, u32, u32) {
    let config = EnvoyGradientConfig {
        jitter: 0.0,
        buffer,
        buffer_scaling: scaling,
        ..EnvoyGradientConfig::default()
    };
    let mut envoy = EnvoyGradient::with_seed(config, 1).unwrap();
    let mut limit = envoy.initial_limit();
    for i in 0..50 {
        let end_ms = 20 + i;
        if let Some(update) = envoy.on_sample(&call(end_ms, rtt_ms(i), limit), end_ms * MS, limit) {
            limit = update.limit;
        }
    }
    let measured = limit;
    let baseline = envoy.estimates().baseline;
    for end_ms in (80..=190).step_by(5) {
        let sample = call(end_ms, window_ms, 2);
        if let Some(update) = envoy.on_sample(&sample, end_ms * MS, limit) {
            limit = update.limit;
        }
    }
    assert_eq!(
        measured, 3,
        "back to the start's limit after the measurement"
    );
    (baseline, measured, limit)
}

/// 13 calls of 50 at 20 ms, the rest at 10 ms: the median (25th) is 10 ms, the third quartile
/// (38th) 20 ms, a spread of 2.
fn spread_of_two(i: u64) -> u64 {
    if i % 4 == 3 || i == 48 {
        20
    } else {
        10
    }
}

#[test]
fn a_service_whose_calls_take_as_long_keeps_envoy_s_buffer() {
    for window_ms in [10, 12, 14, 20] {
        let fixed = trace(0.25, BufferScaling::Fixed, |_| 10, window_ms);
        let spread = trace(0.25, BufferScaling::Spread, |_| 10, window_ms);
        assert_eq!(fixed, spread, "window of {window_ms} ms");
    }
}

#[test]
fn a_spread_of_two_doubles_the_buffer() {
    assert_eq!((0..50).filter(|&i| spread_of_two(i) == 20).count(), 13);
    // Fixed: gradient 12.5 / 14 = 0.893, 3 x 0.893 + sqrt(2.68) = 4.32: 4.
    let (baseline, _, fixed) = trace(0.25, BufferScaling::Fixed, spread_of_two, 14);
    assert_eq!(baseline, Some(Duration::from_millis(10)));
    assert_eq!(fixed, 4);
    // Spread: buffer 0.5, gradient 15 / 14 = 1.071, 3.21 + sqrt(3.21) = 5.01: 5.
    let (baseline, _, spread) = trace(0.25, BufferScaling::Spread, spread_of_two, 14);
    assert_eq!(baseline, Some(Duration::from_millis(10)));
    assert_eq!(spread, 5);
}

#[test]
fn the_scaled_buffer_stops_at_one() {
    // 0.75 x 2 = 1.5, capped at 1: gradient 20 / 20 = 1, 3 + sqrt(3) = 4.73: 4 (uncapped it
    // would be 25 / 20 = 1.25: 3.75 + 1.94 = 5.69, 5).
    let (_, _, limit) = trace(0.75, BufferScaling::Spread, spread_of_two, 20);
    assert_eq!(limit, 4);
    assert_eq!(BufferScaling::Spread.apply(0.75, 2.0), 1.0);
    // A spread below 1 (impossible from a measurement) never narrows the buffer.
    assert_eq!(BufferScaling::Spread.apply(0.25, 0.5), 0.25);
}

#[cfg(feature = "serde")]
#[test]
fn buffer_scaling_reads_by_name_and_defaults_to_fixed() {
    let config: EnvoyGradientConfig =
        serde_json::from_str(r#"{"buffer_scaling": "spread"}"#).unwrap();
    assert_eq!(config.buffer_scaling, BufferScaling::Spread);
    let config: EnvoyGradientConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(config.buffer_scaling, BufferScaling::Fixed);
    assert!(serde_json::from_str::<EnvoyGradientConfig>(r#"{"buffer_scaling": "wide"}"#).is_err());
}

/// The open start's first minRTT, from the calls as they come, also gives the spread: with
/// `start_limit = 10`, a first window of 10 ms calls, then 61 calls (16 of them at 20 ms)
/// measured to the next window's end. Its median is 10 ms, so the window that closes with the
/// measurement grows the limit from 10 by the gradient: Envoy's 1.25 gives 12.5 + 3.54 = 16.04
/// (16), the spread buffer's 1.5 gives 15 + 3.87 = 18.87 (18).
#[test]
fn the_open_start_s_measurement_gives_the_spread() {
    let limit_after = |scaling| {
        let config = EnvoyGradientConfig {
            jitter: 0.0,
            start_limit: 10,
            buffer_scaling: scaling,
            ..EnvoyGradientConfig::default()
        };
        let mut envoy = EnvoyGradient::with_seed(config, 1).unwrap();
        let mut limit = envoy.initial_limit();
        assert_eq!(limit, 10);
        let mut feed = |end_micros: u64, rtt_ms: u64, limit: &mut u32| {
            let sample = Sample {
                started_nanos: end_micros * 1_000 - rtt_ms * MS,
                rtt: Duration::from_millis(rtt_ms),
                in_flight: 2,
                dropped: false,
            };
            if let Some(update) = envoy.on_sample(&sample, end_micros * 1_000, *limit) {
                *limit = update.limit;
            }
        };
        // The first window: 20 ms to 120 ms.
        for end_ms in (20..120).step_by(10) {
            feed(end_ms * 1_000, 10, &mut limit);
        }
        // The call that ends it starts the measurement; 60 more end before 220 ms.
        feed(120_000, 10, &mut limit);
        for i in 0..60 {
            feed(121_000 + i * 1_600, spread_of_two(i), &mut limit);
        }
        assert_eq!(limit, 10, "the open start holds until the measurement ends");
        feed(220_000, 10, &mut limit);
        assert_eq!(envoy.estimates().baseline, Some(Duration::from_millis(10)));
        limit
    };
    assert_eq!(limit_after(BufferScaling::Fixed), 16);
    assert_eq!(limit_after(BufferScaling::Spread), 18);
}
