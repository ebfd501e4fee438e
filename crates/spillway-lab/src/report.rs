//! A lab's results as markdown tables and as JSON rows.

use crate::lab::LabReport;
use crate::record::RunResult;
use crate::scenario::SWEEP_LOADS;
use serde::Serialize;
use std::fmt::Write as _;

/// One JSON row: a strategy in a scenario at a load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JsonRow {
    /// `sweep`, `spike`, `slowdown` or `long_run`.
    pub scenario: &'static str,
    /// The strategy's name.
    pub strategy: &'static str,
    /// The offered load (for spike and slowdown, the base load) as a multiple of capacity.
    pub load: f64,
    /// Answers within the client timeout per second, as a fraction of capacity.
    pub goodput: f64,
    /// Latency of admitted attempts, ms; `null` if none was admitted.
    pub p50_ms: Option<f64>,
    /// Latency of admitted attempts, ms; `null` if none was admitted.
    pub p99_ms: Option<f64>,
    /// Latency of admitted attempts, ms; `null` if none was admitted.
    pub p999_ms: Option<f64>,
    /// The unprotected service's p99 at 0.5x, ms.
    pub unloaded_p99_ms: f64,
    /// Spike and slowdown: seconds from the trigger's end to 90% of capacity; `null` if never
    /// (and for sweeps).
    pub recovery_s: Option<f64>,
    /// Requests sent (first attempts).
    pub requests: u64,
    /// Attempts sent (requests and retries).
    pub attempts: u64,
    /// Attempts refused by the protection.
    pub refused: u64,
    /// Attempts whose client gave up waiting.
    pub timed_out: u64,
    /// Retries sent.
    pub retries: u64,
}

/// Rounds to `digits` decimals, so that rows read well and compare exactly.
fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// The rows of a report, in its run order.
pub fn json_rows(report: &LabReport) -> Vec<JsonRow> {
    report
        .runs
        .iter()
        .map(|run| {
            let latency = |ms: f64| (run.counts.admitted > 0).then(|| round(ms, 3));
            JsonRow {
                scenario: run.scenario,
                strategy: run.strategy,
                load: run.load,
                goodput: round(run.goodput, 4),
                p50_ms: latency(run.p50_ms),
                p99_ms: latency(run.p99_ms),
                p999_ms: latency(run.p999_ms),
                unloaded_p99_ms: round(report.unloaded_p99_ms, 3),
                recovery_s: run.recovery_s.map(|s| round(s, 1)),
                requests: run.counts.requests,
                attempts: run.counts.attempts,
                refused: run.counts.refused,
                timed_out: run.counts.timed_out,
                retries: run.counts.retries,
            }
        })
        .collect()
}

/// The report as one JSON array of [`JsonRow`]s.
///
/// # Errors
///
/// If serialization fails (it does not for these rows).
pub fn to_json(report: &LabReport) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(&json_rows(report))
}

