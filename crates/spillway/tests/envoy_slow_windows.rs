//! Envoy's gradient controller on a slow service: a sample window lasts at least
//! `window_min_rtts` (12) minRTTs, and at least `update_interval`, so that it holds as many
//! round trips on a service whose calls take 80 ms as Envoy's 100 ms does on one whose calls
//! take 10 ms. With `window_min_rtts = 0` it is Envoy's fixed `update_interval`. Traces on a
//! nanosecond time axis, calls fed to the algorithm as they end.

use spillway::adaptive::{EnvoyGradient, EnvoyGradientConfig, LimitAlgorithm};
use support::calls::feed_calls;

mod support;

#[test]
fn a_window_that_moves_the_limit_ends_twelve_min_rtts_after_the_measurement() {
    // The minRTT is measured, pinned at 3, on 50 calls ending at 100 to 149 ms; calls as fast
    // as the minRTT then give a gradient of 1.25, and the limit grows at each window's end.
    let grow = |window_min_rtts: f64, rtt_ms: u64| {
        let config = EnvoyGradientConfig {
            jitter: 0.0,
            window_min_rtts,
            ..EnvoyGradientConfig::default()
        };
        let mut envoy = EnvoyGradient::with_seed(config, 1).unwrap();
        let mut limit = envoy.initial_limit();
        feed_calls(&mut envoy, &mut limit, (100, 150, 1), |_| rtt_ms, |l| l);
        let updates = feed_calls(&mut envoy, &mut limit, (150, 3000, 10), |_| rtt_ms, |l| l);
        updates.iter().map(|update| update.0).collect::<Vec<u64>>()
    };
    // 80 ms calls: windows of 960 ms from 149 ms: ends at 1,110 and 2,070 (the first call at
    // or after each due time), then 3,030, past the trace.
    assert_eq!(grow(12.0, 80), vec![1110, 2070]);
    // Envoy's: every 100 ms, from 249 ms.
    assert_eq!(grow(0.0, 80)[..3], [250, 350, 450]);
    // 5 ms calls: 12 minRTTs is 60 ms, under `update_interval`: Envoy's windows either way.
    assert_eq!(grow(12.0, 5), grow(0.0, 5));
    assert_eq!(grow(12.0, 5)[..2], [250, 350]);
}

#[test]
fn after_the_open_start_s_measurement_a_window_lasts_twelve_min_rtts() {
    // `start_limit = 50`: the first window (100 ms, no minRTT yet) ends at 200 ms, the calls
    // of the next give the first minRTT (80 ms) when it ends at 300 ms, and the limit grows
    // (gradient 1.25: 50 x 1.25 + sqrt(62.5) = 70.4). The window after is 12 minRTTs long.
    let ends = |window_min_rtts: f64| {
        let config = EnvoyGradientConfig {
            jitter: 0.0,
            start_limit: 50,
            window_min_rtts,
            ..EnvoyGradientConfig::default()
        };
        let mut envoy = EnvoyGradient::with_seed(config, 1).unwrap();
        let mut limit = envoy.initial_limit();
        let updates = feed_calls(&mut envoy, &mut limit, (100, 2500, 1), |_| 80, |_| 1);
        assert_eq!(updates[0].1, 70);
        updates.iter().map(|update| update.0).collect::<Vec<u64>>()
    };
    assert_eq!(ends(12.0), vec![300, 1260, 2220]);
    assert_eq!(ends(0.0)[..3], [300, 400, 500]);
}

#[test]
fn window_min_rtts_is_checked_and_read_from_the_configuration() {
    for bad in [-1.0, 100.5, f64::NAN, f64::INFINITY] {
        let err = EnvoyGradient::new(EnvoyGradientConfig {
            window_min_rtts: bad,
            ..EnvoyGradientConfig::default()
        })
        .unwrap_err();
        assert_eq!(err.field(), "window_min_rtts", "{bad}");
    }
    assert_eq!(EnvoyGradientConfig::default().window_min_rtts, 12.0);
}

#[cfg(feature = "serde")]
#[test]
fn window_min_rtts_reads_by_name_and_defaults_to_twelve() {
    let config: EnvoyGradientConfig = serde_json::from_str(r#"{"window_min_rtts": 0}"#).unwrap();
    assert_eq!(config.window_min_rtts, 0.0);
    let config: EnvoyGradientConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(config.window_min_rtts, 12.0);
}
