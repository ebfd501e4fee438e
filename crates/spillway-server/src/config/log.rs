//! `[log]`: how `spillway serve` writes its log (the level comes from `SPILLWAY_LOG`).

use serde::{Deserialize, Serialize};

/// `[log]`: the log's format.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (the default: one line per event, coloured at a terminal) or `json` (one JSON
    /// object per line, each event's fields as fields, for Loki, Elasticsearch, Cloud
    /// Logging); `spillway serve --log-format` overrides it.
    #[serde(default)]
    pub format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line per event, for a person.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's
    /// fields.
    Json,
}
