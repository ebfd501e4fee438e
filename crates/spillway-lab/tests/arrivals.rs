//! The loopback generator's arrivals: each scenario's rate, evenly spaced or Poisson, the same
//! for the same seed.

use spillway_lab::arrivals::{Arrival, Arrivals, Spacing};
use spillway_lab::{LabParams, Scenario, ServiceTime};
use std::time::Duration;

/// 2 workers x 10 ms: 200 a second.
fn params() -> LabParams {
    LabParams {
        workers: 2,
        service_time: ServiceTime::Exponential {
            mean: Duration::from_millis(10),
        },
        ..LabParams::default().quick()
    }
}

fn count(times: &[Duration], from: u64, to: u64) -> usize {
    let (from, to) = (Duration::from_secs(from), Duration::from_secs(to));
    times.iter().filter(|&&t| t >= from && t < to).count()
}

#[test]
fn a_spike_s_rates_hold_in_both_spacings() {
    let spike = Scenario::Spike { load: 0.5 };
    for spacing in [Spacing::Even, Spacing::Poisson] {
        let params = LabParams {
            seed: 3,
            ..params()
        };
        let times: Vec<Duration> = Arrivals::new(&params, spike, spacing)
            .unwrap()
            .map(|arrival| arrival.at)
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{spacing:?}");
        assert!(
            times.iter().all(|&t| t < spike.arrivals_end(&params)),
            "{spacing:?}"
        );
        // 100 a second for 10 s, 1,000 a second for 10 s, then 100 a second for 20 s: a
        // Poisson count of mean 1,000 lies within 870 to 1,130 but once in 10,000, of 10,000
        // within 9,600 to 10,400.
        let (before, during, after) = (
            count(&times, 0, 10),
            count(&times, 10, 20),
            count(&times, 20, 40),
        );
        match spacing {
            Spacing::Even => assert_eq!((before, during, after), (1_000, 10_000, 2_000)),
            Spacing::Poisson => {
                assert!((870..=1_130).contains(&before), "{before}");
                assert!((9_600..=10_400).contains(&during), "{during}");
                assert!((1_820..=2_180).contains(&after), "{after}");
            }
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_arrivals() {
    let sweep = Scenario::Sweep { load: 3.0 };
    let draw = |seed| -> Vec<Arrival> {
        let params = LabParams { seed, ..params() };
        Arrivals::new(&params, sweep, Spacing::Poisson)
            .unwrap()
            .collect()
    };
    assert_eq!(draw(5), draw(5));
    assert_ne!(draw(5), draw(6));
    // Even spacing draws the work only.
    let even = |seed| -> Vec<Duration> {
        let params = LabParams { seed, ..params() };
        Arrivals::new(&params, sweep, Spacing::Even)
            .unwrap()
            .map(|arrival| arrival.at)
            .collect()
    };
    assert_eq!(even(5), even(6));
}

#[test]
fn bad_parameters_are_named() {
    let err =
        Arrivals::new(&params(), Scenario::Sweep { load: 0.0 }, Spacing::Poisson).unwrap_err();
    assert_eq!(err.field(), "load");
    let bad = LabParams {
        workers: 0,
        ..params()
    };
    let err = Arrivals::new(&bad, Scenario::Sweep { load: 1.0 }, Spacing::Even).unwrap_err();
    assert_eq!(err.field(), "workers");
}
