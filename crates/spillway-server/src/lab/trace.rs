//! `spillway lab --trace LOAD`: one sweep at `LOAD` times capacity (or with `--trace-event`, a
//! spike or a slowdown from that load) for each strategy on one service, and how it moved: the
//! limit, the requests in the service, goodput, p99 and the RTTs the limit was computed from,
//! second by second. Simulated; with `--loopback`, through the real proxy on loopback beside its
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
    let twin = loopback.twin(params);
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
             in it, and at t the requests in the service, the limit admitted and the RTTs the \
             limit was computed from (its baseline, and the latest it took; `-` where it has \
             none).\n",
            self.scenario,
            self.on.describe(),
        );
        for run in &self.runs {
            let summary = |traced: &Traced| {
                let mut line = format!(
                    "goodput {:.2}, p99 {:.1} ms",
                    traced.run.goodput, traced.run.p99_ms
                );
                if let Some(ratio) = median_rtt_ratio(&traced.trace) {
                    let _ = write!(line, ", median latest / baseline RTT {ratio:.3}x");
                }
                line
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
                         RTT (ms): baseline / latest | simulated: limit | in service | goodput \
                         | p99 (ms) | RTT (ms): baseline / latest |\n\
                         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
                    );
                    let twin = seconds(&run.simulated.trace);
                    for (at, cells) in seconds(&real.trace) {
                        let other = twin
                            .iter()
                            .find(|(second, _)| *second == at)
                            .map_or("- | - | - | - | -", |(_, cells)| cells.as_str());
                        let _ = writeln!(out, "| {at} | {cells} | {other} |");
                    }
                }
                None => {
                    let _ = writeln!(out, "Simulated: {}.\n", summary(&run.simulated));
                    out.push_str(
                        "| t (s) | limit | in service | goodput | p99 (ms) | \
                         RTT (ms): baseline / latest |\n\
                         |---:|---:|---:|---:|---:|---:|\n",
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

/// The median over `trace`'s points (every 100 ms) of the latest RTT the limit took over its
/// baseline, where it has both: how far above its baseline the limit saw latency, which a
/// latency-based limit reads as a queue.
///
/// # Examples
///
/// ```
/// use spillway_lab::SeriesPoint;
/// use spillway_server::lab::trace::median_rtt_ratio;
///
/// let point = |baseline, latest| SeriesPoint {
///     t_s: 1.0,
///     goodput: 1.0,
///     p99_ms: 10.0,
///     in_flight: 4,
///     limit: Some(4.0),
///     baseline_rtt_ms: baseline,
///     latest_rtt_ms: latest,
/// };
/// let trace = [point(Some(10.0), Some(11.0)), point(Some(10.0), Some(12.0)), point(None, None)];
/// assert_eq!(median_rtt_ratio(&trace), Some(1.2));
/// assert_eq!(median_rtt_ratio(&trace[2..]), None);
/// ```
pub fn median_rtt_ratio(trace: &[SeriesPoint]) -> Option<f64> {
    let mut ratios: Vec<f64> = trace
        .iter()
        .filter_map(|point| match (point.baseline_rtt_ms, point.latest_rtt_ms) {
            (Some(baseline), Some(latest)) if baseline > 0.0 => Some(latest / baseline),
            _ => None,
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    // The upper median: a point of the trace, not a mean of two.
    ratios.get(ratios.len() / 2).copied()
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
                let rtt =
                    |ms: Option<f64>| ms.map_or_else(|| "-".to_string(), |ms| format!("{ms:.1}"));
                let cells = format!(
                    "{limit} | {} | {:.2} | {:.1} | {} / {}",
                    point.in_flight,
                    point.goodput,
                    point.p99_ms,
                    rtt(point.baseline_rtt_ms),
                    rtt(point.latest_rtt_ms),
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
        assert_eq!(cells[2..7], cells[7..12], "{text}");
    }

    /// Each point carries the RTTs the limit was computed from: AIMD keeps only its latest,
    /// Envoy's gradient its minRTT too, and the table and the summary show them.
    #[test]
    fn the_trace_shows_the_rtts_the_limit_saw() {
        let params = LabParams {
            measure: Duration::from_secs(3),
            ..LabParams::default().quick()
        };
        let report = simulated(
            &params,
            Scenario::Sweep { load: 3.0 },
            &[Strategy::Aimd, Strategy::EnvoyGradient],
        )
        .unwrap();
        // The point at 3 s of each run: a whole second, so a row of the table.
        let at = |run: &TraceRun| {
            run.simulated
                .trace
                .iter()
                .find(|point| (point.t_s - 3.0).abs() < 1e-6)
                .cloned()
                .unwrap()
        };
        let aimd = at(&report.runs[0]);
        assert_eq!(aimd.baseline_rtt_ms, None);
        let aimd_latest = aimd.latest_rtt_ms.unwrap();
        assert!(aimd_latest > 0.0, "{aimd:?}");
        let envoy = at(&report.runs[1]);
        let (Some(baseline), Some(latest)) = (envoy.baseline_rtt_ms, envoy.latest_rtt_ms) else {
            panic!("{envoy:?}");
        };
        // The service's mean is 10 ms: its minRTT is a median of calls at a low limit.
        assert!(baseline > 1.0 && baseline < 30.0, "{baseline}");
        let text = report.markdown();
        let rows: Vec<_> = text.lines().filter(|l| l.starts_with("| 3 |")).collect();
        assert_eq!(rows.len(), 2, "{text}");
        assert!(
            rows[0].ends_with(&format!("| - / {aimd_latest:.1} |")),
            "{text}"
        );
        assert!(
            rows[1].ends_with(&format!("| {baseline:.1} / {latest:.1} |")),
            "{text}"
        );
        let ratio = median_rtt_ratio(&report.runs[1].simulated.trace).unwrap();
        assert!(ratio >= 1.0, "{ratio}");
        assert!(
            text.contains(&format!("median latest / baseline RTT {ratio:.3}x")),
            "{text}"
        );
    }
}
