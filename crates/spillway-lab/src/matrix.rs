//! The shape matrix: each strategy against services of 1 to 32 workers with three
//! service-time shapes, at 3x, 5x and 10x capacity, through a slowdown, and for minutes below
//! capacity from a cold start.

use crate::lab::EVENT_BASE_LOAD;
use crate::params::{LabError, LabParams, ServiceTime};
use crate::record::RunResult;
use crate::scenario::Scenario;
use crate::strategy::Strategy;
use serde::Serialize;
use std::fmt::Write as _;
use std::time::Duration;

/// The services' workers.
pub const MATRIX_WORKERS: [u32; 5] = [1, 2, 4, 8, 32];

/// The overloads, as multiples of capacity. The target is checked at the first two.
pub const MATRIX_LOADS: [f64; 3] = [3.0, 5.0, 10.0];

/// The target's smallest goodput at 3x and 5x, as a share of capacity.
pub const TARGET_GOODPUT: f64 = 0.95;
/// The target's largest p99 at 3x and 5x, as a multiple of the unloaded p99.
pub const TARGET_P99_RATIO: f64 = 2.0;
/// The target's longest recovery after the slowdown, in seconds.
pub const TARGET_RECOVERY_S: f64 = 2.0;

/// The three service-time shapes with mean `mean`: exponential, log-normal with sigma 1, and
/// bimodal (10% of the requests 10 times as slow as the rest).
///
/// # Examples
///
/// ```
/// use spillway_lab::matrix::matrix_shapes;
/// use std::time::Duration;
///
/// let shapes = matrix_shapes(Duration::from_millis(10));
/// assert!(shapes.iter().all(|shape| shape.mean() == Duration::from_millis(10)));
/// ```
pub fn matrix_shapes(mean: Duration) -> [ServiceTime; 3] {
    [
        ServiceTime::Exponential { mean },
        ServiceTime::LogNormal { mean, sigma: 1.0 },
        ServiceTime::Bimodal {
            mean,
            slow_share: 0.1,
            slow_factor: 10.0,
        },
    ]
}

/// The short name of a shape in the matrix's tables.
pub fn shape_name(shape: &ServiceTime) -> &'static str {
    match shape {
        ServiceTime::Fixed { .. } => "fixed",
        ServiceTime::Exponential { .. } => "exponential",
        ServiceTime::LogNormal { .. } => "lognormal",
        ServiceTime::Bimodal { .. } => "bimodal",
    }
}

/// What one strategy did on one service shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// The strategy's name.
    pub strategy: &'static str,
    /// The service's workers.
    pub workers: u32,
    /// The service-time shape's name ([`shape_name`]).
    pub shape: &'static str,
    /// The unprotected service's p99 at 0.5x, in ms: what "unloaded" means.
    pub unloaded_p99_ms: f64,
    /// Goodput at each of [`MATRIX_LOADS`], as a share of capacity.
    pub goodput: [f64; 3],
    /// p99 at each of [`MATRIX_LOADS`], as a multiple of the unloaded p99.
    pub p99_ratio: [f64; 3],
    /// Seconds from the slowdown's end to the first second at 90% of capacity (`None`: not
    /// within 20 s).
    pub recovery_s: Option<f64>,
    /// Attempts the strategy refused in the long run below capacity.
    pub long_run_refused: u64,
    /// Of those, the ones refused in its first 10 s (the start-up).
    pub long_run_refused_at_start: u64,
    /// Attempts made in the long run.
    pub long_run_attempts: u64,
}

impl Cell {
    /// Whether goodput and p99 meet the target at 3x and 5x.
    pub fn meets_overload(&self) -> bool {
        (0..2).all(|i| self.goodput[i] >= TARGET_GOODPUT && self.p99_ratio[i] <= TARGET_P99_RATIO)
    }

    /// Whether the slowdown's recovery meets the target.
    pub fn meets_recovery(&self) -> bool {
        self.recovery_s.is_some_and(|s| s <= TARGET_RECOVERY_S)
    }

    /// Whether the long run below capacity refused nothing.
    pub fn meets_long_run(&self) -> bool {
        self.long_run_refused == 0
    }

    /// Whether the cell meets every target.
    pub fn meets(&self) -> bool {
        self.meets_overload() && self.meets_recovery() && self.meets_long_run()
    }

    fn from_runs(
        strategy: Strategy,
        shape: &'static str,
        params: &LabParams,
        unloaded: &RunResult,
        overloads: &[RunResult],
        slowdown: &RunResult,
        long_run: &RunResult,
    ) -> Self {
        let unloaded_p99_ms = unloaded.p99_ms;
        let mut goodput = [0.0; 3];
        let mut p99_ratio = [0.0; 3];
        for (i, run) in overloads.iter().enumerate() {
            goodput[i] = run.goodput;
            p99_ratio[i] = run.p99_ms / unloaded_p99_ms.max(f64::MIN_POSITIVE);
        }
        Self {
            strategy: strategy.name(),
            workers: params.workers,
            shape,
            unloaded_p99_ms,
            goodput,
            p99_ratio,
            recovery_s: slowdown.recovery_s,
            long_run_refused: long_run.counts.refused,
            long_run_refused_at_start: long_run.refused_by_10s.first().copied().unwrap_or(0),
            long_run_attempts: long_run.counts.attempts,
        }
    }
}

