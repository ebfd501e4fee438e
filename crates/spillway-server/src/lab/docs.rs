//! The full lab: both labs run, then `overload.md` and its plots are written.

use super::loopback::{self, LoopbackParams};
use super::loopback_matrix;
use super::LabArgs;
use spillway_lab::matrix_report::MatrixReport;
use spillway_lab::plot::{self, Chart};
use spillway_lab::report::{detail_markdown, summary_markdown};
use spillway_lab::{run_lab, scenarios, LabParams, LabReport, ServiceTime, Strategy};
use std::fmt::Write as _;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The analysis that goes with the tables: what the lab's model does to each strategy.
const NOTES: &str = include_str!("overload_notes.md");

/// What the shape matrix is and how to read it.
const MATRIX_INTRO: &str = include_str!("matrix_intro.md");

/// The scenarios with claims: what they are, their targets, and what they show.
const MIX_INTRO: &str = include_str!("mix_intro.md");

/// The same through the real proxy: how it differs, and what it shows.
const MIX_LOOPBACK_INTRO: &str = include_str!("mix_loopback_intro.md");

/// Runs the full simulated lab (exponential and log-normal service times of the mean given), the
/// loopback lab unless skipped, and writes `<docs>/overload.md` and `<docs>/overload/*.svg`.
pub(super) async fn write_all(
    args: &LabArgs,
    params: &LabParams,
    strategies: &[Strategy],
) -> Result<(), BoxError> {
    let mean = params.service_time.mean();
    let exponential = LabParams {
        service_time: ServiceTime::Exponential { mean },
        ..params.clone()
    };
    let lognormal = LabParams {
        service_time: ServiceTime::LogNormal {
            mean,
            sigma: args.sigma,
        },
        ..params.clone()
    };
    eprintln!("simulated lab: exponential service times");
    let sim = run_lab(&exponential, strategies)?;
    eprintln!("simulated lab: log-normal service times");
    let sim_lognormal = run_lab(&lognormal, strategies)?;
    let adaptive: Vec<Strategy> = Strategy::ADAPTIVE
        .into_iter()
        .filter(|s| strategies.contains(s))
        .collect();
    let matrix = if adaptive.is_empty() {
        None
    } else {
        eprintln!("simulated lab: the shape matrix and its fixed-limit floor");
        Some(MatrixReport::run(&params.clone().quick(), &adaptive)?)
    };
    let real = if args.no_loopback {
        None
    } else {
        let real_params = LoopbackParams::default();
        let in_binary = strategies.iter().filter(|s| s.in_binary()).count();
        eprintln!(
            "loopback lab: {} strategies x {} scenarios (about {} minutes)",
            in_binary,
            scenarios().len(),
            (in_binary * 128 + 60) / 60
        );
        Some(loopback::run_lab(&real_params, strategies, &scenarios()).await?)
    };
    let real_mix = if args.no_loopback {
        None
    } else {
        eprintln!("loopback lab: criticality, tenants and deadlines (about 4 minutes)");
        Some(loopback::run_mix_lab(&LoopbackParams::default()).await?)
    };
    let real_matrix = if args.no_loopback || adaptive.is_empty() {
        None
    } else {
        let base = LoopbackParams::default();
        eprintln!(
            "loopback lab: the shape matrix (about {} minutes)",
            loopback_matrix::loopback_matrix_minutes(&base, adaptive.len())
        );
        Some(loopback_matrix::run_loopback_matrix(&base, &adaptive, params.seed).await?)
    };

    eprintln!("simulated lab: criticality, tenants and deadlines");
    let mix = spillway_lab::mix_report::run_mix_lab(&params.clone().quick())?;

    let plots = args.docs.join("overload");
    std::fs::create_dir_all(&plots)?;
    let mut figures = Vec::new();
    let mut draw = |name: &str, charts: Vec<Chart>| -> Result<String, BoxError> {
        let file = format!("{name}.svg");
        plot::draw(&plots.join(&file), 900, &charts)?;
        figures.push(file.clone());
        Ok(format!("overload/{file}"))
    };
    let sim_sweep = draw(
        "sim-sweep",
        plot::sweep_charts(&sim, "simulated, exponential"),
    )?;
    let sim_spike = draw("sim-spike", plot::event_charts(&sim, "spike", "simulated"))?;
    let sim_slowdown = draw(
        "sim-slowdown",
        plot::event_charts(&sim, "slowdown", "simulated"),
    )?;
    let mix_plot = draw("sim-mix", spillway_lab::mix_report::mix_charts(&mix))?;
    let ln_sweep = draw(
        "sim-sweep-lognormal",
        plot::sweep_charts(&sim_lognormal, "simulated, log-normal"),
    )?;
    let real_plots = match &real {
        Some(real) => Some((
            draw("loopback-sweep", plot::sweep_charts(real, "loopback"))?,
            draw(
                "loopback-spike",
                plot::event_charts(real, "spike", "loopback"),
            )?,
            draw(
                "loopback-slowdown",
                plot::event_charts(real, "slowdown", "loopback"),
            )?,
        )),
        None => None,
    };
    let real_mix_plot = match &real_mix {
        Some(report) => Some(draw(
            "loopback-mix",
            spillway_lab::mix_report::mix_charts(report),
        )?),
        None => None,
    };

    let mut doc = String::new();
    let _ = writeln!(doc, "# The overload lab\n");
    let _ = writeln!(
        doc,
        "Generated by `cargo run --release -p spillway-server -- lab` (seed {}): do not edit by \
         hand. `spillway lab --quick` prints the simulated lab's tables in a few seconds, and \
         `--json` prints them as JSON.\n",
        params.seed
    );
    let _ = writeln!(
        doc,
        "![Goodput and p99 against offered load]({sim_sweep})\n"
    );
    doc.push_str(&verdict(&sim, strategies));
    doc.push_str(NOTES);
    if let Some(matrix) = &matrix {
        doc.push_str(&MATRIX_INTRO.replace("{mean}", &format!("{:?}", params.service_time.mean())));
        doc.push_str(&matrix.markdown());
    }
    doc.push_str(MIX_INTRO);
    doc.push_str(&spillway_lab::mix_report::mix_markdown(&mix));
    let _ = writeln!(doc, "\n![criticality, tenants and deadlines]({mix_plot})\n");
    let _ = writeln!(doc, "\n## The simulated lab: exponential service times\n");
    doc.push_str(&summary_markdown(&sim));
    let _ = writeln!(
        doc,
        "\n![spike]({sim_spike})\n\n![slowdown]({sim_slowdown})\n"
    );
    let _ = writeln!(doc, "Every run:\n");
    doc.push_str(&detail_markdown(&sim));
    let _ = writeln!(doc, "\n## The simulated lab: log-normal service times\n");
    doc.push_str(&summary_markdown(&sim_lognormal));
    let _ = writeln!(doc, "\n![log-normal sweep]({ln_sweep})\n");
    let _ = writeln!(doc, "Every run:\n");
    doc.push_str(&detail_markdown(&sim_lognormal));
    match (&real, &real_plots) {
        (Some(real), Some((sweep, spike, slowdown))) => {
            let _ = writeln!(doc, "\n## The loopback lab\n");
            let _ = writeln!(
                doc,
                "The demo's upstream behind the `spillway` proxy, on this machine's loopback, \
                 driven by an open-loop generator at fixed rates (latency from each request's \
                 intended send time; a timed-out attempt counts with its timeout, the most its \
                 client can see). Its capacity was measured before the runs, with closed-loop \
                 clients straight to the upstream, as its workers over the time a request holds \
                 one: {:.0} requests/s where 4 workers x 10 ms make 400 (tokio's timer rounds a \
                 10 ms sleep up), and loads and goodput are relative to that. The generator, the proxy and the upstream share {} CPUs, so the numbers \
                 move with whatever else the machine is doing: read them for their shape, and \
                 the simulated lab for exact comparisons.\n",
                real.params.capacity(),
                std::thread::available_parallelism().map_or(1, |n| n.get())
            );
            doc.push_str(&summary_markdown(real));
            let _ = writeln!(doc, "\n![loopback sweep]({sweep})\n\n![loopback spike]({spike})\n\n![loopback slowdown]({slowdown})\n");
            let _ = writeln!(doc, "Every run:\n");
            doc.push_str(&detail_markdown(real));
        }
        _ => {
            let _ = writeln!(
                doc,
                "\n## The loopback lab\n\nNot run this time (`--no-loopback`).\n"
            );
        }
    }
    if let (Some(report), Some(plot)) = (&real_mix, &real_mix_plot) {
        doc.push_str(MIX_LOOPBACK_INTRO);
        doc.push_str(&spillway_lab::mix_report::mix_markdown(report));
        let _ = writeln!(
            doc,
            "\n![criticality, tenants and deadlines on loopback]({plot})\n"
        );
    }
    if let Some(matrix) = &real_matrix {
        doc.push('\n');
        doc.push_str(&matrix.markdown());
    }
    let path = args.docs.join("overload.md");
    std::fs::write(&path, doc)?;
    eprintln!(
        "wrote {} and {} plots in {}",
        path.display(),
        figures.len(),
        plots.display()
    );
    let text = if args.json {
        spillway_lab::report::to_json(&sim)?
    } else {
        summary_markdown(&sim)
    };
    super::print(&text)
}

