//! What the reloads did: for `GET /api/status` and the metrics.

/// The configuration's state, for `GET /api/status` and the metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigState {
    /// Reloads applied since start.
    pub reloads: u64,
    /// Reloads refused (a bad or missing file) since start.
    pub failures: u64,
    /// When the last good reload was applied, in Unix time (seconds; none yet: `None`).
    pub last_reload_unix_seconds: Option<f64>,
    /// The error of the last reload that failed, until one succeeds.
    pub last_error: Option<String>,
    /// A reload changed settings that only a restart applies.
    pub restart_needed: bool,
    /// Which settings those are (`listener.listen`, `admin.token`, ...).
    pub restart_fields: Vec<&'static str>,
}
