//! The probing BBR's RT filter with `rtt_correction`: each round's mean RT is raised by that
//! many standard errors (the filter's calls' spread about their rounds' means, pooled, over the
//! root of the round's calls) before the smallest is taken. Traces of calls fed to the
//! algorithm at given times.

use spillway::adaptive::{Bbr, BbrConfig, LimitAlgorithm, Sample};
use std::time::Duration;

const MS: u64 = 1_000_000;

/// Rounds of 100 ms closing after 4 calls, and a limit no call fills: the limit never binds,
/// so nothing but the filters moves.
fn bbr(rtt_correction: f64) -> Bbr {
    Bbr::new(BbrConfig {
        min_samples: 4,
        initial_limit: 100,
        rtt_correction,
        ..BbrConfig::default()
    })
    .unwrap()
}

/// Feeds `calls` (end in ms, RT in ms), each alone in flight under a limit of 100.
fn feed(bbr: &mut Bbr, calls: &[(u64, u64)]) {
    for &(end, rtt) in calls {
        let sample = Sample {
            started_nanos: (end - rtt) * MS,
            rtt: Duration::from_millis(rtt),
            in_flight: 1,
            dropped: false,
        };
        bbr.on_sample(&sample, end * MS, 100);
    }
}

/// Two rounds: 10, 30, 10 and 30 ms (mean 20 ms, squared deviations 4 x 100 ms^2), then four
/// calls of 10 ms (mean 10 ms, no deviation).
const TWO_ROUNDS: [(u64, u64); 8] = [
    (10, 10),
    (40, 30),
    (70, 10),
    (100, 30),
    (110, 10),
    (140, 10),
    (170, 10),
    (200, 10),
];

#[test]
fn without_a_correction_the_calmest_round_s_mean_is_the_rt() {
    let mut bbr = bbr(0.0);
    feed(&mut bbr, &TWO_ROUNDS);
    assert_eq!(bbr.estimates().baseline, Some(Duration::from_millis(10)));
    assert_eq!(bbr.estimates().latest, Some(Duration::from_millis(10)));
}

#[test]
fn a_correction_raises_each_round_s_mean_by_its_standard_errors() {
    // Pooled: 400 ms^2 over (4 - 1) + (4 - 1) degrees of freedom, 66.7 ms^2; a round of 4
    // calls has a standard error of sqrt(66.7 / 4) = 4.08 ms. The second round, 10 + 4.08 ms,
    // is below the first's 20 + 4.08 ms.
    for correction in [1.0, 2.5] {
        let mut bbr = bbr(correction);
        feed(&mut bbr, &TWO_ROUNDS);
        let error = (400.0_f64 / 6.0 / 4.0).sqrt();
        let expected = 10.0 + correction * error;
        let baseline = bbr.estimates().baseline.unwrap().as_secs_f64() * 1e3;
        assert!(
            (baseline - expected).abs() < 1e-6,
            "correction {correction}: {baseline} ms, expected {expected} ms"
        );
        // The latest round's RT is as measured.
        assert_eq!(bbr.estimates().latest, Some(Duration::from_millis(10)));
    }
}

#[test]
fn calls_that_all_take_the_same_time_are_not_corrected() {
    let mut bbr = bbr(3.0);
    let calls: Vec<(u64, u64)> = (1..=12).map(|call| (call * 25, 10)).collect();
    feed(&mut bbr, &calls);
    assert_eq!(bbr.estimates().baseline, Some(Duration::from_millis(10)));
}

#[test]
fn the_correction_is_checked() {
    for bad in [-0.1, 3.5, f64::NAN, f64::INFINITY] {
        let err = Bbr::new(BbrConfig {
            rtt_correction: bad,
            ..BbrConfig::default()
        })
        .unwrap_err();
        assert_eq!((err.algorithm(), err.field()), ("bbr", "rtt_correction"));
    }
    assert!(Bbr::new(BbrConfig {
        rtt_correction: 3.0,
        ..BbrConfig::default()
    })
    .is_ok());
}
