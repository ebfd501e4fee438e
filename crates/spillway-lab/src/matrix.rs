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

/// The long run's refusals in a [`Cell`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LongRunRefusals {
    /// Attempts the strategy refused in the long run below capacity.
    pub long_run_refused: u64,
    /// Of those, the ones refused in its first 10 s (the start-up).
    pub long_run_refused_at_start: u64,
    /// Attempts made in the long run.
    pub long_run_attempts: u64,
    /// Attempts whose client gave up waiting in the long run (admitted or queued, not
    /// answered within its timeout): what a service that queues too long costs instead.
    pub long_run_timed_out: u64,
}

impl LongRunRefusals {
    /// The refusals of a [`Scenario::LongRun`] run.
    pub fn of(run: &RunResult) -> Self {
        Self {
            long_run_refused: run.counts.refused,
            long_run_refused_at_start: run.refused_by_10s.first().copied().unwrap_or(0),
            long_run_attempts: run.counts.attempts,
            long_run_timed_out: run.counts.timed_out,
        }
    }

    /// Refused after the first 10 s.
    pub fn after_start(&self) -> u64 {
        self.long_run_refused
            .saturating_sub(self.long_run_refused_at_start)
    }

    /// As the tables show it: `first 10 s + after refused`, and `, N timed out` when clients
    /// gave up waiting.
    pub fn text(&self) -> String {
        let timed_out = match self.long_run_timed_out {
            0 => String::new(),
            n => format!(", {n} timed out"),
        };
        format!(
            "{} + {} refused{timed_out}",
            self.long_run_refused_at_start,
            self.after_start()
        )
    }
}

/// Whether goodput and p99 at 3x and 5x (the first two of [`MATRIX_LOADS`]) meet the target.
pub fn meets_overload_target(goodput: [f64; 2], p99_ratio: [f64; 2]) -> bool {
    (0..2).all(|i| goodput[i] >= TARGET_GOODPUT && p99_ratio[i] <= TARGET_P99_RATIO)
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
    /// The service's capacity in requests a second (the loopback lab's as measured).
    pub capacity: f64,
    /// The unprotected service's p99 at 0.5x, in ms: what "unloaded" means.
    pub unloaded_p99_ms: f64,
    /// Goodput at each of [`MATRIX_LOADS`], as a share of capacity.
    pub goodput: [f64; 3],
    /// p99 at each of [`MATRIX_LOADS`], as a multiple of the unloaded p99.
    pub p99_ratio: [f64; 3],
    /// How long each client waited for an answer, in ms: a real client cannot see a latency
    /// past it (see [`Cell::p99_past_timeout`]).
    pub client_timeout_ms: f64,
    /// Seconds from the slowdown's end to the first second at 90% of capacity (`None`: not
    /// within 20 s).
    pub recovery_s: Option<f64>,
    /// The long run's refusals (`None`: the long run was not run, as in the loopback matrix).
    #[serde(flatten)]
    pub long_run: Option<LongRunRefusals>,
}

