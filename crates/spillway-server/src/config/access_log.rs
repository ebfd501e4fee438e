//! `[access_log]`: spillway's own access log, off unless the section is given.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[access_log]`: one JSON object a line for each request the proxy answers (see
/// `docs/config.md`), appended to `path`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AccessLogConfig {
    /// The file lines are appended to (created if missing, relative to the working directory),
    /// opened again at each reload so that a rotated file is followed.
    pub path: PathBuf,
    /// Headers each line keeps besides those the configuration reads (keys, claims, the
    /// origin, the forwarding header): for replaying the log with rules that read others.
    #[serde(default)]
    pub headers: Vec<String>,
}

/// The most headers `[access_log] headers` may name.
pub const MAX_LOGGED_HEADERS: usize = 32;
