//! Envoy's gradient controller measuring its minRTT again: measured from a sample window of the
//! calls as they come in which the limit does not bind, so that a service below its limit is not
//! refused for the measurement; pinned at `min_concurrency` (as Envoy does, always) when the
//! limit binds in five sample windows before the measurement has its calls.
//! Traces on a nanosecond time axis, calls fed to the algorithm as they end.

use spillway::adaptive::{
    ChangeReason, EnvoyGradient, EnvoyGradientConfig, LimitAlgorithm, Remeasure,
};
use std::time::Duration;

use support::calls::feed_calls;

mod support;

const MS: u64 = 1_000_000;

/// What the limit did: every update's time, limit and reason.
#[derive(Default)]
struct Trace {
    updates: Vec<(u64, u32, ChangeReason)>,
}

impl Trace {
    fn at(&self, reason: ChangeReason) -> Vec<u64> {
        self.updates
            .iter()
            .filter(|(_, _, r)| *r == reason)
            .map(|(at, _, _)| *at)
            .collect()
    }
}

/// A controller, its limit and what the limit did.
struct Run {
    envoy: EnvoyGradient,
    limit: u32,
    trace: Trace,
}

impl Run {
    /// The controller measuring again every 10 s, without jitter.
    fn new(remeasure: Remeasure) -> Self {
        let config = EnvoyGradientConfig {
            min_rtt_interval: Duration::from_secs(10),
            jitter: 0.0,
            remeasure,
            // Envoy's 100 ms windows, which the traces count in (the service's 10 to 20 ms
            // calls would otherwise lengthen them to 12 minRTTs).
            window_min_rtts: 0.0,
            ..EnvoyGradientConfig::default()
        };
        let envoy = EnvoyGradient::with_seed(config, 3).unwrap();
        let limit = envoy.initial_limit();
        Self {
            envoy,
            limit,
            trace: Trace::default(),
        }
    }

    /// Feeds calls that end every `gap_ms` from `from_ms` to `to_ms`, each taking `rtt_ms` and
    /// finding `in_flight(limit)` calls in flight when admitted.
    fn feed(&mut self, calls: (u64, u64, u64), rtt_ms: u64, in_flight: impl Fn(u32) -> u32) {
        let updates = feed_calls(
            &mut self.envoy,
            &mut self.limit,
            calls,
            |_| rtt_ms,
            in_flight,
        );
        let at_nanos = updates.into_iter().map(|(at, l, r)| (at * MS, l, r));
        self.trace.updates.extend(at_nanos);
    }

    /// Calls that find at most `in_flight` in flight (fewer if the limit is lower).
    fn below(&mut self, calls: (u64, u64, u64), rtt_ms: u64, in_flight: u32) {
        self.feed(calls, rtt_ms, |limit| in_flight.min(limit));
    }

    /// Calls that each find the limit full.
    fn bound(&mut self, calls: (u64, u64, u64), rtt_ms: u64) {
        self.feed(calls, rtt_ms, |limit| limit);
    }

    /// A light load from the start to `seconds`: 200 calls a second of 10 ms, two in flight,
    /// far below any limit after the start.
    fn light(&mut self, seconds: u64) {
        self.below((20, seconds * 1000, 5), 10, 2);
    }

    fn at(&self, reason: ChangeReason) -> Vec<u64> {
        self.trace.at(reason)
    }

    fn baseline(&self) -> Option<Duration> {
        self.envoy.estimates().baseline
    }
}

#[test]
fn below_its_limit_the_service_is_not_pinned_to_measure_again() {
    let mut run = Run::new(Remeasure::WhenBound);
    run.light(35);
    // The start measures pinned, as Envoy does (nothing is known yet): at the initial limit,
    // `min_concurrency`, so with no update. No later measurement pins.
    assert_eq!(run.envoy.initial_limit(), 3);
    assert_eq!(run.at(ChangeReason::MeasuringMinRtt), Vec::<u64>::new());
    assert_eq!(run.at(ChangeReason::MinRttMeasured).len(), 1);
    // After it, the limit never comes back down: 35 s cross three scheduled measurements.
    let first = run.at(ChangeReason::MinRttMeasured)[0];
    let lowest = run
        .trace
        .updates
        .iter()
        .filter(|(at, _, _)| *at > first + 1_000 * MS)
        .map(|(_, limit, _)| *limit)
        .min();
    assert!(
        lowest.unwrap_or(run.limit) > 100,
        "the limit fell to {lowest:?}"
    );
    assert_eq!(run.baseline(), Some(Duration::from_millis(10)));
}

#[test]
fn envoy_s_own_schedule_pins_whatever_the_load() {
    let mut run = Run::new(Remeasure::Always);
    run.light(35);
    let pinned = run.at(ChangeReason::MeasuringMinRtt);
    // At about 10, 20 and 30 s (after the start's, at the initial limit).
    assert_eq!(pinned.len(), 3, "pinned at {pinned:?}");
    for pair in pinned.windows(2) {
        let gap = pair[1] - pair[0];
        assert!((10_000 * MS..=10_500 * MS).contains(&gap), "{gap} ns apart");
    }
}

