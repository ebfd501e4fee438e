//! The fixed-limit floor: on each service shape, the largest fixed concurrency limit that meets
//! the overload target, chosen in hindsight, and what it refuses below capacity. No limit that
//! holds p99 down under overload can refuse nothing when the service's own queue, near
//! capacity, looks like the start of an overload; the floor measures how much a limit chosen
//! with the answer in hand still refuses, the yardstick for an adaptive limit's long run.

use crate::matrix::{
    grid_markdown, matrix_shapes, meets_overload_target, shape_name, Cell, LongRunRefusals,
    MATRIX_LOADS, MATRIX_WORKERS,
};
use crate::params::{LabError, LabParams};
use crate::record::RunResult;
use crate::scenario::Scenario;
use crate::strategy::Strategy;
use serde::Serialize;
use std::fmt::Write as _;

/// How far above the workers the search looks: limits up to this many times the workers, and
/// at least up to this many calls, every one up to this many, then steps of an eighth.
pub const FLOOR_SEARCH_FACTOR: u32 = 16;

/// Failures in a row, above the last limit that met the target, after which the search stops.
const FLOOR_MISSES_TO_STOP: u32 = 4;

/// The largest fixed concurrency limit that meets the overload target on one shape, and its
/// long run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FixedFloor {
    /// The service's workers.
    pub workers: u32,
    /// The service-time shape's name.
    pub shape: &'static str,
    /// The limit (`None`: no limit from 1 up meets the overload target on this shape).
    pub limit: Option<u32>,
    /// Goodput at 3x and 5x with that limit, as a share of capacity.
    pub goodput: [f64; 2],
    /// p99 at 3x and 5x with that limit, as a multiple of the unloaded p99.
    pub p99_ratio: [f64; 2],
    /// The long run's refusals with that limit (`None` with no limit).
    #[serde(flatten)]
    pub long_run: Option<LongRunRefusals>,
}

/// The limits the search tries on a service of `workers`, in increasing order: every limit up
/// to [`FLOOR_SEARCH_FACTOR`] (16), then steps of an eighth, up to 16 times the workers.
///
/// ```
/// use spillway_lab::fixed_floor::floor_candidates;
///
/// let limits = floor_candidates(4);
/// assert_eq!(&limits[..3], &[1, 2, 3]);
/// assert_eq!(*limits.last().unwrap(), 64);
/// assert!(limits.windows(2).all(|w| w[0] < w[1]));
/// ```
pub fn floor_candidates(workers: u32) -> Vec<u32> {
    let top = workers
        .saturating_mul(FLOOR_SEARCH_FACTOR)
        .max(FLOOR_SEARCH_FACTOR);
    let mut limits = Vec::new();
    let mut limit = 1u32;
    while limit < top {
        limits.push(limit);
        limit = if limit < FLOOR_SEARCH_FACTOR {
            limit + 1
        } else {
            limit.saturating_add(limit.div_ceil(8))
        };
    }
    limits.push(top);
    limits
}

/// Searches the [`floor_candidates`] of `params`' service (shape `shape`, its unprotected run
/// at 0.5x `unloaded`) from the smallest up for the largest fixed limit whose sweeps at 3x and
/// 5x meet the overload target, stopping after a few failures in a row above the last that
/// met it; then runs the long run with that limit.
///
/// # Errors
///
/// A [`LabError`] if a parameter cannot be simulated.
pub fn fixed_floor(
    params: &LabParams,
    shape: &'static str,
    unloaded: &RunResult,
) -> Result<FixedFloor, LabError> {
    let unloaded_p99 = unloaded.p99_ms.max(f64::MIN_POSITIVE);
    let mut best: Option<(u32, [f64; 2], [f64; 2])> = None;
    let mut misses = 0;
    for limit in floor_candidates(params.workers) {
        let with_limit = LabParams {
            static_concurrency_limit: Some(limit),
            ..params.clone()
        };
        let mut goodput = [0.0; 2];
        let mut p99_ratio = [0.0; 2];
        for (i, load) in MATRIX_LOADS[..2].iter().enumerate() {
            let run = crate::simulate(
                &with_limit,
                Scenario::Sweep { load: *load },
                Strategy::StaticConcurrency,
            )?;
            goodput[i] = run.goodput;
            p99_ratio[i] = run.p99_ms / unloaded_p99;
        }
        if meets_overload_target(goodput, p99_ratio) {
            best = Some((limit, goodput, p99_ratio));
            misses = 0;
        } else if best.is_some() {
            misses += 1;
            if misses == FLOOR_MISSES_TO_STOP {
                break;
            }
        }
    }
    let Some((limit, goodput, p99_ratio)) = best else {
        return Ok(FixedFloor {
            workers: params.workers,
            shape,
            limit: None,
            goodput: [0.0; 2],
            p99_ratio: [0.0; 2],
            long_run: None,
        });
    };
    let with_limit = LabParams {
        static_concurrency_limit: Some(limit),
        ..params.clone()
    };
    let run = crate::simulate(&with_limit, Scenario::LongRun, Strategy::StaticConcurrency)?;
    Ok(FixedFloor {
        workers: params.workers,
        shape,
        limit: Some(limit),
        goodput,
        p99_ratio,
        long_run: Some(LongRunRefusals::of(&run)),
    })
}

