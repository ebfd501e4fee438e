//! SVG plots of a lab: goodput and p99 against offered load, and time series through the spike
//! and the slowdown. Any lab (the simulation or a real one) plots through [`Chart`].

use crate::lab::LabReport;
use crate::scenario::SWEEP_LOADS;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// A chart of named lines.
#[derive(Debug, Clone, Default)]
pub struct Chart {
    /// The caption.
    pub title: String,
    /// The x axis's label.
    pub x_label: String,
    /// The y axis's label.
    pub y_label: String,
    /// A logarithmic y axis (values at or below 0 are left out).
    pub log_y: bool,
    /// The lines: a name and its points, in x order.
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
    /// A shaded x range (the trigger of a spike or a slowdown).
    pub shade: Option<(f64, f64)>,
}

/// Draws `charts` stacked in one SVG file of `width` pixels.
///
/// # Errors
///
/// If the file cannot be written.
pub fn draw(path: &Path, width: u32, charts: &[Chart]) -> Result<(), String> {
    let height = 340 * u32::try_from(charts.len().max(1)).unwrap_or(1);
    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((charts.len().max(1), 1));
    for (chart, area) in charts.iter().zip(panels.iter()) {
        draw_one(area, chart).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    root.present()
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn draw_one(area: &DrawingArea<SVGBackend<'_>, Shift>, chart: &Chart) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    let points = || {
        chart
            .lines
            .iter()
            .flat_map(|(_, p)| p.iter())
            .filter(|(_, y)| y.is_finite() && (!chart.log_y || *y > 0.0))
    };
    let x_max = points().map(|p| p.0).fold(f64::MIN, f64::max).max(1e-9);
    let x_min = points().map(|p| p.0).fold(f64::MAX, f64::min).min(x_max);
    let y_max = points().map(|p| p.1).fold(0.0, f64::max);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&chart.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64);
    if chart.log_y {
        let y_min = points().map(|p| p.1).fold(f64::MAX, f64::min).min(y_max);
        let y_min = if y_min == f64::MAX { 0.1 } else { y_min * 0.8 };
        let ctx = builder
            .build_cartesian_2d(
                x_min..x_max,
                (y_min..(y_max * 1.25).max(y_min * 2.0)).log_scale(),
            )
            .map_err(err)?;
        draw_lines(
            ctx,
            chart,
            (y_min, y_max * 1.25),
            SeriesLabelPosition::UpperLeft,
        )
    } else {
        let top = (y_max * 1.15).max(1e-9);
        let ctx = builder
            .build_cartesian_2d(x_min..x_max, 0f64..top)
            .map_err(err)?;
        draw_lines(ctx, chart, (0.0, top), SeriesLabelPosition::UpperRight)
    }
}

/// Draws the mesh, the shaded range (from `shade_y.0` to `shade_y.1`), the lines and the legend
/// on a built chart, whatever its y axis.
fn draw_lines<'a, Y>(
    mut ctx: ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    chart: &Chart,
    shade_y: (f64, f64),
    legend: SeriesLabelPosition,
) -> Result<(), String>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    ctx.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .draw()
        .map_err(err)?;
    if let Some((a, b)) = chart.shade {
        ctx.draw_series(std::iter::once(Rectangle::new(
            [(a, shade_y.0), (b, shade_y.1)],
            RGBColor(230, 230, 230).filled(),
        )))
        .map_err(err)?;
    }
    for (i, (name, points)) in chart.lines.iter().enumerate() {
        let kept: Vec<(f64, f64)> = points
            .iter()
            .copied()
            .filter(|(_, y)| y.is_finite() && (!chart.log_y || *y > 0.0))
            .collect();
        let color = Palette99::pick(i).to_rgba();
        ctx.draw_series(LineSeries::new(kept, color.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    ctx.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(legend)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Goodput and p99 against offered load, one line per strategy.
pub fn sweep_charts(report: &LabReport, label: &str) -> Vec<Chart> {
    let line = |value: &dyn Fn(&crate::RunResult) -> f64| {
        report
            .strategies
            .iter()
            .map(|&s| {
                let points = SWEEP_LOADS
                    .iter()
                    .filter_map(|&load| report.find("sweep", s, load).map(|r| (load, value(r))))
                    .collect();
                (s.name().to_string(), points)
            })
            .collect()
    };
    vec![
        Chart {
            title: format!("Goodput against offered load ({label})"),
            x_label: "offered load (x capacity)".into(),
            y_label: "goodput (fraction of capacity)".into(),
            log_y: false,
            lines: line(&|r| r.goodput),
            shade: None,
        },
        Chart {
            title: format!("p99 latency against offered load ({label})"),
            x_label: "offered load (x capacity)".into(),
            y_label: "p99 of admitted requests (ms, log)".into(),
            log_y: true,
            lines: line(&|r| r.p99_ms),
            shade: None,
        },
    ]
}

/// Goodput, p99, in-flight and admitted limit through a spike or a slowdown.
pub fn event_charts(report: &LabReport, scenario: &str, label: &str) -> Vec<Chart> {
    let runs: Vec<_> = report
        .runs
        .iter()
        .filter(|r| r.scenario == scenario)
        .collect();
    let shade = crate::lab::scenarios()
        .into_iter()
        .find(|s| s.name() == scenario)
        .and_then(|s| s.trigger())
        .map(|(a, b)| (a.as_secs_f64(), b.as_secs_f64()));
    let lines = |value: &dyn Fn(&crate::SeriesPoint) -> Option<f64>| {
        runs.iter()
            .map(|r| {
                let points = r
                    .series
                    .iter()
                    .filter_map(|p| value(p).map(|v| (p.t_s, v)))
                    .collect();
                (r.strategy.to_string(), points)
            })
            .collect::<Vec<_>>()
    };
    let chart = |title: &str, y: &str, log_y: bool, lines| Chart {
        title: format!("{scenario}: {title} ({label})"),
        x_label: "time (s); the trigger is shaded".into(),
        y_label: y.into(),
        log_y,
        lines,
        shade,
    };
    vec![
        chart(
            "goodput over the last second",
            "goodput (fraction of capacity)",
            false,
            lines(&|p| Some(p.goodput)),
        ),
        chart(
            "p99 over the last second",
            "p99 of admitted (ms, log)",
            true,
            lines(&|p| Some(p.p99_ms)),
        ),
        chart(
            "requests in the service",
            "in flight (log)",
            true,
            lines(&|p| Some(p.in_flight as f64)),
        ),
        chart(
            "admitted concurrency limit",
            "limit (log)",
            true,
            lines(&|p| p.limit),
        ),
    ]
}