impl Cell {
    /// The cell of `strategy`'s runs on the service of `params` (shape `shape`): `unloaded` is
    /// the unprotected service at 0.5x, `overloads` the sweeps at [`MATRIX_LOADS`].
    pub fn new(
        strategy: Strategy,
        shape: &'static str,
        params: &LabParams,
        unloaded: &RunResult,
        overloads: &[RunResult; 3],
        slowdown: &RunResult,
        long_run: Option<&RunResult>,
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
            capacity: params.capacity(),
            unloaded_p99_ms,
            goodput,
            p99_ratio,
            client_timeout_ms: params.client_timeout.as_nanos() as f64 / 1e6,
            recovery_s: slowdown.recovery_s,
            long_run: long_run.map(LongRunRefusals::of),
        }
    }

    /// Whether the p99 at load `index` of [`MATRIX_LOADS`] is at or past the clients' timeout:
    /// at least 1% of the admitted attempts outlived their clients' patience.
    ///
    /// How far past it, only the simulation sees: it counts an admitted attempt's latency
    /// until its work ends, even after its client left, while a real client (the loopback
    /// lab's) counts only up to its own timeout. Two such p99s agree ([`disagreements`]),
    /// whatever their values and whatever unloaded p99 each is a multiple of.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway_lab::matrix::Cell;
    ///
    /// let cell = Cell {
    ///     strategy: "aimd",
    ///     workers: 1,
    ///     shape: "exponential",
    ///     capacity: 90.0,
    ///     unloaded_p99_ms: 60.0,
    ///     goodput: [0.5, 0.5, 0.5],
    ///     p99_ratio: [2.5, 3.4, 9.0],
    ///     client_timeout_ms: 200.0,
    ///     recovery_s: Some(0.1),
    ///     long_run: None,
    /// };
    /// // 150 ms, 204 ms and 540 ms against a 200 ms timeout.
    /// assert_eq!(
    ///     [0, 1, 2].map(|load| cell.p99_past_timeout(load)),
    ///     [false, true, true]
    /// );
    /// ```
    pub fn p99_past_timeout(&self, index: usize) -> bool {
        // The ratio times the unloaded p99 is the p99 again, to within a rounding: a p99 of
        // exactly the timeout must not read as below it.
        let p99_ms = self.p99_ratio[index] * self.unloaded_p99_ms;
        self.unloaded_p99_ms > 0.0 && p99_ms >= self.client_timeout_ms * (1.0 - 1e-9)
    }

    /// Whether goodput and p99 meet the target at 3x and 5x.
    pub fn meets_overload(&self) -> bool {
        meets_overload_target(
            [self.goodput[0], self.goodput[1]],
            [self.p99_ratio[0], self.p99_ratio[1]],
        )
    }

    /// Whether the slowdown's recovery meets the target.
    pub fn meets_recovery(&self) -> bool {
        self.recovery_s.is_some_and(|s| s <= TARGET_RECOVERY_S)
    }

    /// Whether the long run below capacity refused nothing (`true` where it was not run).
    pub fn meets_long_run(&self) -> bool {
        self.long_run.is_none_or(|l| l.long_run_refused == 0)
    }

    /// Whether the cell meets every target it was run for.
    pub fn meets(&self) -> bool {
        self.meets_overload() && self.meets_recovery() && self.meets_long_run()
    }
}

/// The largest difference in goodput (a share of capacity) between a loopback cell and its
/// simulated twin that counts as agreeing.
pub const AGREE_GOODPUT: f64 = 0.05;
/// The largest difference in p99 (as a multiple of the unloaded p99) that counts as agreeing.
pub const AGREE_P99_RATIO: f64 = 0.5;

/// Where `real` (a loopback cell) and `twin` (the same strategy simulated on the same shape)
/// disagree: goodput by more than [`AGREE_GOODPUT`] or p99 by more than [`AGREE_P99_RATIO`] at
/// a load of [`MATRIX_LOADS`] (unless both p99s are [past the clients'
/// timeout](Cell::p99_past_timeout), where only the simulation can tell them apart), or the
/// recovery target met by one and not the other. Empty when they agree.
///
/// # Examples
///
/// ```
/// use spillway_lab::matrix::{disagreements, Cell};
///
/// let twin = Cell {
///     strategy: "aimd",
///     workers: 4,
///     shape: "exponential",
///     capacity: 400.0,
///     unloaded_p99_ms: 30.0,
///     goodput: [0.97, 0.97, 0.96],
///     p99_ratio: [1.5, 1.6, 1.8],
///     client_timeout_ms: 200.0,
///     recovery_s: Some(0.4),
///     long_run: None,
/// };
/// let real = Cell { goodput: [0.90, 0.95, 0.96], p99_ratio: [1.6, 2.3, 1.9], ..twin.clone() };
/// assert_eq!(
///     disagreements(&real, &twin),
///     ["goodput 3x 0.90 (simulated 0.97)", "p99 5x 2.3x (simulated 1.6x)"]
/// );
/// ```
pub fn disagreements(real: &Cell, twin: &Cell) -> Vec<String> {
    let mut out = Vec::new();
    for (i, load) in MATRIX_LOADS.iter().enumerate() {
        if (real.goodput[i] - twin.goodput[i]).abs() > AGREE_GOODPUT {
            out.push(format!(
                "goodput {load}x {:.2} (simulated {:.2})",
                real.goodput[i], twin.goodput[i]
            ));
        }
    }
    for (i, load) in MATRIX_LOADS.iter().enumerate() {
        let both_past = real.p99_past_timeout(i) && twin.p99_past_timeout(i);
        if !both_past && (real.p99_ratio[i] - twin.p99_ratio[i]).abs() > AGREE_P99_RATIO {
            out.push(format!(
                "p99 {load}x {:.1}x (simulated {:.1}x)",
                real.p99_ratio[i], twin.p99_ratio[i]
            ));
        }
    }
    if real.meets_recovery() != twin.meets_recovery() {
        out.push(format!(
            "recovery {} (simulated {})",
            recovery_text(real.recovery_s),
            recovery_text(twin.recovery_s)
        ));
    }
    out
}

