//! The scenarios with claims, run side by side ([`Strategy::CLASSES`]) at every load, their
//! targets checked, and their tables: docs/overload.md's section on criticality, tenants and
//! deadlines.

use crate::mix::Mix;
use crate::mix_result::MixResult;
use crate::params::{LabError, LabParams};
use crate::scenario::Scenario;
use crate::strategy::Strategy;
use serde::Serialize;
use spillway::adaptive::{AdaptiveQueue, QueueOrder};
use std::fmt::Write as _;

/// The offered loads of the scenarios with claims, as multiples of capacity: the sweeps'.
pub const MIX_LOADS: [f64; 6] = crate::scenario::SWEEP_LOADS;

/// The noisy-tenant scenario's target load: the nine quiet tenants offer about 0.6 of capacity.
pub const NOISY_LOAD: f64 = 2.0;
/// The deadline scenario's target load.
pub const DEADLINE_LOAD: f64 = 3.0;
/// "Not lower than without deadlines", within the spread of two strategies' goodput on the
/// same arrivals: at least this fraction of it.
pub const GOODPUT_TOLERANCE: f64 = 0.98;

/// Every run of the scenarios with claims.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixReport {
    /// The p99 latency of an unprotected service at half its capacity, in ms: what "2x the
    /// unloaded p99" is measured against.
    pub unloaded_p99_ms: f64,
    /// Each run, by scenario, then load, then strategy.
    pub runs: Vec<MixRun>,
}

/// One run, with the targets it is held to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixRun {
    /// The scenario's name.
    pub scenario: &'static str,
    /// The offered load, as a multiple of capacity.
    pub load: f64,
    /// The strategy's name.
    pub strategy: &'static str,
    /// What it measured.
    pub result: MixResult,
    /// Whether it meets its scenario's targets at this load (`None`: none is set here).
    pub meets_target: Option<bool>,
}

/// Runs the three scenarios at [`MIX_LOADS`] for each of [`Strategy::CLASSES`].
///
/// # Errors
///
/// A [`LabError`] if a parameter cannot be simulated.
pub fn run_mix_lab(params: &LabParams) -> Result<MixReport, LabError> {
    let unloaded = crate::simulate(params, Scenario::Sweep { load: 0.5 }, Strategy::None)?;
    let mut runs = Vec::new();
    for mix in Mix::ALL {
        let params = LabParams {
            adaptive_queue: Some(queue_for(mix)),
            ..params.clone()
        };
        for load in MIX_LOADS {
            for strategy in Strategy::CLASSES {
                let result = crate::simulate_mix(&params, Scenario::Mix { load, mix }, strategy)?;
                runs.push(MixRun {
                    scenario: mix.name(),
                    load,
                    strategy: strategy.name(),
                    result,
                    meets_target: None,
                });
            }
        }
    }
    Ok(MixReport::judged(unloaded.p99_ms, runs))
}

/// The queue both queueing strategies get in `mix`'s scenario: 100 places, 100 ms, the oldest
/// first; with deadlines, the adaptive order (the newest first once the queue fails a caller,
/// until it is next empty):
/// oldest first, a queue standing at overload hands each place to the waiter with the least
/// time left, which then misses its deadline at the service.
pub fn queue_for(mix: Mix) -> AdaptiveQueue {
    AdaptiveQueue {
        order: match mix {
            Mix::Deadlines => QueueOrder::Adaptive,
            Mix::Criticality | Mix::NoisyTenant => QueueOrder::Fifo,
        },
        ..AdaptiveQueue::default()
    }
}

impl MixReport {
    /// The report of `runs` (by scenario, then load, then strategy), each judged against its
    /// scenario's targets, with `unloaded_p99_ms` the unprotected service's p99 at 0.5x.
    pub fn judged(unloaded_p99_ms: f64, runs: Vec<MixRun>) -> Self {
        let mut report = MixReport {
            unloaded_p99_ms,
            runs,
        };
        let judged: Vec<Option<bool>> = report.runs.iter().map(|run| report.judge(run)).collect();
        for (run, meets) in report.runs.iter_mut().zip(judged) {
            run.meets_target = meets;
        }
        report
    }

    /// Whether `run` meets its scenario's targets (see [`mix_markdown`]'s text).
    fn judge(&self, run: &MixRun) -> Option<bool> {
        let groups = &run.result.groups;
        match run.scenario {
            "mixed_criticality" => {
                let (critical, default, sheddable) = (&groups[0], &groups[1], &groups[2]);
                let offered = critical.offered_load;
                let kept = critical.goodput >= 0.99 * offered.min(1.0);
                let fast = offered > 0.9 || critical.p99_ms <= 2.0 * self.unloaded_p99_ms;
                let ordered = default.served + 1e-9 >= sheddable.served;
                let total = run.result.run.goodput >= 0.95 * run.load.min(1.0);
                Some(kept && fast && ordered && total)
            }
            "noisy_tenant" if run.load == NOISY_LOAD => {
                let quiet = groups[1..].iter().all(|tenant| tenant.served >= 0.95);
                Some(quiet && run.result.run.goodput >= 0.95)
            }
            // Held to it: the strategy that reads deadlines, against the same queue without.
            "deadlines" if run.load == DEADLINE_LOAD && run.strategy == "classes" => {
                let without = self.runs.iter().find(|other| {
                    other.scenario == run.scenario
                        && other.load == run.load
                        && other.strategy == Strategy::NoClasses.name()
                })?;
                let goodput =
                    run.result.run.goodput >= GOODPUT_TOLERANCE * without.result.run.goodput;
                Some(run.result.wasted == 0 && goodput)
            }
            _ => None,
        }
    }
}