/// Runs every strategy in `strategies` on every shape of the matrix: [`MATRIX_WORKERS`] x
/// [`matrix_shapes`] with `base`'s mean service time, the rest of `base` (clients, seed, run
/// lengths) as given. Cells come strategy by strategy, then by workers, then by shape.
///
/// # Errors
///
/// A [`LabError`] if a parameter cannot be simulated, or if `strategies` is empty.
///
/// # Examples
///
/// ```no_run
/// use spillway_lab::matrix::run_matrix;
/// use spillway_lab::{LabParams, Strategy};
///
/// let cells = run_matrix(&LabParams::default().quick(), &[Strategy::EnvoyGradient])?;
/// assert_eq!(cells.len(), 15);
/// # Ok::<(), spillway_lab::LabError>(())
/// ```
pub fn run_matrix(base: &LabParams, strategies: &[Strategy]) -> Result<Vec<Cell>, LabError> {
    base.validate()?;
    if strategies.is_empty() {
        return Err(LabError::new("strategies", "name at least one strategy"));
    }
    let mut cells = Vec::new();
    let mut unloaded = Vec::new();
    let shapes = matrix_shapes(base.service_time.mean());
    for &workers in &MATRIX_WORKERS {
        for shape in &shapes {
            let params = LabParams {
                workers,
                service_time: *shape,
                ..base.clone()
            };
            let run = crate::simulate(&params, Scenario::Sweep { load: 0.5 }, Strategy::None)?;
            unloaded.push((params, shape_name(shape), run));
        }
    }
    for &strategy in strategies {
        for (params, shape, unloaded_run) in &unloaded {
            let overloads = MATRIX_LOADS
                .iter()
                .map(|&load| crate::simulate(params, Scenario::Sweep { load }, strategy))
                .collect::<Result<Vec<_>, _>>()?;
            let slowdown = crate::simulate(
                params,
                Scenario::Slowdown {
                    load: EVENT_BASE_LOAD,
                },
                strategy,
            )?;
            let long_run = crate::simulate(params, Scenario::LongRun, strategy)?;
            cells.push(Cell::from_runs(
                strategy,
                shape,
                params,
                unloaded_run,
                &overloads,
                &slowdown,
                &long_run,
            ));
        }
    }
    Ok(cells)
}

/// The cells as Markdown: a count of the cells that meet each target per strategy, then one
/// table per strategy, a row per worker count and a column per shape.
pub fn matrix_markdown(cells: &[Cell]) -> String {
    let mut strategies: Vec<&'static str> = Vec::new();
    for cell in cells {
        if !strategies.contains(&cell.strategy) {
            strategies.push(cell.strategy);
        }
    }
    let mut out = String::from(
        "| strategy | overload (3x, 5x) | recovery | long run: nothing refused | every target |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for strategy in &strategies {
        let mine: Vec<&Cell> = cells.iter().filter(|c| c.strategy == *strategy).collect();
        let count = |meets: fn(&Cell) -> bool| mine.iter().filter(|c| meets(c)).count();
        let _ = writeln!(
            out,
            "| {strategy} | {} of {n} | {} of {n} | {} of {n} | {} of {n} |",
            count(Cell::meets_overload),
            count(Cell::meets_recovery),
            count(Cell::meets_long_run),
            count(Cell::meets),
            n = mine.len()
        );
    }
    for strategy in &strategies {
        let _ = writeln!(out, "\n### {strategy}\n");
        let mine: Vec<&Cell> = cells.iter().filter(|c| c.strategy == *strategy).collect();
        let mut shapes: Vec<&'static str> = Vec::new();
        for cell in &mine {
            if !shapes.contains(&cell.shape) {
                shapes.push(cell.shape);
            }
        }
        let _ = writeln!(out, "| workers | {} |", shapes.join(" | "));
        let _ = writeln!(out, "|---:|{}", "---|".repeat(shapes.len()));
        let mut workers: Vec<u32> = mine.iter().map(|c| c.workers).collect();
        workers.dedup();
        for w in workers {
            let row: Vec<String> = shapes
                .iter()
                .map(|shape| {
                    mine.iter()
                        .find(|c| c.workers == w && c.shape == *shape)
                        .map_or_else(String::new, |c| cell_text(c))
                })
                .collect();
            let _ = writeln!(out, "| {w} | {} |", row.join(" | "));
        }
    }
    out
}

/// One cell: whether it meets every target (and which it misses), goodput and p99 at 3x, 5x and
/// 10x, the recovery, and the long run's refusals.
fn cell_text(cell: &Cell) -> String {
    let mut misses = Vec::new();
    if !cell.meets_overload() {
        misses.push("overload");
    }
    if !cell.meets_recovery() {
        misses.push("recovery");
    }
    if !cell.meets_long_run() {
        misses.push("long run");
    }
    let verdict = if misses.is_empty() {
        "**yes**".to_string()
    } else {
        format!("no ({})", misses.join(", "))
    };
    let recovery = cell
        .recovery_s
        .map_or_else(|| "never".to_string(), |s| format!("{s:.1} s"));
    format!(
        "{verdict}<br>{:.2} {:.2} {:.2}<br>{:.1}x {:.1}x {:.1}x<br>{recovery}<br>{} + {} refused",
        cell.goodput[0],
        cell.goodput[1],
        cell.goodput[2],
        cell.p99_ratio[0],
        cell.p99_ratio[1],
        cell.p99_ratio[2],
        cell.long_run_refused_at_start,
        cell.long_run_refused
            .saturating_sub(cell.long_run_refused_at_start)
    )
}
