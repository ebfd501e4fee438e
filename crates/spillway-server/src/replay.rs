//! `spillway replay`: what a rule file would have done to recorded traffic. Each request of an
//! access log goes through the same host and path checks, router, key reading, claims, Dubbo
//! limits and spillway layer as in `spillway serve`, on a clock moved to its recorded arrival;
//! an admitted request holds its places for its recorded duration and ends with its recorded
//! status.

mod engine;
mod formats;
mod record;
mod report;
mod source;
mod time;

pub use engine::EngineError;
pub use formats::Format;
pub use record::Record;
pub use report::{ReplayReport, RouteReport, RuleReport, Second};
pub use source::{LineProblem, ReadCounts, SourceError};

use crate::config::Config;
use std::path::PathBuf;
use std::time::Duration;

/// What to replay, and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The access logs, read in this order (gzip-compressed ones too).
    pub logs: Vec<PathBuf>,
    /// The logs' format.
    pub format: Format,
    /// Stop at the first malformed line, rather than count it and go on.
    pub strict: bool,
    /// How far out of time order lines may be and still be replayed in order (default 10 s).
    pub reorder_window: Duration,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            logs: Vec::new(),
            format: Format::Auto,
            strict: false,
            reorder_window: Duration::from_secs(10),
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
    let mut source =
        source::Source::new(options.logs.clone(), options.format, options.strict, window);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|err| EngineError::Setup(format!("cannot start the replay's runtime: {err}")))?;
    let tallies = runtime.block_on(engine::run(&config, &mut source))?;
    let files = options
        .logs
        .iter()
        .map(|log| log.display().to_string())
        .collect();
    Ok(tallies.report(name.to_owned(), files, source.counts, notes))
}