/// The target the next protections must reach, and how every strategy fares against it.
fn verdict(report: &LabReport, strategies: &[Strategy]) -> String {
    let mut out = String::from(
        "## The verdict\n\n\
         The target: at 3x and 5x offered load, goodput at least 95% of capacity and p99 at most \
         twice the unloaded p99; after the slowdown, back to 90% of capacity within 2 s. From \
         the simulated lab with exponential service times below:\n\n\
         | strategy | needs the capacity | goodput 3x | goodput 5x | p99 3x (x unloaded) | p99 5x (x unloaded) | slowdown recovery | meets the target |\n\
         |---|---|---:|---:|---:|---:|---:|---|\n",
    );
    for &strategy in strategies {
        let at = |load| report.find("sweep", strategy, load);
        let (Some(three), Some(five)) = (at(3.0), at(5.0)) else {
            continue;
        };
        let slowdown = report
            .runs
            .iter()
            .find(|r| r.scenario == "slowdown" && r.strategy == strategy.name());
        let recovery = slowdown.and_then(|r| r.recovery_s);
        let ratio = |p99: f64| p99 / report.unloaded_p99_ms;
        let p99 = |r: &spillway_lab::RunResult| {
            if r.counts.admitted == 0 {
                "none admitted".to_string()
            } else {
                format!("{:.1}x", ratio(r.p99_ms))
            }
        };
        let meets = [three, five]
            .iter()
            .all(|r| r.counts.admitted > 0 && r.goodput >= 0.95 && ratio(r.p99_ms) <= 2.0)
            && recovery.is_some_and(|s| s <= 2.0);
        let needs = matches!(strategy, Strategy::StaticQps | Strategy::StaticConcurrency);
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {:.3} | {} | {} | {} | {} |",
            strategy.name(),
            if needs { "yes" } else { "no" },
            three.goodput,
            five.goodput,
            p99(three),
            p99(five),
            recovery.map_or("never".to_string(), |s| format!("{s:.1} s")),
            if meets { "yes" } else { "no" },
        );
    }
    out.push('\n');
    out
}