/// The compact tables: goodput and p99 against offered load, then the spike and the slowdown.
pub fn summary_markdown(report: &LabReport) -> String {
    let mut out = String::new();
    let p = &report.params;
    let settings = p.settings();
    let named = match settings.is_empty() {
        true => String::new(),
        false => format!(" ({})", settings.join("; ")),
    };
    let _ = writeln!(
        out,
        "Service: {} workers, {}{named} (capacity {:.0} requests/s); clients time out after {:?}, {}; seed {}; \
         sweeps measured for {:?} after {:?}. Unloaded p99 (no protection, 0.5x): {:.1} ms.\n",
        p.workers,
        p.service_time.label(),
        p.capacity(),
        p.client_timeout,
        retry_label(p),
        p.seed,
        p.measure,
        p.warm_up,
        report.unloaded_p99_ms,
    );
    out.push_str(
        "**Goodput** (answers within the client timeout, fraction of capacity) against offered \
         load:\n\n",
    );
    sweep_table(&mut out, report, |run| format!("{:.3}", run.goodput));
    out.push_str("\n**p99 latency** of admitted requests, ms (x the unloaded p99):\n\n");
    sweep_table(&mut out, report, |run| {
        if run.counts.admitted == 0 {
            "none admitted".into()
        } else {
            format!(
                "{} ({:.1}x)",
                ms(run.p99_ms),
                run.p99_ms / report.unloaded_p99_ms
            )
        }
    });
    out.push_str(
        "\n**Spike** (1x, then 5x for 10 s, then 1x) and **slowdown** (1x; service time x5 for \
         10 s): goodput over the whole run, p99, and seconds from the end of the trigger to the \
         first second at 90% of capacity (never: did not recover in the 20 s after):\n\n",
    );
    out.push_str("| strategy | spike goodput | spike p99 ms | spike recovery s | slowdown goodput | slowdown p99 ms | slowdown recovery s |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for &strategy in &report.strategies {
        let _ = write!(out, "| {} |", strategy.name());
        for scenario in ["spike", "slowdown"] {
            let run = report
                .runs
                .iter()
                .find(|r| r.scenario == scenario && r.strategy == strategy.name());
            match run {
                Some(run) => {
                    let _ = write!(
                        out,
                        " {:.3} | {} | {} |",
                        run.goodput,
                        latency(run, run.p99_ms),
                        recovery(run)
                    );
                }
                None => out.push_str(" | | |"),
            }
        }
        out.push('\n');
    }
    out
}

/// A table of the sweeps: a row per strategy, a column per load, `cell` in each.
fn sweep_table(out: &mut String, report: &LabReport, cell: impl Fn(&RunResult) -> String) {
    out.push_str("| strategy |");
    for load in SWEEP_LOADS {
        let _ = write!(out, " {load}x |");
    }
    out.push_str("\n|---|");
    for _ in SWEEP_LOADS {
        out.push_str("---:|");
    }
    out.push('\n');
    for &strategy in &report.strategies {
        let _ = write!(out, "| {} |", strategy.name());
        for load in SWEEP_LOADS {
            let text = report
                .find("sweep", strategy, load)
                .map_or(String::new(), &cell);
            let _ = write!(out, " {text} |");
        }
        out.push('\n');
    }
}

/// Every run in full: latency percentiles and what happened to the attempts.
pub fn detail_markdown(report: &LabReport) -> String {
    let mut out = String::from(
        "| scenario | strategy | load | goodput | p50 ms | p99 ms | p999 ms | requests | attempts | refused | timed out | retries | recovery s |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in &report.runs {
        let _ = writeln!(
            out,
            "| {} | {} | {}x | {:.3} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            run.scenario,
            run.strategy,
            run.load,
            run.goodput,
            latency(run, run.p50_ms),
            latency(run, run.p99_ms),
            latency(run, run.p999_ms),
            run.counts.requests,
            run.counts.attempts,
            run.counts.refused,
            run.counts.timed_out,
            run.counts.retries,
            if run.scenario == "sweep" {
                "".to_string()
            } else {
                recovery(run)
            },
        );
    }
    out
}

fn ms(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// A latency of `run` in ms, or `-` if it admitted nothing.
fn latency(run: &RunResult, value: f64) -> String {
    if run.counts.admitted == 0 {
        "-".into()
    } else {
        ms(value)
    }
}

fn recovery(run: &RunResult) -> String {
    match run.recovery_s {
        Some(s) => format!("{s:.1}"),
        None => "never".into(),
    }
}

fn retry_label(params: &crate::LabParams) -> String {
    match params.retry {
        crate::RetryPolicy::Off => "no retries".into(),
        crate::RetryPolicy::Backoff { retries, backoff } => format!(
            "{retries} retries after a refusal or a timeout, backing off {backoff:?} x 2^k (jittered 50-100%)"
        ),
    }
}
