//! `spillway lab --trace LOAD`: one sweep at `LOAD` times capacity (or with `--trace-event`, a
//! spike or a slowdown from that load) for each strategy on one service, and how it moved: the
//! limit, the requests in the service, goodput and p99, second by second. Simulated; with `--loopback`, through the real proxy on loopback beside its
//! simulated twin (the same strategy and arrivals at the capacity measured), to see where the
//! two labs part.

use super::loopback::{on_measured_service, trace_point, LoopbackParams};
use super::one_service::OneService;
use serde::Serialize;
use spillway_lab::{simulate_traced, LabError, LabParams, Scenario, SeriesPoint, Strategy, Traced};
use std::fmt::Write as _;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The traced runs of several strategies on one service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceReport {
    /// The service, and where it ran.
    #[serde(flatten)]
    pub on: OneService,
    /// The scenario: a sweep at a load, or a spike or a slowdown from one.
    pub scenario: String,
    /// The (base) offered load, as a multiple of capacity.
    pub load: f64,
    /// A run per strategy.
    pub runs: Vec<TraceRun>,
}

/// One strategy's traced run: simulated, and through the real proxy when run on loopback.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceRun {
    /// The strategy's name.
    pub strategy: &'static str,
    /// Through the real proxy on loopback, if run there.
    pub loopback: Option<Traced>,
    /// Simulated (on loopback: the twin, at the measured capacity).
    pub simulated: Traced,
}

/// Each of `strategies` in `scenario` on the simulated service of `params`, traced.
///
/// # Errors
///
/// A [`LabError`] if a parameter or the load cannot be simulated.
///
/// # Examples
///
/// ```
/// use spillway_lab::{LabParams, Scenario, Strategy};
/// use spillway_server::lab::trace::simulated;
/// use std::time::Duration;
///
/// let params = LabParams { measure: Duration::from_secs(2), ..LabParams::default().quick() };
/// let report = simulated(&params, Scenario::Sweep { load: 5.0 }, &[Strategy::Aimd])?;
/// assert!(report.markdown().contains("| 1 |"));
/// # Ok::<(), spillway_lab::LabError>(())
/// ```
pub fn simulated(
    params: &LabParams,
    scenario: Scenario,
    strategies: &[Strategy],
) -> Result<TraceReport, LabError> {
    let runs = strategies
        .iter()
        .map(|&strategy| {
            Ok(TraceRun {
                strategy: strategy.name(),
                loopback: None,
                simulated: simulate_traced(params, scenario, strategy)?,
            })
        })
        .collect::<Result<_, LabError>>()?;
    Ok(report(params, false, params.capacity(), scenario, runs))
}

/// Each of `strategies` in `scenario` through the real proxy, in front of an upstream
/// of the shape of `params` whose capacity is measured first, with the clients of `base`; each
/// beside its simulated twin, traced.
///
/// # Errors
///
/// A strategy the binary cannot express, a loopback port that cannot be bound, a
/// configuration refused, or a parameter that cannot be simulated.
pub async fn loopback(
    params: &LabParams,
    base: &LoopbackParams,
    scenario: Scenario,
    strategies: &[Strategy],
) -> Result<TraceReport, BoxError> {
    let loopback = on_measured_service(params, base, strategies).await?;
    eprintln!(
        "trace on loopback: {:.0} requests/s measured ({:.0} nominal)",
        loopback.capacity(),
        loopback.upstream.capacity(),
    );
    let twin = loopback.lab_params();
    let mut runs = Vec::with_capacity(strategies.len());
    for &strategy in strategies {
        runs.push(TraceRun {
            strategy: strategy.name(),
            loopback: Some(trace_point(&loopback, strategy, scenario).await?),
            simulated: simulate_traced(&twin, scenario, strategy)?,
        });
    }
    Ok(report(params, true, loopback.capacity(), scenario, runs))
}

fn report(
    params: &LabParams,
    loopback: bool,
    capacity: f64,
    scenario: Scenario,
    runs: Vec<TraceRun>,
) -> TraceReport {
    TraceReport {
        on: OneService::of(params, loopback, capacity),
        scenario: scenario.to_string(),
        load: scenario.load(),
        runs,
    }
}