#[test]
fn a_faster_service_lowers_the_min_rtt_without_pinning() {
    let mut run = Run::new(Remeasure::WhenBound);
    run.light(5);
    // From 5 s, calls take 4 ms: the next measurement (about 10 s after the first) takes it.
    run.below((5_000, 12_000, 5), 4, 1);
    assert_eq!(run.baseline(), Some(Duration::from_millis(4)));
    assert_eq!(run.at(ChangeReason::MeasuringMinRtt), Vec::<u64>::new());
}

#[test]
fn a_slower_service_is_measured_pinned_once_its_limit_binds() {
    let mut run = Run::new(Remeasure::WhenBound);
    run.light(5);
    // From 5 s, calls take 20 ms, and as many are in flight as the limit lets in: the gradient
    // (12.5 / 20) holds the limit at 4, above `min_concurrency`, so only the schedule can
    // measure again. The limit binds in every window: at the fifth, counting the one in which
    // the measurement fell due (at 10.265 s; windows end at 10.265 s, 10.365 s, ...), it pins.
    run.bound((5_000, 12_000, 5), 20);
    let pinned = run.at(ChangeReason::MeasuringMinRtt);
    assert_eq!(pinned.len(), 1, "pinned at {pinned:?}");
    assert_eq!(pinned, [10_665 * MS]);
    assert_eq!(run.baseline(), Some(Duration::from_millis(20)));
}

/// Near capacity a limit binds in bursts: a measurement that falls due in one waits for a
/// window that does not bind, and measures unpinned then.
#[test]
fn a_measurement_due_in_a_burst_waits_for_a_window_that_does_not_bind() {
    let mut run = Run::new(Remeasure::WhenBound);
    run.light(10);
    // A burst from 10 s to 10.5 s, across the measurement due at 10.265 s: every call finds
    // the limit full, and takes 9 ms. It binds in four windows from the one in which the
    // measurement fell due (those ending at 10.265 s to 10.565 s), one short of pinning.
    run.bound((10_000, 10_500, 5), 9);
    // Then light again, with calls of 7 ms: the measurement takes them, without pinning.
    run.below((10_500, 11_200, 5), 7, 2);
    assert_eq!(run.at(ChangeReason::MeasuringMinRtt), Vec::<u64>::new());
    assert_eq!(run.baseline(), Some(Duration::from_millis(7)));
    // A burst as long as five windows pins, as Envoy would have at once.
    let mut run = Run::new(Remeasure::WhenBound);
    run.light(10);
    run.bound((10_000, 10_800, 5), 9);
    assert_eq!(run.at(ChangeReason::MeasuringMinRtt), [10_665 * MS]);
}

/// On a quiet service a measurement may not get its calls before the next falls due: it goes
/// on, as Envoy's pinned measurement waits for its calls however long they take.
#[test]
fn a_measurement_on_a_quiet_service_goes_on_past_the_next_one_due() {
    let mut run = Run::new(Remeasure::WhenBound);
    run.light(1);
    // From 1 s, a call of 7 ms every 250 ms: 40 calls in each 10 s between measurements, fewer
    // than the 50 one takes. The one due at 10.265 s gets its 50th call at about 22.8 s, after
    // the next fell due (about 20.3 s), and takes the 7 ms.
    run.below((1_000, 20_000, 250), 7, 1);
    assert_eq!(run.baseline(), Some(Duration::from_millis(10)));
    run.below((20_000, 25_000, 250), 7, 1);
    assert_eq!(run.baseline(), Some(Duration::from_millis(7)));
    assert_eq!(run.at(ChangeReason::MeasuringMinRtt), Vec::<u64>::new());
}

#[test]
fn a_burst_that_fills_the_limit_restarts_an_unpinned_measurement() {
    let mut run = Run::new(Remeasure::WhenBound);
    // Light until the measurement due at about 10.3 s has begun, unpinned.
    run.below((20, 10_300, 5), 10, 2);
    // A burst: for 100 ms every call finds the limit full, and takes 8 ms. The measurement
    // that saw it is given up (it would have been 8 ms), without pinning the limit.
    run.bound((10_300, 10_400, 5), 8);
    // Then calls of 6 ms, light: the measurement starts again and takes them.
    run.below((10_400, 11_200, 5), 6, 2);
    assert!(run.at(ChangeReason::MeasuringMinRtt).is_empty());
    assert_eq!(run.baseline(), Some(Duration::from_millis(6)));
}

#[test]
fn a_measurement_inflated_by_a_queue_is_kept_out() {
    let mut run = Run::new(Remeasure::WhenBound);
    run.below((20, 10_200, 5), 10, 2);
    // Through the measurement due at about 10.3 s, calls take 20 ms but do not fill the limit
    // (the gradient lowers it, not yet to the calls in flight): a queue in the service, twice
    // the minRTT, is not taken as the new minRTT.
    run.below((10_200, 10_700, 5), 20, 3);
    assert!(run.limit > 3, "the limit fell to {}", run.limit);
    assert_eq!(run.baseline(), Some(Duration::from_millis(10)));
    // The windows saw the calls of 20 ms.
    assert_eq!(
        run.envoy.estimates().latest,
        Some(Duration::from_millis(20))
    );
    assert_eq!(run.at(ChangeReason::MeasuringMinRtt), Vec::<u64>::new());
}
