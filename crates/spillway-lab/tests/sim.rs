//! The simulator's own correctness: known answers, conservation, determinism, collapse.

use spillway_lab::report::to_json;
use spillway_lab::{
    run_lab, simulate, LabParams, RetryPolicy, RunResult, Scenario, ServiceTime, Strategy,
};
use std::time::Duration;
use support::assert_conserved;

mod support;

fn brief() -> LabParams {
    LabParams {
        warm_up: Duration::from_secs(1),
        measure: Duration::from_secs(3),
        ..LabParams::default()
    }
}

/// Erlang C: the mean time in an M/M/c system (waiting plus service), in seconds.
fn mmc_mean_time(c: u32, lambda: f64, mu: f64) -> f64 {
    let a = lambda / mu;
    let rho = a / f64::from(c);
    let mut term = 1.0; // a^k / k!
    let mut sum = 0.0;
    for k in 0..c {
        sum += term;
        term *= a / f64::from(k + 1);
    }
    let tail = term / (1.0 - rho); // a^c / c! / (1 - rho)
    let wait_probability = tail / (sum + tail);
    wait_probability / (f64::from(c) * mu - lambda) + 1.0 / mu
}

#[test]
fn an_unprotected_mmc_queue_has_erlang_c_mean_time() {
    // Two workers, 10 ms exponential service, 80% load, clients that never give up in practice;
    // five seeds, as one run's mean at 80% load strays by up to about 10%.
    let params = |seed| LabParams {
        workers: 2,
        service_time: ServiceTime::Exponential {
            mean: Duration::from_millis(10),
        },
        client_timeout: Duration::from_secs(60),
        retry: RetryPolicy::Off,
        warm_up: Duration::from_secs(10),
        measure: Duration::from_secs(300),
        seed,
        adaptive_queue: None,
        envoy: Default::default(),
        bbr: Default::default(),
        static_concurrency_limit: None,
        service_spread: 0.0,
    };
    let runs: Vec<RunResult> = (1..=5)
        .map(|seed| simulate(&params(seed), Scenario::Sweep { load: 0.8 }, Strategy::None).unwrap())
        .collect();
    let mean_ms = runs.iter().map(|r| r.mean_ms).sum::<f64>() / runs.len() as f64;
    let expected_ms = mmc_mean_time(2, 160.0, 100.0) * 1e3; // 27.8 ms
    let error = (mean_ms - expected_ms).abs() / expected_ms;
    assert!(
        error < 0.03,
        "mean {mean_ms:.2} ms against Erlang C's {expected_ms:.2} ms"
    );
    for run in &runs {
        assert_eq!(run.counts.timed_out, 0);
        assert_eq!(run.counts.answered, run.counts.requests);
        // Offered 160 a second for 300 s, within five standard deviations of Poisson.
        let requests = run.counts.requests as f64;
        assert!(
            (requests - 48_000.0).abs() < 5.0 * 48_000f64.sqrt(),
            "{requests}"
        );
    }
}

/// A bimodal service with room for every request: 90% answer in the fast time and 10% in ten
/// times it, the two weighted to the mean (10 ms = 0.9 x 5.26 ms + 0.1 x 52.6 ms).
#[test]
fn a_bimodal_service_answers_in_its_two_times_in_their_shares() {
    let params = LabParams {
        workers: 64,
        service_time: ServiceTime::Bimodal {
            mean: Duration::from_millis(10),
            slow_share: 0.1,
            slow_factor: 10.0,
        },
        ..brief()
    };
    let (fast, slow) = ServiceTime::bimodal_times(Duration::from_millis(10), 0.1, 10.0);
    assert_eq!((fast.as_micros(), slow.as_micros()), (5_263, 52_631));
    let run = simulate(&params, Scenario::Sweep { load: 0.1 }, Strategy::None).unwrap();
    // 64 workers at 10% load: nobody waits, so the quantiles are the two times.
    assert!((run.p50_ms - 5.263).abs() < 0.01, "p50 {}", run.p50_ms);
    assert!((run.p99_ms - 52.63).abs() < 0.01, "p99 {}", run.p99_ms);
    // The mean, within five standard errors of the 10% draw over the run's requests.
    let n = run.counts.answered as f64;
    let tolerance = 5.0 * (0.1f64 * 0.9 / n).sqrt() * (52.63 - 5.263);
    assert!(
        (run.mean_ms - 10.0).abs() < tolerance,
        "mean {} (n {n})",
        run.mean_ms
    );
    let again = simulate(&params, Scenario::Sweep { load: 0.1 }, Strategy::None).unwrap();
    assert_eq!(run, again, "the same seed, the same run");
}

