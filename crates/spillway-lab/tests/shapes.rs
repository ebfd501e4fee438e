//! The lab's service shapes and the long run: the matrix's shapes, the long run's loads, every
//! attempt ending once on every shape, the same bytes for the same seed, and the behaviours
//! issue-sized fixes rest on (BBR's recovery on a small random service, Envoy's controller
//! refusing nothing below capacity after its start).

use spillway::adaptive::{AdaptiveQueue, BufferScaling, EnvoyGradientConfig, QueueOrder};
use spillway_lab::matrix::{
    beyond_spread, compared_markdown, disagreements, matrix_markdown, matrix_shapes, run_matrix,
    shape_name, Cell, LongRunRefusals, MATRIX_WORKERS,
};
use spillway_lab::{
    simulate, simulate_traced, LabParams, RetryPolicy, Scenario, ServiceTime, Strategy,
    LONG_RUN_LOADS, LONG_RUN_STEP,
};
use std::time::Duration;
use support::assert_conserved;

mod support;

const MEAN: Duration = Duration::from_millis(10);

/// Envoy's own controller: its fixed 100 ms windows and its gradient alone (no in-flight
/// floor), with an open start at 50.
fn envoy_s_own() -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        start_limit: 50,
        window_min_rtts: 0.0,
        in_flight_floor: 0.0,
        ..Default::default()
    }
}

/// spillway's defaults, with an open start at 50.
fn open_defaults() -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        start_limit: 50,
        ..Default::default()
    }
}

fn shape(workers: u32, service_time: ServiceTime) -> LabParams {
    LabParams {
        workers,
        service_time,
        warm_up: Duration::from_secs(1),
        measure: Duration::from_secs(3),
        ..LabParams::default()
    }
}

#[test]
fn the_matrix_has_three_shapes_of_one_mean() {
    let shapes = matrix_shapes(MEAN);
    let names: Vec<&str> = shapes.iter().map(shape_name).collect();
    assert_eq!(names, ["exponential", "lognormal", "bimodal"]);
    assert!(shapes.iter().all(|s| s.mean() == MEAN));
    assert_eq!(MATRIX_WORKERS, [1, 2, 4, 8, 32]);
}

#[test]
fn the_long_run_holds_each_load_for_a_minute_from_a_cold_start() {
    let long = Scenario::LongRun;
    long.validate().unwrap();
    let params = shape(1, ServiceTime::Exponential { mean: MEAN });
    assert_eq!(long.measure_from(&params), Duration::ZERO);
    assert_eq!(long.arrivals_end(&params), LONG_RUN_STEP * 3);
    assert_eq!(long.load_at(Duration::ZERO), (0.5, Some(LONG_RUN_STEP)));
    assert_eq!(
        long.load_at(LONG_RUN_STEP + Duration::from_secs(1)),
        (0.7, Some(LONG_RUN_STEP * 2))
    );
    assert_eq!(long.load_at(LONG_RUN_STEP * 2), (0.9, None));
    assert_eq!(long.load_at(LONG_RUN_STEP * 5), (0.9, None));
    assert_eq!(long.slowdown_at(LONG_RUN_STEP), 1.0);
    assert_eq!(LONG_RUN_LOADS, [0.5, 0.7, 0.9]);

    // Unprotected, nothing is refused, and the requests are the loads' (1 worker of 10 ms: 100
    // a second at 1x), within five standard deviations of Poisson.
    let run = simulate(&params, long, Strategy::None).unwrap();
    assert_conserved(&run);
    assert_eq!(run.refused_by_10s, vec![0; 18]);
    let expected = (0.5 + 0.7 + 0.9) * 100.0 * 60.0;
    let requests = run.counts.requests as f64;
    assert!(
        (requests - expected).abs() < 5.0 * expected.sqrt(),
        "{requests} requests against {expected}"
    );
    assert!(!run.series.is_empty(), "the long run has a time series");
}