/// The report as docs/overload.md's tables: one per scenario.
pub fn mix_markdown(report: &MixReport) -> String {
    let mut out = String::new();
    let mark = |meets: Option<bool>| match meets {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "",
    };
    let cell = |served: f64, p99: f64| format!("{:.3} / {p99:.0}", served);
    let _ = writeln!(
        out,
        "Unloaded p99 (no protection, 0.5x): {:.1} ms.\n",
        report.unloaded_p99_ms
    );
    let _ = writeln!(
        out,
        "**Mixed criticality** (served: the share of its requests answered in time; p99 in ms)\n"
    );
    let _ = writeln!(
        out,
        "| load | strategy | goodput | critical_plus (20%) | critical (30%) | sheddable (50%) | target |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for run in report
        .runs
        .iter()
        .filter(|r| r.scenario == "mixed_criticality")
    {
        let g = &run.result.groups;
        let _ = writeln!(
            out,
            "| {}x | {} | {:.3} | {} | {} | {} | {} |",
            run.load,
            run.strategy,
            run.result.run.goodput,
            cell(g[0].served, g[0].p99_ms),
            cell(g[1].served, g[1].p99_ms),
            cell(g[2].served, g[2].p99_ms),
            mark(run.meets_target),
        );
    }
    let _ = writeln!(
        out,
        "\n**A noisy tenant** (one tenant offers 20 times each other's rate)\n"
    );
    let _ = writeln!(
        out,
        "| load | strategy | goodput | noisy tenant served | quiet tenants served (min / max) | target |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for run in report.runs.iter().filter(|r| r.scenario == "noisy_tenant") {
        let g = &run.result.groups;
        let quiet = g[1..].iter().map(|t| t.served);
        let (min, max) = quiet.fold((f64::MAX, 0.0_f64), |(lo, hi), s| (lo.min(s), hi.max(s)));
        let _ = writeln!(
            out,
            "| {}x | {} | {:.3} | {:.3} | {min:.3} / {max:.3} | {} |",
            run.load,
            run.strategy,
            run.result.run.goodput,
            g[0].served,
            mark(run.meets_target),
        );
    }
    let _ = writeln!(
        out,
        "\n**Deadlines** (every client gives up after 100 ms, its deadline)\n"
    );
    let _ = writeln!(
        out,
        "| load | strategy | goodput | p99 (ms) | work started after its deadline | target |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for run in report.runs.iter().filter(|r| r.scenario == "deadlines") {
        let _ = writeln!(
            out,
            "| {}x | {} | {:.3} | {:.0} | {} | {} |",
            run.load,
            run.strategy,
            run.result.run.goodput,
            run.result.run.p99_ms,
            run.result.wasted,
            mark(run.meets_target),
        );
    }
    out
}

/// The report's plots: what the most critical class, the quiet tenants and the clients with
/// deadlines got, against offered load, one line per strategy.
pub fn mix_charts(report: &MixReport) -> Vec<crate::plot::Chart> {
    let lines = |scenario: &str, value: &dyn Fn(&MixRun) -> f64| {
        Strategy::CLASSES
            .iter()
            .filter(|strategy| report.runs.iter().any(|r| r.strategy == strategy.name()))
            .map(|strategy| {
                let points = report
                    .runs
                    .iter()
                    .filter(|r| r.scenario == scenario && r.strategy == strategy.name())
                    .map(|r| (r.load, value(r)))
                    .collect();
                (strategy.name().to_owned(), points)
            })
            .collect()
    };
    let chart = |title: &str, y_label: &str, lines| crate::plot::Chart {
        title: title.to_owned(),
        x_label: "offered load (x capacity)".to_owned(),
        y_label: y_label.to_owned(),
        log_y: false,
        lines,
        shade: None,
    };
    vec![
        chart(
            "Mixed criticality: critical_plus (20% of requests)",
            "share served",
            lines("mixed_criticality", &|r| r.result.groups[0].served),
        ),
        chart(
            "A noisy tenant: the worst-served quiet tenant",
            "share served",
            lines("noisy_tenant", &|r| {
                let quiet = r.result.groups[1..].iter().map(|g| g.served);
                quiet.fold(f64::MAX, f64::min)
            }),
        ),
        chart(
            "Deadlines of 100 ms: goodput",
            "goodput (x capacity)",
            lines("deadlines", &|r| r.result.run.goodput),
        ),
    ]
}