/// The floor on every shape of the matrix ([`MATRIX_WORKERS`] x [`matrix_shapes`] with
/// `base`'s mean service time), by workers, then by shape.
///
/// # Errors
///
/// A [`LabError`] if a parameter cannot be simulated.
pub fn run_floors(base: &LabParams) -> Result<Vec<FixedFloor>, LabError> {
    base.validate()?;
    let mut floors = Vec::new();
    for &workers in &MATRIX_WORKERS {
        for shape in &matrix_shapes(base.service_time.mean()) {
            let params = LabParams {
                workers,
                service_time: *shape,
                ..base.clone()
            };
            let unloaded = crate::simulate(&params, Scenario::Sweep { load: 0.5 }, Strategy::None)?;
            floors.push(fixed_floor(&params, shape_name(shape), &unloaded)?);
        }
    }
    Ok(floors)
}

/// The floors as a Markdown table: a row per worker count, a column per shape; each cell the
/// limit (and its multiple of the workers), goodput and p99 at 3x and 5x, and the long run's
/// refusals (in its first 10 s + after).
pub fn floors_markdown(floors: &[FixedFloor]) -> String {
    let grid: Vec<(u32, &'static str, String)> = floors
        .iter()
        .map(|f| (f.workers, f.shape, floor_text(f)))
        .collect();
    grid_markdown(&grid)
}

/// How each strategy's long run compares with the floor, as a Markdown table, on the shapes
/// where the strategy meets the overload target (elsewhere refusing less is no merit: the
/// queue grows instead) and a fixed limit does too: how many those are, on how many of them the
/// strategy refused no more than the floor after the long run's first 10 s, and its refusals
/// after the first 10 s summed over them against the floor's.
pub fn floor_comparison_markdown(cells: &[Cell], floors: &[FixedFloor]) -> String {
    let mut strategies: Vec<&'static str> = Vec::new();
    for cell in cells {
        if !strategies.contains(&cell.strategy) {
            strategies.push(cell.strategy);
        }
    }
    let mut out = String::from(
        "| strategy | meets the overload target | of those, refused no more than the floor (after 10 s) | refused after 10 s on those | the floor's on those |\n|---|---:|---:|---:|---:|\n",
    );
    for strategy in strategies {
        let (mut shapes, mut within, mut mine, mut floor_sum) = (0, 0, 0u64, 0u64);
        for cell in cells.iter().filter(|c| c.strategy == strategy) {
            let floor = floors
                .iter()
                .find(|f| f.workers == cell.workers && f.shape == cell.shape)
                .and_then(|f| f.long_run);
            let (Some(floor), Some(long_run)) = (floor, cell.long_run) else {
                continue;
            };
            if !cell.meets_overload() {
                continue;
            }
            shapes += 1;
            within += usize::from(long_run.after_start() <= floor.after_start());
            mine += long_run.after_start();
            floor_sum += floor.after_start();
        }
        let _ = writeln!(
            out,
            "| {strategy} | {shapes} | {within} of {shapes} | {mine} | {floor_sum} |"
        );
    }
    out
}

fn floor_text(floor: &FixedFloor) -> String {
    let (Some(limit), Some(long_run)) = (floor.limit, floor.long_run) else {
        return "no fixed limit meets the target".to_string();
    };
    format!(
        "{limit} ({:.1} x workers)<br>{:.2} {:.2}<br>{:.1}x {:.1}x<br>{}",
        f64::from(limit) / f64::from(floor.workers),
        floor.goodput[0],
        floor.goodput[1],
        floor.p99_ratio[0],
        floor.p99_ratio[1],
        long_run.text(),
    )
}