#[test]
fn every_attempt_ends_once_on_every_shape() {
    for service_time in matrix_shapes(MEAN) {
        for workers in [1, 4] {
            let params = shape(workers, service_time);
            for strategy in [Strategy::EnvoyGradient, Strategy::BbrProbe] {
                for scenario in [
                    Scenario::Sweep { load: 10.0 },
                    Scenario::Slowdown { load: 1.0 },
                ] {
                    assert_conserved(&simulate(&params, scenario, strategy).unwrap());
                }
            }
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_bytes_on_the_new_shapes() {
    let bimodal = matrix_shapes(MEAN)[2];
    let params = shape(2, bimodal);
    let json = |params: &LabParams| {
        let run = simulate(params, Scenario::LongRun, Strategy::EnvoyGradient).unwrap();
        serde_json::to_string(&run).unwrap()
    };
    assert_eq!(json(&params), json(&params));
    assert_ne!(json(&params), json(&LabParams { seed: 2, ..params }));
}

/// The case: BBR on 4 workers with random service times never came back after the
/// slowdown (limited rounds at the mean concurrency refused bursts, which lowered the rate and
/// the limit with it). Now it is back within 2 s, on each seed tried.
#[test]
fn bbr_recovers_after_a_slowdown_on_a_small_random_service() {
    for seed in 1..=3 {
        let params = LabParams {
            seed,
            ..shape(4, ServiceTime::Exponential { mean: MEAN })
        };
        let run = simulate(
            &params,
            Scenario::Slowdown { load: 1.0 },
            Strategy::BbrProbe,
        )
        .unwrap();
        assert!(
            run.recovery_s.is_some_and(|s| s <= 2.0),
            "seed {seed}: recovery {:?}",
            run.recovery_s
        );
    }
}

/// BBR's start, overloaded from its first round, queues in every round it measures, and the
/// limit it ends with stood at that queue until the RT was measured again 10 s later: on one
/// worker at 5x, a limit of 14 to 23 (17 on average at the whole seconds from 2 s to 10 s,
/// seed 1), about 20 services of queue, as long as the clients' timeout. Measured again as
/// the start ends, the limit stays well under it from the first seconds.
#[test]
fn bbr_s_start_leaves_no_queue_standing_on_one_worker() {
    for seed in 1..=3 {
        let params = LabParams {
            seed,
            workers: 1,
            service_time: ServiceTime::Exponential { mean: MEAN },
            ..LabParams::default()
        };
        let traced =
            simulate_traced(&params, Scenario::Sweep { load: 5.0 }, Strategy::BbrProbe).unwrap();
        let limits: Vec<f64> = traced
            .trace
            .iter()
            .filter(|point| (2.0..=10.0).contains(&point.t_s))
            .filter_map(|point| point.limit)
            .collect();
        assert!(limits.len() >= 80, "seed {seed}: {} points", limits.len());
        let mean = limits.iter().sum::<f64>() / limits.len() as f64;
        assert!(
            mean <= 12.0,
            "seed {seed}: mean limit {mean:.1} from 2 s to 10 s"
        );
    }
}

/// Below capacity, Envoy's controller measures its minRTT again without pinning the limit,
/// and its in-flight floor keeps the service's own bursts at 0.9x from shrinking the limit
/// under the next burst: on 32 workers, with each distribution, nothing is refused after the
/// start's pinned measurement, at 0.5x, 0.7x or 0.9x (Envoy's own schedule refused thousands
/// when it pinned at 60 s; its gradient alone refuses from 119 to 1,395 at 0.9x, seed 1).
#[test]
fn envoy_refuses_nothing_below_capacity_after_its_start() {
    let lognormal = ServiceTime::LogNormal {
        mean: MEAN,
        sigma: 1.0,
    };
    let bimodal = ServiceTime::Bimodal {
        mean: MEAN,
        slow_share: 0.1,
        slow_factor: 10.0,
    };
    for service_time in [ServiceTime::Exponential { mean: MEAN }, lognormal, bimodal] {
        let params = shape(32, service_time);
        let run = simulate(&params, Scenario::LongRun, Strategy::EnvoyGradient).unwrap();
        let by_10s = &run.refused_by_10s;
        assert!(by_10s[0] > 0, "the start pins: {service_time:?} {by_10s:?}");
        assert!(
            by_10s[1..].iter().all(|&refused| refused == 0),
            "{service_time:?}: {by_10s:?}"
        );
        let alone = LabParams {
            envoy: EnvoyGradientConfig {
                in_flight_floor: 0.0,
                ..Default::default()
            },
            ..params
        };
        let run = simulate(&alone, Scenario::LongRun, Strategy::EnvoyGradient).unwrap();
        let after: u64 = run.refused_by_10s[1..].iter().sum();
        assert!(after >= 119, "{service_time:?}: {:?}", run.refused_by_10s);
    }
}

/// With an open start (`start_limit = 50`), the long run's first 10 s refuse nothing where
/// Envoy's pinned start refuses: on 4, 8 and 32 workers (exponential, seed 1; `spillway lab
/// --matrix --strategies envoy_gradient --envoy-start-limit 50` has the whole matrix).
#[test]
fn an_open_start_refuses_nothing_where_envoy_s_start_pins() {
    for workers in [4, 8, 32] {
        let pinned = shape(workers, ServiceTime::Exponential { mean: MEAN });
        let open = LabParams {
            envoy: EnvoyGradientConfig {
                start_limit: 50,
                ..Default::default()
            },
            ..pinned.clone()
        };
        let start = |params: &LabParams| {
            let run = simulate(params, Scenario::LongRun, Strategy::EnvoyGradient).unwrap();
            assert_conserved(&run);
            run.refused_by_10s[0]
        };
        assert!(start(&pinned) > 0, "{workers} workers");
        assert_eq!(start(&open), 0, "{workers} workers");
    }
    let bad = LabParams {
        envoy: EnvoyGradientConfig {
            start_limit: 2,
            ..Default::default()
        },
        ..LabParams::default()
    };
    assert_eq!(bad.validate().unwrap_err().field(), "envoy_start_limit");
}

/// `buffer_scaling = "spread"` refuses fewer attempts below capacity on a 4-worker exponential
/// service, after the start (docs/config.md quotes, seed 1: none against 478 with the default
/// in-flight floor; with Envoy's gradient alone, `in_flight_floor = 0`, 4,452 against 8,049),
/// and changes nothing on a 4-worker service whose calls all take as long: its pinned
/// measurements meet no queue, and the long run's later measurements at 0.7x and 0.9x, among
/// calls that queue, leave the spread alone.
#[test]
fn a_spread_buffer_refuses_fewer_below_capacity_on_a_varied_service() {
    let refused = |params: &LabParams| {
        let run = simulate(params, Scenario::LongRun, Strategy::EnvoyGradient).unwrap();
        assert_conserved(&run);
        LongRunRefusals::of(&run)
    };
    let spread = |params: &LabParams| LabParams {
        envoy: EnvoyGradientConfig {
            buffer_scaling: BufferScaling::Spread,
            ..params.envoy
        },
        ..params.clone()
    };
    let gradient_alone = |params: LabParams| LabParams {
        envoy: EnvoyGradientConfig {
            in_flight_floor: 0.0,
            ..params.envoy
        },
        ..params
    };
    let varied = shape(4, ServiceTime::Exponential { mean: MEAN });
    assert_eq!(refused(&varied).after_start(), 478);
    assert_eq!(refused(&spread(&varied)).after_start(), 0);
    let varied = gradient_alone(varied);
    assert_eq!(refused(&varied).after_start(), 8049);
    assert_eq!(refused(&spread(&varied)).after_start(), 4452);
    for even in [
        shape(4, ServiceTime::Fixed { time: MEAN }),
        gradient_alone(shape(4, ServiceTime::Fixed { time: MEAN })),
    ] {
        let fixed_even = refused(&even);
        assert!(fixed_even.long_run_refused > 0, "{fixed_even:?}");
        assert_eq!(refused(&spread(&even)), fixed_even);
    }
}

/// A queue a little under the clients' timeout (190 ms against 200), in the adaptive order,
/// with an open start: what docs/config.md and docs/overload.md quote (seed 1). Unprotected, a
/// 4-worker log-normal service's clients time out 55,928 times in the long run (and retry);
/// Envoy's controller with the queue refuses 998 after its start and 91 time out. On the
/// 4-, 8- and 32-worker exponential services it refuses nothing and no client times out (on
/// 32, a scheduled minRTT measurement that pinned in the first window in which the limit bound
/// refused 1,292 in one episode, before it waited for a window that does not bind), with
/// Envoy's start too. With Envoy's gradient alone (`in_flight_floor = 0`), on the 4-worker
/// exponential service with a 150 ms queue and Envoy's start, the adaptive order refuses 374
/// in the long run, where serving the newest first from the start refuses three times as many
/// and serving in order 28 (queue.rs).
#[test]
fn a_queue_under_the_clients_timeout_turns_refusals_below_capacity_into_waits() {
    let queue = |timeout_ms, order| AdaptiveQueue {
        capacity: 1000,
        order,
        timeout: Duration::from_millis(timeout_ms),
    };
    let queued = |params: LabParams| LabParams {
        adaptive_queue: Some(queue(190, QueueOrder::Adaptive)),
        envoy: EnvoyGradientConfig {
            start_limit: 50,
            ..Default::default()
        },
        ..params
    };
    let long_run = |params: &LabParams, strategy| {
        let run = simulate(params, Scenario::LongRun, strategy).unwrap();
        assert_conserved(&run);
        LongRunRefusals::of(&run)
    };
    let lognormal = shape(
        4,
        ServiceTime::LogNormal {
            mean: MEAN,
            sigma: 1.0,
        },
    );
    let none = long_run(&lognormal, Strategy::None);
    assert_eq!(
        (none.long_run_refused, none.long_run_timed_out),
        (0, 55_928)
    );
    let envoy = long_run(&queued(lognormal), Strategy::EnvoyGradient);
    assert_eq!(
        (
            envoy.long_run_refused_at_start,
            envoy.after_start(),
            envoy.long_run_timed_out
        ),
        (0, 998, 91)
    );
    let eight = long_run(
        &queued(shape(8, ServiceTime::Exponential { mean: MEAN })),
        Strategy::EnvoyGradient,
    );
    assert_eq!((eight.long_run_refused, eight.long_run_timed_out), (0, 0));
    let thirty_two = long_run(
        &queued(shape(32, ServiceTime::Exponential { mean: MEAN })),
        Strategy::EnvoyGradient,
    );
    assert_eq!(
        (thirty_two.long_run_refused, thirty_two.long_run_timed_out),
        (0, 0)
    );
    let four = shape(4, ServiceTime::Exponential { mean: MEAN });
    let open = long_run(&queued(four.clone()), Strategy::EnvoyGradient);
    assert_eq!((open.long_run_refused, open.long_run_timed_out), (0, 0));
    let envoy_start = LabParams {
        envoy: EnvoyGradientConfig {
            start_limit: 0,
            ..Default::default()
        },
        ..queued(four.clone())
    };
    assert_eq!(
        long_run(&envoy_start, Strategy::EnvoyGradient).long_run_refused,
        0
    );
    // The orders compared where the limit leaves the queue something to do.
    let with_order = |order| LabParams {
        adaptive_queue: Some(queue(150, order)),
        envoy: EnvoyGradientConfig {
            in_flight_floor: 0.0,
            ..Default::default()
        },
        ..four.clone()
    };
    let adaptive = long_run(&with_order(QueueOrder::Adaptive), Strategy::EnvoyGradient);
    assert_eq!(adaptive.long_run_refused, 374);
    // In order throughout, 28: FIFO is best below capacity; under an overload it serves
    // requests whose clients have left.
    let in_order = long_run(&with_order(QueueOrder::Fifo), Strategy::EnvoyGradient);
    assert_eq!(in_order.long_run_refused, 28);
    let newest_first = long_run(&with_order(QueueOrder::Lifo), Strategy::EnvoyGradient);
    assert!(
        newest_first.long_run_refused > 3 * adaptive.long_run_refused,
        "{newest_first:?}"
    );
}

/// On one worker at capacity (the slowdown scenario's 1x), a request can wait most of a 190 ms
/// queue and then spend the rest of its clients' 200 ms in the service: with that queue and
/// Envoy's own controller (100 ms windows, no in-flight floor) the controller never gets back
/// to 0.9 of capacity after the slowdown; with spillway's defaults, or a 100 ms queue, it
/// does at once (seed 1; docs/overload.md and docs/config.md quote these).
#[test]
fn on_one_worker_a_queue_as_long_as_the_clients_patience_keeps_envoy_s_windows_from_recovering() {
    let recovery = |timeout_ms, envoy| {
        let params = LabParams {
            adaptive_queue: Some(AdaptiveQueue {
                capacity: 1000,
                order: QueueOrder::Adaptive,
                timeout: Duration::from_millis(timeout_ms),
            }),
            envoy,
            ..shape(1, ServiceTime::Exponential { mean: MEAN })
        };
        let slowdown = Scenario::Slowdown {
            load: spillway_lab::EVENT_BASE_LOAD,
        };
        let run = simulate(&params, slowdown, Strategy::EnvoyGradient).unwrap();
        assert_conserved(&run);
        run.recovery_s
    };
    assert_eq!(recovery(190, envoy_s_own()), None);
    for timeout_ms in [190, 100] {
        let recovered = recovery(timeout_ms, open_defaults());
        assert!(recovered.is_some_and(|s| s <= 0.5), "{recovered:?}");
    }
    let recovered = recovery(100, envoy_s_own());
    assert!(recovered.is_some_and(|s| s <= 0.5), "{recovered:?}");
}

/// On a slow small service (8 workers of 80 ms exponential times: 100 requests a second, the
/// clients' timeout and back-off 8 times the matrix's), Envoy's fixed 100 ms sample window
/// (`window_min_rtts = 0`) holds about one round trip of calls: the limit doubles in a window
/// before the latency of the last doubling shows, swings between fewer than the workers and
/// several times them (3 to 62 in the spike's 5x), and the overload target is missed in the
/// 8 s sweeps, where the same service 8 times as fast holds its limit near twice the workers
/// (13 to 20 with Envoy's own controller, 13 to 19 with spillway's defaults) and meets it.
/// Envoy's own controller here is its 100 ms windows and its gradient alone (`window_min_rtts =
/// 0`, `in_flight_floor = 0`). A window of 12 minRTTs (the default) holds as many round trips
/// on the slow service as 100 ms does on the fast one: goodput 0.97 and 0.96 of capacity, p99
/// about twice the unloaded p99, at the target's edge; its limit ranges from 17 to 117 in the
/// spike, over windows about 7 times as long (the in-flight floor holding it up in windows
/// that do not bind) (seed 1; docs/config.md
/// quotes these, the sweeps within 0.03 of goodput and 0.2 of the p99 ratio). A fixed limit
/// of twice the workers does better than Envoy's window, if not to the target.
#[test]
fn envoy_s_fixed_window_swings_on_a_slow_small_service_and_a_window_of_min_rtts_holds_it() {
    let service = |mean_ms: u64, envoy: EnvoyGradientConfig| {
        let stretch = mean_ms as f64 / 10.0;
        LabParams {
            workers: 8,
            service_time: ServiceTime::Exponential {
                mean: Duration::from_millis(mean_ms),
            },
            client_timeout: Duration::from_millis(200).mul_f64(stretch),
            retry: RetryPolicy::Backoff {
                retries: 2,
                backoff: Duration::from_millis(50).mul_f64(stretch),
            },
            envoy,
            ..LabParams::default()
        }
    };
    let sweep_with = |strategy: Strategy, params: LabParams, load: f64| {
        let params = params.quick();
        let unloaded = simulate(&params, Scenario::Sweep { load: 0.5 }, Strategy::None).unwrap();
        let run = simulate(&params, Scenario::Sweep { load }, strategy).unwrap();
        assert_conserved(&run);
        (run.goodput, run.p99_ms / unloaded.p99_ms)
    };
    let sweep = |params, load| sweep_with(Strategy::EnvoyGradient, params, load);
    // The lowest and highest limit in the spike's 5x (10 s to 20 s), from 12 s on.
    let swing = |params: &LabParams| {
        let spike = Scenario::Spike { load: 1.0 };
        let run = simulate(params, spike, Strategy::EnvoyGradient).unwrap();
        let limits = run
            .series
            .iter()
            .filter(|point| (12.0..20.0).contains(&point.t_s))
            .filter_map(|point| point.limit);
        limits.fold((f64::INFINITY, 0.0_f64), |(low, high), limit| {
            (low.min(limit), high.max(limit))
        })
    };
    let near = |(goodput, p99): (f64, f64), expected: (f64, f64)| {
        assert!(
            (goodput - expected.0).abs() <= 0.03 && (p99 - expected.1).abs() <= 0.2,
            "goodput {goodput:.3}, p99 {p99:.2}x; expected about {expected:?}"
        );
    };
    let envoy_s = service(80, envoy_s_own());
    near(sweep(envoy_s.clone(), 3.0), (0.80, 2.3));
    near(sweep(envoy_s.clone(), 5.0), (0.77, 2.4));
    assert_eq!(swing(&envoy_s), (3.0, 62.0));
    // The fast service, with either window.
    for (envoy, swings) in [
        (envoy_s_own(), (13.0, 20.0)),
        (open_defaults(), (13.0, 19.0)),
    ] {
        let fast = service(10, envoy);
        for load in [3.0, 5.0] {
            let (goodput, p99) = sweep(fast.clone(), load);
            assert!(goodput >= 0.95 && p99 <= 2.0, "{load}x: {goodput} {p99}");
        }
        assert_eq!(swing(&fast), swings);
    }
    // The default window on the slow service.
    let default = service(80, open_defaults());
    near(sweep(default.clone(), 3.0), (0.97, 2.0));
    near(sweep(default.clone(), 5.0), (0.96, 2.0));
    assert_eq!(swing(&default), (17.0, 117.0));
    // A fixed limit of twice the workers does better than Envoy's window, if not quite the
    // target.
    let fixed = sweep_with(Strategy::StaticConcurrency, envoy_s.clone(), 3.0);
    near(fixed, (0.92, 1.6));
    assert!(fixed.0 < spillway_lab::matrix::TARGET_GOODPUT);
    near(
        sweep_with(Strategy::StaticConcurrency, envoy_s, 5.0),
        (0.96, 1.6),
    );
}

/// The shape matrix in slower time: every service 8 times as slow (80 ms means, the clients'
/// timeout and back-off 8 times the matrix's), with the sweeps 8 times as long too (16 s of
/// warm-up and 64 s measured). Envoy's own controller (fixed 100 ms windows, its gradient
/// alone) meets the overload target on 6 of the 15 shapes (with the matrix's own 8 s sweeps,
/// on 1), where a fixed limit of twice the workers meets it on 14, and recovers on 12. With
/// spillway's defaults (windows of 12 minRTTs, the in-flight floor) it meets it on 11 (4 with
/// the short sweeps), and recovers on 5, where the 10 ms matrix with the same start meets it
/// on 13. Seed 1, exactly, as docs/config.md and docs/overload.md quote.
#[test]
fn the_matrix_in_slower_time_meets_the_overload_target_with_windows_of_min_rtts() {
    let slow = |envoy| LabParams {
        service_time: ServiceTime::Exponential {
            mean: Duration::from_millis(80),
        },
        client_timeout: Duration::from_millis(1600),
        retry: RetryPolicy::Backoff {
            retries: 2,
            backoff: Duration::from_millis(400),
        },
        envoy,
        ..LabParams::default()
    };
    let stretched = |params: LabParams| LabParams {
        warm_up: Duration::from_secs(16),
        measure: Duration::from_secs(64),
        ..params
    };
    // The shapes that meet the overload target, and those back at 90% of capacity within the
    // target's 2 s of the slowdown (25 round trips of these services, 200 of the 10 ms ones).
    let met = |params: &LabParams, strategy| {
        let cells = run_matrix(params, &[strategy]).unwrap();
        assert_eq!(cells.len(), 15);
        let count = |meets: fn(&spillway_lab::matrix::Cell) -> bool| {
            cells.iter().filter(|cell| meets(cell)).count()
        };
        (
            count(|cell| cell.meets_overload()),
            count(|cell| cell.meets_recovery()),
        )
    };
    let overload = |params: &LabParams, strategy| met(params, strategy).0;
    let envoy_s = slow(envoy_s_own());
    assert_eq!(
        overload(&envoy_s.clone().quick(), Strategy::EnvoyGradient),
        1
    );
    let (envoy_s_overload, envoy_s_recovery) =
        met(&stretched(envoy_s.clone()), Strategy::EnvoyGradient);
    assert_eq!((envoy_s_overload, envoy_s_recovery), (6, 12));
    assert_eq!(
        overload(&stretched(envoy_s), Strategy::StaticConcurrency),
        14
    );
    let default = slow(open_defaults());
    assert_eq!(
        overload(&default.clone().quick(), Strategy::EnvoyGradient),
        4
    );
    let (default_overload, default_recovery) = met(&stretched(default), Strategy::EnvoyGradient);
    assert_eq!((default_overload, default_recovery), (11, 5));
    // The 10 ms matrix, with the same start.
    let fast = LabParams {
        envoy: open_defaults(),
        ..LabParams::default()
    };
    assert_eq!(overload(&fast.quick(), Strategy::EnvoyGradient), 13);
}

#[test]
fn a_cell_meets_the_target_only_on_every_count() {
    let good = Cell {
        strategy: "envoy_gradient",
        workers: 4,
        shape: "exponential",
        capacity: 400.0,
        unloaded_p99_ms: 50.0,
        goodput: [0.99, 0.97, 0.9],
        p99_ratio: [1.1, 1.9, 3.0],
        client_timeout_ms: 200.0,
        recovery_s: Some(0.2),
        long_run: Some(LongRunRefusals {
            long_run_refused: 0,
            long_run_refused_at_start: 0,
            long_run_attempts: 12_000,
            long_run_timed_out: 0,
        }),
    };
    assert!(good.meets());
    let slow = Cell {
        workers: 8,
        recovery_s: None,
        ..good.clone()
    };
    let refusing = Cell {
        workers: 2,
        long_run: Some(LongRunRefusals {
            long_run_refused: 3,
            long_run_refused_at_start: 2,
            long_run_attempts: 12_000,
            long_run_timed_out: 5,
        }),
        ..good.clone()
    };
    let queued = Cell {
        workers: 1,
        p99_ratio: [1.1, 2.1, 1.0],
        ..good.clone()
    };
    assert!(!slow.meets() && !slow.meets_recovery() && slow.meets_overload());
    assert!(!refusing.meets() && !refusing.meets_long_run());
    assert!(!queued.meets() && !queued.meets_overload());
    let text = matrix_markdown(&[good, slow, refusing, queued]);
    assert!(
        text.contains("| envoy_gradient | 3 of 4 | 3 of 4 | 3 of 4 | 1 of 4 |"),
        "{text}"
    );
    assert!(text.contains("no (recovery)"), "{text}");
    // The clients that gave up waiting are shown where there are any.
    assert!(text.contains("2 + 1 refused, 5 timed out"), "{text}");
    assert!(text.contains("0 + 0 refused |"), "{text}");
}

#[test]
fn a_matrix_needs_a_strategy_and_good_parameters() {
    let params = LabParams::default().quick();
    assert_eq!(run_matrix(&params, &[]).unwrap_err().field(), "strategies");
    let bad = LabParams {
        client_timeout: Duration::ZERO,
        ..params
    };
    assert_eq!(
        run_matrix(&bad, &[Strategy::EnvoyGradient])
            .unwrap_err()
            .field(),
        "client_timeout"
    );
}

/// The loopback matrix's table: no long-run column when no cell ran it, each cell's capacity,
/// and each cell beside its simulated twin where they disagree.
#[test]
fn a_compared_matrix_shows_where_the_simulation_disagrees() {
    let twin = Cell {
        strategy: "gradient2",
        workers: 2,
        shape: "bimodal",
        capacity: 190.0,
        unloaded_p99_ms: 60.0,
        goodput: [0.97, 0.97, 0.95],
        p99_ratio: [1.4, 1.5, 1.6],
        client_timeout_ms: 200.0,
        recovery_s: Some(0.3),
        long_run: None,
    };
    let agreeing = Cell {
        goodput: [0.95, 0.99, 0.91],
        p99_ratio: [1.8, 1.1, 2.0],
        ..twin.clone()
    };
    let differing = Cell {
        workers: 4,
        goodput: [0.90, 0.97, 0.95],
        recovery_s: None,
        ..twin.clone()
    };
    let lonely = Cell {
        workers: 8,
        ..twin.clone()
    };
    let twin4 = Cell {
        workers: 4,
        ..twin.clone()
    };
    let text = compared_markdown(&[agreeing, differing, lonely], &[twin, twin4], &[]);
    assert!(
        text.starts_with(
            "| strategy | overload (3x, 5x) | recovery | every target | agrees with the simulation |\n\
             |---|---:|---:|---:|---:|\n\
             | gradient2 | 2 of 3 | 2 of 3 | 2 of 3 | 1 of 3 |\n"
        ),
        "{text}"
    );
    assert!(text.contains("<br>190/s<br>as simulated |"), "{text}");
    assert!(
        text.contains(
            "<br>**differs**: goodput 3x 0.90 (simulated 0.97); recovery never (simulated 0.3 s)"
        ),
        "{text}"
    );
    assert!(text.contains("<br>no simulated twin"), "{text}");
    assert!(!text.contains("refused"), "no long run: {text}");
    assert!(!text.contains("spread"), "no other seeds: {text}");
}

/// With twins on other seeds, a cell that differs from its own seed's twin says whether it
/// lies beyond the spread of all its twins (more than the tolerance outside their range), and
/// the summary counts the cells within it, of those with twins on both.
#[test]
fn a_compared_matrix_tells_a_disagreement_from_the_seeds_spread() {
    let twin = Cell {
        strategy: "envoy_gradient",
        workers: 1,
        shape: "exponential",
        capacity: 180.0,
        unloaded_p99_ms: 60.0,
        goodput: [0.99, 1.00, 0.99],
        p99_ratio: [1.4, 1.5, 1.6],
        client_timeout_ms: 200.0,
        recovery_s: Some(0.3),
        long_run: None,
    };
    // Another seed's twin: goodput 0.92 at 3x, p99 2.6x at 10x, no recovery.
    let other_seed = Cell {
        goodput: [0.92, 1.01, 0.98],
        p99_ratio: [1.5, 1.5, 2.6],
        recovery_s: None,
        ..twin.clone()
    };
    let on = |workers: u32, cell: &Cell| Cell {
        workers,
        ..cell.clone()
    };
    // Workers 1: as its own seed's twin.
    let agreeing = twin.clone();
    // Workers 2: goodput 0.88 at 3x, 0.11 from its own seed's twin and 0.04 below the other
    // seed's; never recovers, as the other seed's twin.
    let within = Cell {
        workers: 2,
        goodput: [0.88, 1.00, 0.99],
        recovery_s: None,
        ..twin.clone()
    };
    // Workers 4: p99 at 5x 3.0x, beyond 1.5x on both seeds by more than 0.5x; goodput at 5x
    // 0.90, 0.10 under 1.00 to 1.01.
    let beyond = Cell {
        workers: 4,
        goodput: [0.99, 0.90, 0.99],
        p99_ratio: [1.4, 3.0, 1.6],
        ..twin.clone()
    };
    // Workers 8: never recovers where both twins do (the other seed's recovers here).
    let no_recovery = Cell {
        workers: 8,
        recovery_s: None,
        ..twin.clone()
    };
    let recovering = Cell {
        workers: 8,
        recovery_s: Some(1.5),
        ..other_seed.clone()
    };
    // Workers 32: differs from its own seed's twin, with no twin on another seed.
    let alone = Cell {
        workers: 32,
        goodput: [0.80, 1.00, 0.99],
        ..twin.clone()
    };
    let text = compared_markdown(
        &[agreeing, within, beyond, no_recovery, alone],
        &[
            twin.clone(),
            on(2, &twin),
            on(4, &twin),
            on(8, &twin),
            on(32, &twin),
        ],
        &[
            other_seed.clone(),
            on(2, &other_seed),
            on(4, &other_seed),
            recovering,
        ],
    );
    // Overload: workers 1 and 8; recovery: 1, 4 and 32; agreeing: 1; within the spread: 1
    // and 2 (32 has no other seed's twin to be judged on).
    assert!(
        text.starts_with(
            "| strategy | overload (3x, 5x) | recovery | every target | agrees with the \
             simulation | within the seeds' spread |\n\
             |---|---:|---:|---:|---:|---:|\n\
             | envoy_gradient | 2 of 5 | 3 of 5 | 1 of 5 | 1 of 5 | 2 of 5 |\n"
        ),
        "{text}"
    );
    let row = |workers: u32| {
        let line = text
            .lines()
            .find(|line| line.starts_with(&format!("| {workers} |")))
            .unwrap();
        line.to_string()
    };
    assert!(row(1).ends_with("<br>180/s<br>as simulated |"), "{text}");
    assert!(
        row(2).ends_with(
            "<br>**differs**: goodput 3x 0.88 (simulated 0.99); recovery never (simulated \
             0.3 s)<br>within the seeds' spread |"
        ),
        "{text}"
    );
    assert!(
        row(4).ends_with(
            "<br>**differs**: goodput 5x 0.90 (simulated 1.00); p99 5x 3.0x (simulated 1.5x)\
             <br>**beyond the seeds**: goodput 5x 0.90 (simulated 1.00 to 1.01); p99 5x 3.0x \
             (simulated 1.5x) |"
        ),
        "{text}"
    );
    assert!(
        row(8).ends_with(
            "<br>**differs**: recovery never (simulated 0.3 s)<br>**beyond the seeds**: \
             recovery never (simulated 0.3 s, 1.5 s) |"
        ),
        "{text}"
    );
    assert!(
        row(32).ends_with("<br>**differs**: goodput 3x 0.80 (simulated 0.99) |"),
        "{text}"
    );
}

/// The in-flight floor (`in_flight_floor = 6`, the default) against Envoy's gradient alone
/// (`0`), in the shape matrix as `spillway lab --matrix --strategies envoy_gradient` runs it,
/// seed 1, exactly as docs/config.md and docs/overload.md quote: after the long run's first
/// 10 s, on the 14 shapes that meet the overload target, 22,022 attempts refused against
/// 51,984, none on the 32-worker services (119, 1,395 and 683 with the gradient alone), the
/// same overload and recovery targets met; more clients time out (3,673 against 1,482 over
/// the 15 shapes). In the simulated slowdown of the 8-worker service p99 rises from 137 to
/// 162 ms (exponential) and from 154 to 288 ms (log-normal), within a millisecond.
#[test]
fn the_in_flight_floor_refuses_below_capacity_about_as_the_best_fixed_limit() {
    let with_floor = |in_flight_floor| LabParams {
        envoy: EnvoyGradientConfig {
            in_flight_floor,
            ..Default::default()
        },
        ..LabParams::default()
    };
    let summary = |in_flight_floor| {
        let cells = run_matrix(
            &with_floor(in_flight_floor).quick(),
            &[Strategy::EnvoyGradient],
        )
        .unwrap();
        let long_run = |cell: &Cell| cell.long_run.unwrap();
        let overload = cells.iter().filter(|cell| cell.meets_overload());
        let refused: u64 = overload
            .clone()
            .map(|cell| long_run(cell).after_start())
            .sum();
        let thirty_two: Vec<u64> = cells
            .iter()
            .filter(|cell| cell.workers == 32)
            .map(|cell| long_run(cell).after_start())
            .collect();
        let timed_out: u64 = cells
            .iter()
            .map(|cell| long_run(cell).long_run_timed_out)
            .sum();
        let recovery = cells.iter().filter(|cell| cell.meets_recovery()).count();
        (overload.count(), recovery, refused, thirty_two, timed_out)
    };
    assert_eq!(summary(6.0), (14, 15, 22_022, vec![0, 0, 0], 3_673));
    assert_eq!(summary(0.0), (14, 15, 51_984, vec![119, 1_395, 683], 1_482));
    let slowdown_p99 = |in_flight_floor, service_time| {
        let params = LabParams {
            service_time,
            ..with_floor(in_flight_floor).quick()
        };
        let slowdown = Scenario::Slowdown {
            load: spillway_lab::EVENT_BASE_LOAD,
        };
        let run = simulate(&params, slowdown, Strategy::EnvoyGradient).unwrap();
        assert_conserved(&run);
        run.p99_ms
    };
    let exponential = ServiceTime::Exponential { mean: MEAN };
    let lognormal = ServiceTime::LogNormal {
        mean: MEAN,
        sigma: 1.0,
    };
    for (service_time, floored, alone) in [(exponential, 162.0, 137.0), (lognormal, 288.0, 154.0)] {
        let (with, without) = (
            slowdown_p99(6.0, service_time),
            slowdown_p99(0.0, service_time),
        );
        assert!(
            (with - floored).abs() < 1.0 && (without - alone).abs() < 1.0,
            "{service_time:?}: {with} and {without}"
        );
    }
}

/// A real client counts a latency only up to its timeout, the simulation past it: where both
/// p99s at a load are past the clients' timeout, the two agree, even over unloaded p99s far
/// apart; where only one is, they are compared as any two p99s; and a p99 past the timeout is
/// within the seeds' spread if any twin's is.
#[test]
fn p99s_past_the_clients_timeout_agree() {
    // The twin: unloaded p99 100 ms; 550, 180 and 580 ms at 3x, 5x and 10x (timeout 320 ms).
    let twin = Cell {
        strategy: "aimd",
        workers: 1,
        shape: "exponential",
        capacity: 90.0,
        unloaded_p99_ms: 100.0,
        goodput: [0.50, 0.48, 0.52],
        p99_ratio: [5.5, 1.8, 5.8],
        client_timeout_ms: 320.0,
        recovery_s: Some(0.1),
        long_run: None,
    };
    assert_eq!(
        [0, 1, 2].map(|i| twin.p99_past_timeout(i)),
        [true, false, true]
    );
    // The loopback cell: unloaded p99 64 ms, its clients giving up at 320 ms at 3x and 10x
    // (5x and 5.2x), 150 ms at 5x (2.3x).
    let real = Cell {
        unloaded_p99_ms: 64.0,
        p99_ratio: [5.0, 2.34375, 5.2],
        ..twin.clone()
    };
    assert_eq!(
        [0, 1, 2].map(|i| real.p99_past_timeout(i)),
        [true, false, true]
    );
    // 3x and 10x agree (both past); 5x is compared as usual and is 0.54x apart.
    assert_eq!(
        disagreements(&real, &twin),
        ["p99 5x 2.3x (simulated 1.8x)"]
    );
    // A p99 of exactly the timeout is at it, though the ratio times the unloaded p99 rounds.
    let at = Cell {
        unloaded_p99_ms: 3.0,
        p99_ratio: [320.0 / 3.0; 3],
        ..twin.clone()
    };
    assert!((0..3).all(|i| at.p99_past_timeout(i)));
    // Only the real p99 past the timeout: compared as two p99s, 5.0x against 2.0x.
    let under = Cell {
        p99_ratio: [2.0, 1.8, 2.0],
        ..twin.clone()
    };
    assert_eq!(
        disagreements(&real, &under),
        [
            "p99 3x 5.0x (simulated 2.0x)",
            "p99 5x 2.3x (simulated 1.8x)",
            "p99 10x 5.2x (simulated 2.0x)"
        ]
    );
    // With `twin` on another seed, the p99s past the timeout lie within the spread; 5x, 0.5x
    // past both twins' 1.8x, is beyond it.
    assert_eq!(
        beyond_spread(&real, &under, &[&twin]),
        ["p99 5x 2.3x (simulated 1.8x)"]
    );
    assert_eq!(beyond_spread(&real, &under, &[]).len(), 3);
    // No unloaded latency: a ratio of nothing is never past the timeout.
    let none = Cell {
        unloaded_p99_ms: 0.0,
        ..twin.clone()
    };
    assert!((0..3).all(|i| !none.p99_past_timeout(i)));
}