impl TraceReport {
    /// A line on the service and the run, then for each strategy its goodput and p99 and a
    /// table of its trace, a row a second (each the second that ends there; the JSON has a
    /// point every 100 ms).
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "Trace of a {}, {} Each row is the second ending at t: answers within the clients' \
             timeout as a fraction of capacity, the p99 of the admitted attempts that finished \
             in it, and at t the requests in the service and the limit admitted.\n",
            self.scenario,
            self.on.describe(),
        );
        for run in &self.runs {
            let summary = |traced: &Traced| {
                format!(
                    "goodput {:.2}, p99 {:.1} ms",
                    traced.run.goodput, traced.run.p99_ms
                )
            };
            let _ = write!(out, "\n### {}\n\n", run.strategy);
            match &run.loopback {
                Some(real) => {
                    let _ = writeln!(
                        out,
                        "Loopback: {}; simulated: {}.\n",
                        summary(real),
                        summary(&run.simulated)
                    );
                    out.push_str(
                        "| t (s) | loopback: limit | in service | goodput | p99 (ms) | \
                         simulated: limit | in service | goodput | p99 (ms) |\n\
                         |---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
                    );
                    let twin = seconds(&run.simulated.trace);
                    for (at, cells) in seconds(&real.trace) {
                        let other = twin
                            .iter()
                            .find(|(second, _)| *second == at)
                            .map_or("- | - | - | -", |(_, cells)| cells.as_str());
                        let _ = writeln!(out, "| {at} | {cells} | {other} |");
                    }
                }
                None => {
                    let _ = writeln!(out, "Simulated: {}.\n", summary(&run.simulated));
                    out.push_str(
                        "| t (s) | limit | in service | goodput | p99 (ms) |\n\
                         |---:|---:|---:|---:|---:|\n",
                    );
                    for (at, cells) in seconds(&run.simulated.trace) {
                        let _ = writeln!(out, "| {at} | {cells} |");
                    }
                }
            }
        }
        out
    }
}

/// The points of `trace` at whole seconds, each as its second and its table cells.
fn seconds(trace: &[SeriesPoint]) -> Vec<(u64, String)> {
    trace
        .iter()
        .filter_map(|point| {
            let at = point.t_s.round();
            ((point.t_s - at).abs() < 1e-6).then(|| {
                let limit = point
                    .limit
                    .map_or_else(|| "-".to_string(), |limit| format!("{limit:.1}"));
                let cells = format!(
                    "{limit} | {} | {:.2} | {:.1}",
                    point.in_flight, point.goodput, point.p99_ms
                );
                (at as u64, cells)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The table has a row a second, each beside the twin's at the same second, and the JSON
    /// keeps every point.
    #[test]
    fn the_table_pairs_the_runs_second_by_second() {
        let params = LabParams {
            measure: Duration::from_secs(2),
            ..LabParams::default().quick()
        };
        let mut report =
            simulated(&params, Scenario::Sweep { load: 3.0 }, &[Strategy::Aimd]).unwrap();
        let run = &report.runs[0].simulated;
        let seconds = run.trace.iter().filter(|p| p.t_s.fract() < 1e-6).count();
        assert!(run.trace.len() > 5 * seconds, "{}", run.trace.len());
        let text = report.markdown();
        assert_eq!(text.matches("\n| 1 |").count(), 1, "{text}");
        assert_eq!(
            text.lines().filter(|l| l.starts_with("| ")).count(),
            seconds + 1
        );
        // The same runs shown as loopback beside simulated: every row has both.
        report.on.loopback = true;
        report.runs[0].loopback = Some(report.runs[0].simulated.clone());
        let text = report.markdown();
        let rows: Vec<_> = text.lines().filter(|l| l.starts_with("| 2 |")).collect();
        assert_eq!(rows.len(), 1, "{text}");
        let cells: Vec<_> = rows[0].split('|').map(str::trim).collect();
        assert_eq!(cells[2..6], cells[6..10], "{text}");
    }
}
