//! The fixed-limit floor: the largest fixed concurrency limit that meets the overload target on
//! a shape, found by search, still refuses below capacity on a small service; the comparison
//! counts a strategy's long run against it.

use spillway_lab::fixed_floor::{
    fixed_floor, floor_candidates, floor_comparison_markdown, floors_markdown, FixedFloor,
};
use spillway_lab::matrix::{meets_overload_target, Cell, LongRunRefusals};
use spillway_lab::{simulate, LabParams, Scenario, ServiceTime, Strategy};
use std::time::Duration;

fn shape(workers: u32) -> LabParams {
    LabParams {
        workers,
        service_time: ServiceTime::Exponential {
            mean: Duration::from_millis(10),
        },
        warm_up: Duration::from_secs(1),
        measure: Duration::from_secs(3),
        ..LabParams::default()
    }
}

fn floor_of(params: &LabParams) -> FixedFloor {
    let unloaded = simulate(params, Scenario::Sweep { load: 0.5 }, Strategy::None).unwrap();
    fixed_floor(params, "exponential", &unloaded).unwrap()
}

/// On a 4-worker exponential service the floor is above the default static limit (twice the
/// workers), meets the overload target, refuses fewer attempts below capacity than the default
/// static limit, and still refuses some: a limit that holds p99 under overload cannot tell the
/// service's own queue at 0.9x from an overload's start.
#[test]
fn the_floor_meets_the_target_and_still_refuses_on_a_small_service() {
    let params = shape(4);
    let floor = floor_of(&params);
    let limit = floor.limit.expect("a fixed limit meets the target");
    assert!(limit > 8, "{floor:?}");
    assert!(
        meets_overload_target(floor.goodput, floor.p99_ratio),
        "{floor:?}"
    );
    // The next limit the search tried misses the target.
    let candidates = floor_candidates(4);
    let next = candidates[candidates.iter().position(|&l| l == limit).unwrap() + 1];
    let unloaded = simulate(&params, Scenario::Sweep { load: 0.5 }, Strategy::None).unwrap();
    let above = LabParams {
        static_concurrency_limit: Some(next),
        ..params.clone()
    };
    let misses = [3.0, 5.0].iter().any(|&load| {
        let run = simulate(
            &above,
            Scenario::Sweep { load },
            Strategy::StaticConcurrency,
        )
        .unwrap();
        run.goodput < 0.95 || run.p99_ms > 2.0 * unloaded.p99_ms
    });
    assert!(misses, "{next} meets the target too");
    let floor_run = floor.long_run.unwrap();
    let default = simulate(&params, Scenario::LongRun, Strategy::StaticConcurrency).unwrap();
    assert!(
        floor_run.long_run_refused < default.counts.refused,
        "{floor_run:?} against {}",
        default.counts.refused
    );
    assert!(floor_run.after_start() > 0, "{floor_run:?}");
    // The same seed finds the same floor.
    assert_eq!(floor_of(&params), floor);
}

/// The static limit the floor's runs use is the one the strategy enforces.
#[test]
fn a_static_limit_is_enforced_and_validated() {
    let params = LabParams {
        static_concurrency_limit: Some(3),
        ..shape(4)
    };
    assert_eq!(params.static_limit(), 3);
    // A slowdown at 1x: the service queues past 3 unless the limit holds it.
    let run = simulate(
        &params,
        Scenario::Slowdown { load: 1.0 },
        Strategy::StaticConcurrency,
    )
    .unwrap();
    assert!(run.counts.refused > 0);
    assert!(run
        .series
        .iter()
        .all(|p| p.in_flight <= 3 && p.limit == Some(3.0)));
    let bad = LabParams {
        static_concurrency_limit: Some(0),
        ..shape(4)
    };
    assert_eq!(
        bad.validate().unwrap_err().field(),
        "static_concurrency_limit"
    );
}

fn cell(strategy: &'static str, workers: u32, at_start: u64, refused: u64) -> Cell {
    Cell {
        strategy,
        workers,
        shape: "exponential",
        capacity: 400.0,
        unloaded_p99_ms: 50.0,
        goodput: [1.0; 3],
        p99_ratio: [1.0; 3],
        client_timeout_ms: 200.0,
        recovery_s: Some(0.0),
        long_run: Some(LongRunRefusals {
            long_run_refused: refused,
            long_run_refused_at_start: at_start,
            long_run_attempts: 10_000,
            long_run_timed_out: 0,
        }),
    }
}

fn floor(workers: u32, limit: Option<u32>, refused: u64) -> FixedFloor {
    FixedFloor {
        workers,
        shape: "exponential",
        limit,
        goodput: [0.99, 0.98],
        p99_ratio: [1.9, 1.8],
        long_run: limit.map(|_| LongRunRefusals {
            long_run_refused: refused,
            long_run_refused_at_start: 0,
            long_run_attempts: 10_000,
            long_run_timed_out: 0,
        }),
    }
}

/// The comparison counts refusals after the first 10 s (the start is the start limit's
/// business), on the shapes where the strategy meets the overload target and a fixed limit
/// does too.
#[test]
fn the_comparison_counts_refusals_after_the_start_against_the_floor() {
    let floors = [
        floor(2, Some(16), 100),
        floor(4, Some(24), 50),
        floor(8, None, 0),
        floor(32, Some(160), 0),
    ];
    let mut missed = cell("envoy_gradient", 32, 0, 0);
    missed.p99_ratio = [2.5, 1.0, 1.0];
    let cells = [
        cell("envoy_gradient", 2, 500, 580),
        cell("envoy_gradient", 4, 0, 51),
        cell("envoy_gradient", 8, 0, 7),
        missed,
    ];
    let table = floor_comparison_markdown(&cells, &floors);
    assert!(
        table.contains("| envoy_gradient | 2 | 1 of 2 | 131 | 150 |"),
        "{table}"
    );
    let grid = floors_markdown(&floors);
    assert!(
        grid.contains("| 2 | 16 (8.0 x workers)<br>0.99 0.98<br>1.9x 1.8x<br>0 + 100 refused |"),
        "{grid}"
    );
    assert!(
        grid.contains("| 8 | no fixed limit meets the target |"),
        "{grid}"
    );
}