#[test]
fn a_fixed_service_with_one_worker_and_no_contention_answers_in_its_service_time() {
    let params = LabParams {
        workers: 64,
        service_time: ServiceTime::Fixed {
            time: Duration::from_millis(10),
        },
        ..brief()
    };
    let run = simulate(&params, Scenario::Sweep { load: 0.1 }, Strategy::None).unwrap();
    // 64 workers at 10% load: nobody waits.
    assert_eq!((run.p50_ms, run.p99_ms, run.p999_ms), (10.0, 10.0, 10.0));
    assert_eq!(run.mean_ms, 10.0);
}

#[test]
fn every_attempt_ends_exactly_once_in_every_strategy_and_scenario() {
    let params = brief();
    let report = run_lab(&params, &Strategy::ALL).unwrap();
    assert_eq!(report.runs.len(), Strategy::ALL.len() * 8);
    for run in &report.runs {
        assert_conserved(run);
    }
}

#[test]
fn every_strategy_sees_the_same_arrivals() {
    let params = brief();
    for scenario in [
        Scenario::Sweep { load: 3.0 },
        Scenario::Spike { load: 1.0 },
        Scenario::Slowdown { load: 1.0 },
    ] {
        let requests: Vec<u64> = Strategy::ALL
            .iter()
            .map(|&s| simulate(&params, scenario, s).unwrap().counts.requests)
            .collect();
        assert!(
            requests.windows(2).all(|w| w[0] == w[1]),
            "{scenario}: {requests:?}"
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_bytes_and_another_seed_other_numbers() {
    let params = LabParams {
        measure: Duration::from_secs(2),
        ..brief()
    };
    let strategies = [Strategy::None, Strategy::StaticConcurrency, Strategy::Bbr];
    let first = to_json(&run_lab(&params, &strategies).unwrap()).unwrap();
    let second = to_json(&run_lab(&params, &strategies).unwrap()).unwrap();
    assert_eq!(first, second);
    let other = LabParams { seed: 2, ..params };
    let third = to_json(&run_lab(&other, &strategies).unwrap()).unwrap();
    assert_ne!(first, third);
}

#[test]
fn without_protection_timeouts_and_retries_collapse_goodput_at_3x() {
    let run = simulate(&brief(), Scenario::Sweep { load: 3.0 }, Strategy::None).unwrap();
    assert!(run.goodput < 0.2, "goodput {} at 3x", run.goodput);
    assert!(run.counts.timed_out > run.counts.answered);
    assert!(run.counts.retries > run.counts.requests);
}

#[test]
fn a_concurrency_limit_keeps_goodput_near_capacity_at_3x() {
    let run = simulate(
        &brief(),
        Scenario::Sweep { load: 3.0 },
        Strategy::StaticConcurrency,
    )
    .unwrap();
    assert!(run.goodput > 0.9, "goodput {}", run.goodput);
    assert_eq!(run.counts.timed_out, 0);
}

#[test]
fn spikes_and_slowdowns_have_time_series_and_a_recovery_or_none() {
    let params = brief();
    let spike = simulate(
        &params,
        Scenario::Spike { load: 1.0 },
        Strategy::StaticConcurrency,
    )
    .unwrap();
    // Ten points a second from 1 s to 40 s.
    assert_eq!(spike.series.len(), 391);
    assert_eq!(spike.series[0].t_s, 1.0);
    assert!(spike.series.iter().all(|p| p.limit == Some(16.0)));
    assert!(
        spike.recovery_s.is_some_and(|s| s <= 2.0),
        "{:?}",
        spike.recovery_s
    );
    let collapsed = simulate(&params, Scenario::Slowdown { load: 1.0 }, Strategy::None).unwrap();
    assert_eq!(collapsed.recovery_s, None);
    assert!(collapsed.series.iter().all(|p| p.limit.is_none()));
    let sweep = simulate(&params, Scenario::Sweep { load: 1.0 }, Strategy::None).unwrap();
    assert!(sweep.series.is_empty() && sweep.recovery_s.is_none());
}

#[test]
fn bad_parameters_get_a_clear_error() {
    let cases: Vec<(LabParams, Scenario, &str)> = vec![
        (
            LabParams {
                workers: 0,
                ..brief()
            },
            Scenario::Sweep { load: 1.0 },
            "workers",
        ),
        (brief(), Scenario::Sweep { load: -1.0 }, "load"),
        (brief(), Scenario::Sweep { load: f64::NAN }, "load"),
        (brief(), Scenario::Spike { load: 0.0 }, "load"),
        (
            brief(),
            Scenario::Slowdown {
                load: f64::INFINITY,
            },
            "load",
        ),
        (
            LabParams {
                service_time: ServiceTime::LogNormal {
                    mean: Duration::from_millis(10),
                    sigma: f64::NAN,
                },
                ..brief()
            },
            Scenario::Sweep { load: 1.0 },
            "service_time.sigma",
        ),
        (
            LabParams {
                service_time: ServiceTime::Bimodal {
                    mean: Duration::from_millis(10),
                    slow_share: 1.5,
                    slow_factor: 10.0,
                },
                ..brief()
            },
            Scenario::Sweep { load: 1.0 },
            "service_time.slow_share",
        ),
        (
            LabParams {
                service_time: ServiceTime::Bimodal {
                    mean: Duration::from_millis(10),
                    slow_share: 0.1,
                    slow_factor: 0.5,
                },
                ..brief()
            },
            Scenario::Sweep { load: 1.0 },
            "service_time.slow_factor",
        ),
        (
            LabParams {
                service_time: ServiceTime::Exponential {
                    mean: Duration::ZERO,
                },
                ..brief()
            },
            Scenario::Sweep { load: 1.0 },
            "service_time.mean",
        ),
        (
            LabParams {
                client_timeout: Duration::ZERO,
                ..brief()
            },
            Scenario::Sweep { load: 1.0 },
            "client_timeout",
        ),
        (
            LabParams {
                retry: RetryPolicy::Backoff {
                    retries: 11,
                    backoff: Duration::from_millis(1),
                },
                ..brief()
            },
            Scenario::Sweep { load: 1.0 },
            "retry.retries",
        ),
    ];
    for (params, scenario, field) in cases {
        let err = simulate(&params, scenario, Strategy::None).unwrap_err();
        assert_eq!(err.field(), field, "{err}");
        assert!(err
            .to_string()
            .starts_with(&format!("lab parameter `{field}`: ")));
    }
    assert_eq!(run_lab(&brief(), &[]).unwrap_err().field(), "strategies");
}

/// An adaptive limit with a queue: attempts that find the limit full wait for a place, and
/// each still ends exactly once (admitted once a place is handed to it, refused once it waits
/// the queue's timeout out, or timed out by its client while it waits). Near capacity, on a
/// small random service, the waits take the place of most refusals.
#[test]
fn an_adaptive_limit_s_queue_turns_refusals_near_capacity_into_brief_waits() {
    use spillway::adaptive::{AdaptiveQueue, QueueOrder};
    // Envoy's gradient alone, which refuses some attempts at 0.9x here (the in-flight floor
    // refuses none in this brief run), so that the queue has refusals to take the place of.
    let base = LabParams {
        workers: 4,
        envoy: spillway::adaptive::EnvoyGradientConfig {
            in_flight_floor: 0.0,
            ..Default::default()
        },
        ..brief()
    };
    let without = simulate(
        &base,
        Scenario::Sweep { load: 0.9 },
        Strategy::EnvoyGradient,
    )
    .unwrap();
    assert_conserved(&without);
    assert!(without.counts.refused > 0, "{:?}", without.counts);
    for order in [QueueOrder::Fifo, QueueOrder::Lifo, QueueOrder::Adaptive] {
        for timeout_ms in [1, 150, 400] {
            let params = LabParams {
                adaptive_queue: Some(AdaptiveQueue {
                    capacity: 1000,
                    order,
                    timeout: Duration::from_millis(timeout_ms),
                }),
                ..base.clone()
            };
            for load in [0.9, 5.0] {
                let run =
                    simulate(&params, Scenario::Sweep { load }, Strategy::EnvoyGradient).unwrap();
                assert_conserved(&run);
                // A wait longer than the client's: the client gives up first.
                if timeout_ms > 200 && load > 1.0 {
                    assert!(run.counts.timed_out > 0, "{order:?}: {:?}", run.counts);
                }
                if load < 1.0 && timeout_ms == 150 {
                    assert!(
                        run.counts.refused * 3 < without.counts.refused,
                        "{order:?}: {:?} against {:?}",
                        run.counts,
                        without.counts
                    );
                }
            }
        }
    }
}
