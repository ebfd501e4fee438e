//! Envoy's gradient controller with spillway's in-flight floor (`in_flight_floor`, default 6):
//! in a sample window in which the limit did not bind, the limit falls no lower than 6 times
//! the most calls in flight in the last 50 windows whose RTT was within the buffer. A burst of
//! latency that the limit did not cause (a service's own queue below capacity) stops at the
//! floor, where Envoy's gradient alone takes the limit under the calls in flight; a window in
//! which the limit binds follows Envoy's gradient; a window past the buffer does not raise the
//! floor; and the floor forgets a window after 50 more. Traces on a nanosecond time axis, calls
//! fed to the algorithm as they end.

use spillway::adaptive::{EnvoyGradient, EnvoyGradientConfig, LimitAlgorithm};
use support::calls::feed_calls;

mod support;

/// Calls in flight while the service is quiet and in its bursts.
const CARRIED: u32 = 8;

/// A controller with `in_flight_floor`, Envoy's 100 ms windows (so the trace counts in them),
/// no jitter, its minRTT measured at 10 ms from Envoy's start; then 20 quiet windows (calls of
/// 10 ms, 8 in flight, under the limit) that grow its limit. Returns it, its limit, and the
/// time the next window starts, in ms.
fn grown(in_flight_floor: f64) -> (EnvoyGradient, u32, u64) {
    let config = EnvoyGradientConfig {
        jitter: 0.0,
        window_min_rtts: 0.0,
        in_flight_floor,
        ..EnvoyGradientConfig::default()
    };
    let mut envoy = EnvoyGradient::with_seed(config, 1).unwrap();
    let mut limit = envoy.initial_limit();
    // 50 calls end at 10, 12, ..., 108 ms: the measurement ends at 108 ms, windows every 100
    // ms from there.
    feed_calls(&mut envoy, &mut limit, (10, 110, 2), |_| 10, |_| 3);
    feed_calls(&mut envoy, &mut limit, (110, 2110, 2), |_| 10, unbound);
    assert!(limit > 200, "20 quiet windows grow the limit: {limit}");
    (envoy, limit, 2110)
}

/// Calls in flight under `limit`: at most [`CARRIED`], never the limit itself.
fn unbound(limit: u32) -> u32 {
    CARRIED.min(limit - 1)
}

/// Feeds `windows` sample windows of calls of `rtt_ms`, each finding `in_flight(limit)` in
/// flight, from `from_ms`; returns the limit after each window.
fn windows(
    envoy: &mut EnvoyGradient,
    limit: &mut u32,
    from_ms: u64,
    windows: u64,
    rtt_ms: u64,
    in_flight: impl Fn(u32) -> u32,
) -> Vec<u32> {
    (0..windows)
        .map(|window| {
            let from = from_ms + window * 100;
            feed_calls(envoy, limit, (from, from + 100, 2), |_| rtt_ms, &in_flight);
            *limit
        })
        .collect()
}

#[test]
fn a_burst_the_limit_did_not_cause_shrinks_it_only_to_the_floor() {
    // Calls of 20 ms: past the buffer (10 ms x 1.25), gradient 12.5 / 20 = 0.625; the calls
    // in flight stay at 8, under the limit.
    let (mut envoy, mut limit, from) = grown(0.0);
    let envoy_s = windows(&mut envoy, &mut limit, from, 20, 20, |_| CARRIED);
    assert!(
        envoy_s.last().is_some_and(|&limit| limit < CARRIED),
        "Envoy's gradient alone takes the limit under the calls in flight: {envoy_s:?}"
    );

    let (mut envoy, mut limit, from) = grown(6.0);
    let floored = windows(&mut envoy, &mut limit, from, 20, 20, |_| CARRIED);
    // The same fall from the same limit while it is above the floor...
    let above = floored.iter().take_while(|&&limit| limit > 48).count();
    assert_eq!(floored[..above], envoy_s[..above], "{floored:?}");
    // ... and then 6 x 8 = 48, window after window.
    assert!(
        floored[above..].iter().all(|&limit| limit == 48),
        "{floored:?}"
    );
}

/// A window in which calls fill the limit follows Envoy's gradient below the floor, and the
/// floor never raises the limit after.
#[test]
fn once_the_limit_binds_envoy_s_gradient_applies() {
    let (mut envoy, mut limit, from) = grown(6.0);
    windows(&mut envoy, &mut limit, from, 20, 20, |_| CARRIED);
    assert_eq!(limit, 48);
    // Calls fill the limit: 48 x 0.625 = 30, + sqrt(30) = 35.48.
    let bound = windows(&mut envoy, &mut limit, from + 2000, 1, 20, |limit| limit);
    assert_eq!(bound, [35]);
    // The next window still holds the bound one's last call, which found the limit full: 35 x
    // 0.625 = 21.9, + sqrt(21.9) = 26.55. The one after does not bind: the floor (48) stops
    // its fall (to 20), and lifts the limit no higher than it was.
    let after = windows(&mut envoy, &mut limit, from + 2100, 2, 20, |_| CARRIED);
    assert_eq!(after, [26, 26]);
}

#[test]
fn a_queue_does_not_raise_the_floor() {
    // The burst's windows hold 40 calls in flight (under the limit), with RTTs past the buffer:
    // the floor is still 6 x the 8 of the quiet windows, not 6 x 40.
    let (mut envoy, mut limit, from) = grown(6.0);
    let queued = windows(&mut envoy, &mut limit, from, 20, 20, |limit| {
        40.min(limit - 1)
    });
    assert_eq!(queued.last(), Some(&48), "{queued:?}");
}

#[test]
fn the_floor_forgets_a_window_after_fifty_more() {
    let (mut envoy, mut limit, from) = grown(6.0);
    let floored = windows(&mut envoy, &mut limit, from, 50, 20, |_| CARRIED);
    // The 49th window of the burst still remembers the last quiet one; the 50th does not.
    assert_eq!(floored[48], 48, "{floored:?}");
    assert!(floored[49] < 48, "{floored:?}");
}

#[test]
fn the_floor_is_checked() {
    for bad in [-1.0, 100.5, f64::NAN, f64::INFINITY] {
        let err = EnvoyGradient::new(EnvoyGradientConfig {
            in_flight_floor: bad,
            ..EnvoyGradientConfig::default()
        })
        .unwrap_err();
        assert_eq!(err.field(), "in_flight_floor", "{bad}");
    }
    assert_eq!(EnvoyGradientConfig::default().in_flight_floor, 6.0);
}

#[cfg(feature = "serde")]
#[test]
fn the_floor_reads_by_name_and_defaults_to_six() {
    let config: EnvoyGradientConfig = serde_json::from_str(r#"{"in_flight_floor": 0}"#).unwrap();
    assert_eq!(config.in_flight_floor, 0.0);
    let config: EnvoyGradientConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(config.in_flight_floor, 6.0);
}
