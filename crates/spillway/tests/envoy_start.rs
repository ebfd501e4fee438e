//! Envoy's gradient controller at its start: spillway's open start (`start_limit`, here 20)
//! admits calls up to it and measures the first minRTT from the calls as they come; a start
//! whose limit binds measures pinned at `min_concurrency`, as Envoy always does (and as the
//! default, `start_limit = 0`, does). Traces on a nanosecond time axis, calls fed to the
//! algorithm as they end; the last test goes through the limiter on a `ManualClock`.

use spillway::adaptive::{
    AdaptiveAlgorithm, AdaptiveRule, ChangeReason, EnvoyGradient, EnvoyGradientConfig,
    LimitAlgorithm, Remeasure,
};
use spillway::{ManualClock, Spillway};
use std::time::Duration;

use support::calls::feed_calls;

mod support;

/// The defaults with an open start at 20.
fn open() -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        start_limit: 20,
        ..EnvoyGradientConfig::default()
    }
}

fn envoy(config: EnvoyGradientConfig) -> EnvoyGradient {
    EnvoyGradient::with_seed(
        EnvoyGradientConfig {
            jitter: 0.0,
            ..config
        },
        7,
    )
    .unwrap()
}

/// Feeds calls that end every `gap_ms` from `from_ms` to `to_ms`, each taking `rtt(end)` ms and
/// finding `in_flight` calls in flight when admitted; returns every update (time in ms).
fn feed(
    envoy: &mut EnvoyGradient,
    limit: &mut u32,
    calls: (u64, u64, u64),
    rtt: impl Fn(u64) -> u64,
    in_flight: u32,
) -> Vec<(u64, u32, ChangeReason)> {
    feed_calls(envoy, limit, calls, rtt, |_| in_flight)
}

#[test]
fn a_light_start_is_measured_as_calls_come_and_never_pinned() {
    let mut envoy = envoy(open());
    let mut limit = envoy.initial_limit();
    assert_eq!(limit, 20);
    assert!(envoy.is_measuring_min_rtt());
    // The first sample window (from the first call's end, at 3 ms, to 103 ms): the calls
    // that end in it are 2 ms long, as the short calls of a cold start are; they are not
    // measured.
    let first = feed(&mut envoy, &mut limit, (3, 103, 2), |_| 2, 4);
    assert_eq!(first, []);
    // From then on, calls of 10 ms, 4 in flight: 50 end from 103 to 201 ms, and the window
    // that ends at 203 ms closes the measurement at their median.
    let rest = feed(&mut envoy, &mut limit, (103, 203, 2), |_| 10, 4);
    assert_eq!(rest, []);
    assert_eq!(
        limit, 20,
        "the limit holds at start_limit while it measures"
    );
    assert!(envoy.is_measuring_min_rtt());
    let closed = feed(&mut envoy, &mut limit, (203, 205, 2), |_| 10, 4);
    assert!(!envoy.is_measuring_min_rtt());
    assert_eq!(envoy.estimates().baseline, Some(Duration::from_millis(10)));
    // The same window's median is the minRTT: gradient 1.25, 20 x 1.25 + sqrt(25) = 30.
    assert_eq!(closed, [(203, 30, ChangeReason::Grew)]);
}

/// After an open start, the next minRTT measurement is scheduled an interval after the first:
/// with `remeasure = "always"` (Envoy's), it pins then, and not before.
#[test]
fn an_open_start_schedules_the_next_measurement() {
    let mut envoy = envoy(EnvoyGradientConfig {
        remeasure: Remeasure::Always,
        min_rtt_interval: Duration::from_secs(10),
        ..open()
    });
    let mut limit = envoy.initial_limit();
    assert_eq!(feed(&mut envoy, &mut limit, (3, 103, 2), |_| 2, 4), []);
    let start = feed(&mut envoy, &mut limit, (103, 10_400, 2), |_| 10, 4);
    let pins: Vec<u64> = start
        .iter()
        .filter(|(_, _, reason)| *reason == ChangeReason::MeasuringMinRtt)
        .map(|(at, _, _)| *at)
        .collect();
    assert_eq!(envoy.estimates().baseline, Some(Duration::from_millis(10)));
    // The first minRTT at 203 ms (as above), the next due 10 s later.
    assert_eq!(pins, [10_203]);
}

