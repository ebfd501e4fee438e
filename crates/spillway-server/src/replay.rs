//! `spillway replay`: what a rule file would have done to recorded traffic. Each request of an
//! access log goes through the same host and path checks, router, key reading, claims, Dubbo
//! limits and spillway layer as in `spillway serve`, on a clock moved to its recorded arrival;
//! an admitted request holds its places for its recorded duration and ends with its recorded
//! status.

mod engine;
mod fields;
mod formats;
mod pattern;
mod record;
mod reorder;
mod report;
mod source;
mod top_keys;

pub use engine::EngineError;
pub use formats::Format;
pub use record::Record;
pub use report::{compare_text, ReplayReport, RouteReport, RuleReport, Second, MAX_TIMELINE};
pub use source::{LineProblem, ReadCounts, SourceError};
pub use top_keys::KeyCount;

use crate::config::Config;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What to replay, and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The access logs, read in this order (gzip-compressed ones too).
    pub logs: Vec<PathBuf>,
    /// The logs' format.
    pub format: Format,
    /// An nginx `log_format` the logs follow (`$variables` read, the text between matched),
    /// instead of `combined` with `$request_time`.
    pub log_format: Option<String>,
    /// Stop at the first malformed line, rather than count it and go on.
    pub strict: bool,
    /// How far out of time order lines may be and still be replayed in order (default 10 s).
    pub reorder_window: Duration,
    /// Report a per-key rule's keys by their fingerprint (16 hex digits), not as they are.
    pub hash_keys: bool,
    /// Show a progress bar on stderr (drawn only when stderr is a terminal).
    pub progress: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            logs: Vec::new(),
            format: Format::Auto,
            log_format: None,
            strict: false,
            reorder_window: Duration::from_secs(10),
            hash_keys: false,
            progress: false,
        }
    }
}

/// What a replay leaves out of `config`, changed to leave it out: shadow mode (the rules are
/// enforced, to see whom they refuse) and cluster rules (which need Redis; a replay is local).
fn fit_to_replay(config: &mut Config) -> Vec<String> {
    let mut notes = Vec::new();
    if config.listener.shadow {
        config.listener.shadow = false;
        notes.push(
            "`listener.shadow` is on in the file: the replay enforces the rules, to show whom \
             they would refuse"
                .to_owned(),
        );
    }
    if !config.cluster_rules.is_empty() {
        notes.push(format!(
            "{} cluster rules are not replayed: they share their counts through Redis",
            config.cluster_rules.len()
        ));
        config.cluster_rules.clear();
    }
    config.cluster = None;
    // A replay answers no one: it writes no access log.
    config.access_log = None;
    // The listener's certificate and the upstreams' CA files: nothing is served or called,
    // and the machine replaying may not be able to read them.
    config.listener.tls = None;
    for upstream in &mut config.upstreams {
        upstream.get_mut().ca = None;
    }
    if !config.system.is_empty() {
        notes.push(
            "system rules' CPU and load checks read no machine in a replay (their readings are \
             unknown, so they refuse nothing); their other checks are replayed"
                .to_owned(),
        );
    }
    notes
}

/// Replays `options.logs` through `config` (checked), named `name` in the report.
///
/// # Errors
///
/// A log that cannot be read (or, with `strict`, a malformed line), or a configuration the
/// engine cannot set up (a file it names that cannot be read).
pub fn replay(
    config: &Config,
    name: &str,
    options: &ReplayOptions,
) -> Result<ReplayReport, EngineError> {
    let mut config = config.clone();
    let notes = fit_to_replay(&mut config);
    let window = u64::try_from(options.reorder_window.as_nanos()).unwrap_or(u64::MAX);
    let pattern = match &options.log_format {
        Some(format) if !matches!(options.format, Format::Auto | Format::Nginx) => {
            return Err(EngineError::Setup(format!(
                "--log-format is an nginx `log_format`: it reads nginx logs, not `{}`",
                options.format.name()
            )))
        }
        Some(format) => Some(std::sync::Arc::new(pattern::Pattern::new(format).map_err(
            |why| EngineError::Setup(format!("--log-format cannot be read: {why}")),
        )?)),
        None => None,
    };
    // A record keeps the headers the rules read, and no other.
    let headers = crate::read_headers::read_by(&config, &[]).into();
    let reading = formats::Reading {
        format: options.format,
        pattern,
        headers,
    };
    let mut source = source::Source::new(options.logs.clone(), reading, options.strict, window);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|err| EngineError::Setup(format!("cannot start the replay's runtime: {err}")))?;
    let progress = options.progress.then(|| {
        let target = indicatif::ProgressDrawTarget::stderr();
        let bar = indicatif::ProgressBar::with_draw_target(Some(source.bytes_total), target);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "replaying {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} {eta} left",
        ) {
            bar.set_style(style);
        }
        bar
    });
    let run = engine::run(&config, &mut source, options.hash_keys, progress.as_ref());
    let tallies = runtime.block_on(run);
    if let Some(progress) = progress {
        progress.finish_and_clear();
    }
    let tallies = tallies?;
    let files = options
        .logs
        .iter()
        .map(|log| log.display().to_string())
        .collect();
    Ok(tallies.report(name.to_owned(), files, source.counts, notes))
}

/// Draws `reports`' per-second timelines in one SVG at `path`: each one's requests (the same
/// log: drawn once) and would-refuse a second, from the first request's second.
///
/// # Errors
///
/// If the file cannot be written.
pub fn plot(reports: &[&ReplayReport], path: &Path) -> Result<(), String> {
    let first = (reports.iter())
        .filter_map(|report| report.timeline.first().map(|second| second.at))
        .min()
        .unwrap_or(0);
    // A rate a second, whatever the timeline's step.
    let series = |report: &ReplayReport, value: fn(&Second) -> u64| -> Vec<(f64, f64)> {
        let step = report.timeline_step_s.max(1) as f64;
        (report.timeline.iter())
            .map(|second| ((second.at - first) as f64, value(second) as f64 / step))
            .collect()
    };
    let mut lines = Vec::new();
    if let Some(report) = reports.first() {
        lines.push(("requests".to_owned(), series(report, |s| s.requests)));
    }
    for report in reports {
        let name = format!("would refuse: {}", report.config);
        lines.push((name, series(report, |s| s.would_refuse)));
    }
    let since = reports
        .first()
        .and_then(|report| report.first_request.clone())
        .unwrap_or_default();
    let chart = spillway_lab::plot::Chart {
        title: "requests and would-refuse a second".to_owned(),
        x_label: format!("seconds from {}", since.get(..19).unwrap_or(&since)),
        y_label: "a second".to_owned(),
        lines,
        ..spillway_lab::plot::Chart::default()
    };
    spillway_lab::plot::draw(path, 900, &[chart])
}