/// Where `real` (a loopback cell) lies beyond its simulated twins on several seeds: `own`, the
/// twin on the loopback run's seed, and `others`, on other seeds. A goodput or p99 at a load
/// of [`MATRIX_LOADS`] lies beyond them when it is more than the tolerance ([`AGREE_GOODPUT`],
/// [`AGREE_P99_RATIO`]) outside the range of the twins' values; the recovery, when `real`
/// meets its target and no twin does, or misses it and every twin meets it. Each names the
/// range. A p99 [past the clients' timeout](Cell::p99_past_timeout) lies within the spread if
/// a twin's is past it too. Empty when `real` lies within the tolerance of that range: what it
/// differs by from `own` ([`disagreements`]) is then not beyond what the simulation spans on
/// other arrivals and service times. With no `others`, the same as [`disagreements`]; every value beyond
/// the range is one of those.
///
/// # Examples
///
/// ```
/// use spillway_lab::matrix::{beyond_spread, Cell};
///
/// let twin = Cell {
///     strategy: "aimd",
///     workers: 4,
///     shape: "exponential",
///     capacity: 400.0,
///     unloaded_p99_ms: 30.0,
///     goodput: [0.97, 0.97, 0.96],
///     p99_ratio: [1.5, 1.6, 1.8],
///     client_timeout_ms: 200.0,
///     recovery_s: Some(0.4),
///     long_run: None,
/// };
/// let other_seed = Cell { goodput: [0.93, 0.99, 0.96], p99_ratio: [1.5, 1.7, 2.6], ..twin.clone() };
/// // Goodput at 3x is 0.90: 0.07 from its own seed's twin, within 0.05 of the other's.
/// let real = Cell { goodput: [0.90, 0.97, 0.96], p99_ratio: [1.5, 2.3, 1.8], ..twin.clone() };
/// assert_eq!(
///     beyond_spread(&real, &twin, &[&other_seed]),
///     ["p99 5x 2.3x (simulated 1.6x to 1.7x)"]
/// );
/// ```
pub fn beyond_spread(real: &Cell, own: &Cell, others: &[&Cell]) -> Vec<String> {
    let mut out = Vec::new();
    let twins = || std::iter::once(own).chain(others.iter().copied());
    let range = |value: &dyn Fn(&Cell) -> f64| {
        twins().fold((value(own), value(own)), |(low, high), twin| {
            (low.min(value(twin)), high.max(value(twin)))
        })
    };
    // As `disagreements` measures a difference, so that with one twin the two agree exactly.
    let beyond = |real: f64, (low, high): (f64, f64), tolerance: f64| {
        (low - real).max(real - high) > tolerance
    };
    for (i, load) in MATRIX_LOADS.iter().enumerate() {
        let (low, high) = range(&|cell| cell.goodput[i]);
        if beyond(real.goodput[i], (low, high), AGREE_GOODPUT) {
            out.push(format!(
                "goodput {load}x {:.2} (simulated {})",
                real.goodput[i],
                range_text(low, high, |v| format!("{v:.2}"))
            ));
        }
    }
    for (i, load) in MATRIX_LOADS.iter().enumerate() {
        let both_past = real.p99_past_timeout(i) && twins().any(|twin| twin.p99_past_timeout(i));
        let (low, high) = range(&|cell| cell.p99_ratio[i]);
        if !both_past && beyond(real.p99_ratio[i], (low, high), AGREE_P99_RATIO) {
            out.push(format!(
                "p99 {load}x {:.1}x (simulated {})",
                real.p99_ratio[i],
                range_text(low, high, |v| format!("{v:.1}x"))
            ));
        }
    }
    if twins().all(|twin| twin.meets_recovery() != real.meets_recovery()) {
        let twins_recovered: Vec<String> =
            twins().map(|twin| recovery_text(twin.recovery_s)).collect();
        out.push(format!(
            "recovery {} (simulated {})",
            recovery_text(real.recovery_s),
            twins_recovered.join(", ")
        ));
    }
    out
}

/// `low to high` as `show` writes each, or one value when they are the same.
fn range_text(low: f64, high: f64, show: impl Fn(f64) -> String) -> String {
    let (low, high) = (show(low), show(high));
    if low == high {
        low
    } else {
        format!("{low} to {high}")
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
            cells.push(run_cell(params, strategy, shape, unloaded_run, true)?);
        }
    }
    Ok(cells)
}