/// A window that binds after the open start began gathering calls gives them up and measures
/// pinned: the minRTT is the pinned calls', not the gathered ones'.
#[test]
fn a_window_that_binds_while_the_open_start_gathers_measures_pinned() {
    let mut envoy = envoy(open());
    let mut limit = envoy.initial_limit();
    // The first window, then 30 calls of 5 ms gathered (fewer than 50)...
    assert_eq!(feed(&mut envoy, &mut limit, (3, 103, 2), |_| 2, 4), []);
    assert_eq!(feed(&mut envoy, &mut limit, (103, 163, 2), |_| 5, 4), []);
    // ... then the limit fills up: the window that ends at 203 ms binds.
    let bound = feed(&mut envoy, &mut limit, (163, 204, 2), |_| 5, 20);
    assert_eq!(bound, [(203, 3, ChangeReason::MeasuringMinRtt)]);
    let pinned = feed(&mut envoy, &mut limit, (215, 400, 2), |_| 12, 3);
    assert_eq!(pinned, [(313, 20, ChangeReason::MinRttMeasured)]);
    assert_eq!(envoy.estimates().baseline, Some(Duration::from_millis(12)));
}

#[test]
fn a_start_that_binds_is_measured_pinned_then_goes_back_to_the_start_limit() {
    let mut envoy = envoy(open());
    let mut limit = envoy.initial_limit();
    // A service loaded from its start: every call finds the limit full, each 40 ms long. The
    // first window ends at 141 ms.
    let bound = feed(&mut envoy, &mut limit, (41, 142, 2), |_| 40, 20);
    assert_eq!(bound, [(141, 3, ChangeReason::MeasuringMinRtt)]);
    assert!(envoy.is_measuring_min_rtt());
    // Calls started before the pin are not measured; 50 calls of 12 ms started after it are,
    // and the limit goes back to where it was, 20.
    let measured = feed(&mut envoy, &mut limit, (143, 155, 2), |_| 40, 3);
    assert_eq!(measured, []);
    let pinned = feed(&mut envoy, &mut limit, (155, 300, 2), |_| 12, 3);
    assert_eq!(pinned, [(253, 20, ChangeReason::MinRttMeasured)]);
    assert_eq!(envoy.estimates().baseline, Some(Duration::from_millis(12)));
}

#[test]
fn a_start_limit_of_zero_is_envoys_pinned_start() {
    let mut envoy = envoy(EnvoyGradientConfig {
        start_limit: 0,
        min_rtt_request_count: 5,
        ..EnvoyGradientConfig::default()
    });
    let mut limit = envoy.initial_limit();
    assert_eq!(limit, 3);
    assert_eq!(EnvoyGradientConfig::default().start_limit, 0);
    assert!(envoy.is_measuring_min_rtt());
    let updates = feed(&mut envoy, &mut limit, (10, 20, 2), |_| 10, 3);
    assert_eq!(updates, [(18, 3, ChangeReason::MinRttMeasured)]);
}

#[test]
fn a_start_limit_outside_the_limits_is_an_error_that_names_it() {
    let err = |start_limit| {
        EnvoyGradient::new(EnvoyGradientConfig {
            start_limit,
            ..EnvoyGradientConfig::default()
        })
        .unwrap_err()
    };
    let low = err(2);
    assert_eq!(low.field(), "start_limit");
    assert_eq!(
        low.problem(),
        "must be at least `min_concurrency` (3), got 2"
    );
    let high = err(1001);
    assert_eq!(high.field(), "start_limit");
    assert_eq!(
        high.problem(),
        "must be at most `max_limit` (1000), got 1001"
    );
    for fine in [0, 3, 1000] {
        EnvoyGradient::new(EnvoyGradientConfig {
            start_limit: fine,
            ..EnvoyGradientConfig::default()
        })
        .unwrap();
    }
}

/// Through the limiter: the open start admits 19 calls at once from its first call (20 would
/// fill the limit, and a window in which it is full measures pinned), and a start measured
/// from light traffic refuses nothing.
#[test]
fn an_open_start_refuses_nothing_at_a_light_start() {
    let clock = ManualClock::new();
    let spillway = Spillway::new_with_clock(clock.clone());
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::inbound(
            "start",
            AdaptiveAlgorithm::EnvoyGradient(open()),
        )])
        .unwrap();
    let burst: Vec<_> = (0..19)
        .map(|_| spillway.entry("api").inbound().enter())
        .collect();
    assert!(burst.iter().all(Result::is_ok));
    drop(burst);
    // Light traffic: 4 calls of 10 ms every 10 ms for 2 s; nothing is refused.
    for _ in 0..200 {
        let calls: Vec<_> = (0..4)
            .map(|_| spillway.entry("api").inbound().enter().expect("admitted"))
            .collect();
        clock.advance(Duration::from_millis(10));
        drop(calls);
    }
    let state = spillway.adaptive_state("start").unwrap();
    assert_eq!(state.estimates.baseline, Some(Duration::from_millis(10)));
    assert_eq!(state.refusals, 0);
    assert!(state.limit >= 20, "limit {}", state.limit);
}