/// Simulates `strategy`'s cell on the service of `params` (shape `shape`, its unprotected run at
/// 0.5x `unloaded`): the sweeps at [`MATRIX_LOADS`], the slowdown and, with `long_run`, the long
/// run.
///
/// # Errors
///
/// A [`LabError`] if a parameter cannot be simulated.
pub fn run_cell(
    params: &LabParams,
    strategy: Strategy,
    shape: &'static str,
    unloaded: &RunResult,
    long_run: bool,
) -> Result<Cell, LabError> {
    let sweep = |load| crate::simulate(params, Scenario::Sweep { load }, strategy);
    let overloads = [
        sweep(MATRIX_LOADS[0])?,
        sweep(MATRIX_LOADS[1])?,
        sweep(MATRIX_LOADS[2])?,
    ];
    let slowdown = crate::simulate(
        params,
        Scenario::Slowdown {
            load: EVENT_BASE_LOAD,
        },
        strategy,
    )?;
    let long_run = if long_run {
        Some(crate::simulate(params, Scenario::LongRun, strategy)?)
    } else {
        None
    };
    Ok(Cell::new(
        strategy,
        shape,
        params,
        unloaded,
        &overloads,
        &slowdown,
        long_run.as_ref(),
    ))
}

/// The cells as Markdown: a count of the cells that meet each target per strategy, then one
/// table per strategy, a row per worker count and a column per shape. The long run's column
/// appears if a cell has one.
pub fn matrix_markdown(cells: &[Cell]) -> String {
    markdown(cells, None)
}

/// The loopback lab's cells as [`matrix_markdown`] has them, each with its measured capacity and
/// what its simulated twin in `twins` (the same strategy and shape, on the loopback run's seed)
/// says where they [disagree](disagreements), and a count of those per strategy. With twins
/// on other seeds in `other_seeds`, each cell that disagrees also says whether it lies
/// [beyond the spread](beyond_spread) of all its twins, and the summary's last column counts
/// the cells within it (those that agree among them): of the cells with a twin on their own
/// seed and on another.
pub fn compared_markdown(real: &[Cell], twins: &[Cell], other_seeds: &[Cell]) -> String {
    markdown(
        real,
        Some(Twins {
            own_seed: twins,
            other_seeds,
        }),
    )
}

/// A loopback matrix's simulated twins.
#[derive(Clone, Copy)]
struct Twins<'a> {
    /// On the loopback run's seed: its arrivals and service times.
    own_seed: &'a [Cell],
    /// On other seeds (any number a cell).
    other_seeds: &'a [Cell],
}

/// Whether `twin` is a twin of `cell`: the same strategy on the same workers and shape.
fn is_twin(cell: &Cell, twin: &Cell) -> bool {
    twin.strategy == cell.strategy && twin.workers == cell.workers && twin.shape == cell.shape
}

/// The twin of `cell` in `twins`.
fn twin_of<'a>(cell: &Cell, twins: &'a [Cell]) -> Option<&'a Cell> {
    twins.iter().find(|t| is_twin(cell, t))
}

impl Twins<'_> {
    /// The twins of `cell` on the other seeds.
    fn others_of(&self, cell: &Cell) -> Vec<&Cell> {
        self.other_seeds
            .iter()
            .filter(|t| is_twin(cell, t))
            .collect()
    }
}

fn markdown(cells: &[Cell], twins: Option<Twins<'_>>) -> String {
    let mut strategies: Vec<&'static str> = Vec::new();
    for cell in cells {
        if !strategies.contains(&cell.strategy) {
            strategies.push(cell.strategy);
        }
    }
    let long_run = cells.iter().any(|c| c.long_run.is_some());
    let disagree = |cell: &Cell| {
        twins
            .and_then(|twins| twin_of(cell, twins.own_seed))
            .map(|twin| disagreements(cell, twin))
    };
    let spread = twins.filter(|twins| !twins.other_seeds.is_empty());
    // Only for a cell with a twin on its own seed and on at least one other.
    let beyond = |cell: &Cell| {
        let twins = spread?;
        let own = twin_of(cell, twins.own_seed)?;
        let others = twins.others_of(cell);
        (!others.is_empty()).then(|| beyond_spread(cell, own, &others))
    };
    let mut out = String::from("| strategy | overload (3x, 5x) | recovery |");
    if long_run {
        out.push_str(" long run: nothing refused |");
    }
    out.push_str(" every target |");
    if twins.is_some() {
        out.push_str(" agrees with the simulation |");
    }
    if spread.is_some() {
        out.push_str(" within the seeds' spread |");
    }
    out.push_str("\n|---|---:|---:|");
    out.push_str(&"---:|".repeat(
        usize::from(long_run) + 1 + usize::from(twins.is_some()) + usize::from(spread.is_some()),
    ));
    out.push('\n');
    for strategy in &strategies {
        let mine: Vec<&Cell> = cells.iter().filter(|c| c.strategy == *strategy).collect();
        let n = mine.len();
        let count = |meets: &dyn Fn(&Cell) -> bool| {
            format!("{} of {n}", mine.iter().filter(|c| meets(c)).count())
        };
        let mut row = vec![count(&Cell::meets_overload), count(&Cell::meets_recovery)];
        if long_run {
            row.push(count(&Cell::meets_long_run));
        }
        row.push(count(&Cell::meets));
        if twins.is_some() {
            row.push(count(&|c| disagree(c).is_some_and(|d| d.is_empty())));
        }
        if spread.is_some() {
            row.push(count(&|c| beyond(c).is_some_and(|d| d.is_empty())));
        }
        let _ = writeln!(out, "| {strategy} | {} |", row.join(" | "));
    }
    for strategy in &strategies {
        let _ = writeln!(out, "\n### {strategy}\n");
        let grid: Vec<(u32, &'static str, String)> = cells
            .iter()
            .filter(|c| c.strategy == *strategy)
            .map(|c| {
                let mut text = cell_text(c);
                if let Some(twins) = twins {
                    let _ = write!(text, "<br>{:.0}/s", c.capacity);
                    match twin_of(c, twins.own_seed).map(|twin| disagreements(c, twin)) {
                        None => text.push_str("<br>no simulated twin"),
                        Some(d) if d.is_empty() => text.push_str("<br>as simulated"),
                        Some(d) => {
                            let _ = write!(text, "<br>**differs**: {}", d.join("; "));
                            match beyond(c) {
                                None => {}
                                Some(b) if b.is_empty() => {
                                    text.push_str("<br>within the seeds' spread");
                                }
                                Some(b) => {
                                    let _ =
                                        write!(text, "<br>**beyond the seeds**: {}", b.join("; "));
                                }
                            }
                        }
                    }
                }
                (c.workers, c.shape, text)
            })
            .collect();
        out.push_str(&grid_markdown(&grid));
    }
    out
}

/// A table of `(workers, shape, text)` entries: a row per worker count (in increasing order),
/// a column per shape (in the order they first come).
pub(crate) fn grid_markdown(entries: &[(u32, &'static str, String)]) -> String {
    let mut shapes: Vec<&'static str> = Vec::new();
    for (_, shape, _) in entries {
        if !shapes.contains(shape) {
            shapes.push(shape);
        }
    }
    let mut out = format!("| workers | {} |\n", shapes.join(" | "));
    let _ = writeln!(out, "|---:|{}", "---|".repeat(shapes.len()));
    let mut workers: Vec<u32> = entries.iter().map(|(w, _, _)| *w).collect();
    workers.sort_unstable();
    workers.dedup();
    for w in workers {
        let row: Vec<&str> = shapes
            .iter()
            .map(|shape| {
                entries
                    .iter()
                    .find(|(ew, es, _)| *ew == w && es == shape)
                    .map_or("", |(_, _, text)| text.as_str())
            })
            .collect();
        let _ = writeln!(out, "| {w} | {} |", row.join(" | "));
    }
    out
}

/// A recovery as the tables show it.
fn recovery_text(recovery_s: Option<f64>) -> String {
    recovery_s.map_or_else(|| "never".to_string(), |s| format!("{s:.1} s"))
}

/// One cell: whether it meets every target (and which it misses), goodput and p99 at 3x, 5x and
/// 10x, the recovery, and the long run's refusals if it was run.
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
    let mut text = format!(
        "{verdict}<br>{:.2} {:.2} {:.2}<br>{:.1}x {:.1}x {:.1}x<br>{}",
        cell.goodput[0],
        cell.goodput[1],
        cell.goodput[2],
        cell.p99_ratio[0],
        cell.p99_ratio[1],
        cell.p99_ratio[2],
        recovery_text(cell.recovery_s),
    );
    if let Some(l) = cell.long_run {
        let _ = write!(text, "<br>{}", l.text());
    }
    text
}
