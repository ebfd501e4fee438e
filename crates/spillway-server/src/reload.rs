//! Hot reload: the configuration file is re-read when it changes (polled once a second) or on
//! SIGHUP; a good file is applied, a bad one changes nothing and is reported.

use crate::config::{self, Config};
use crate::proxy::Proxy;
use crate::server::apply_rules;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The configuration's state, for `GET /api/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigState {
    /// Reloads applied since start.
    pub reloads: u64,
    /// The error of the last reload that failed, until one succeeds.
    pub last_error: Option<String>,
    /// A reload changed the listeners, which only a restart applies.
    pub restart_needed: bool,
}

/// Re-reads a configuration file into a running proxy.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    running: Mutex<Config>,
    proxy: Proxy,
    state: Mutex<ConfigState>,
    modified: Mutex<Option<SystemTime>>,
}

impl Reloader {
    /// A reloader of `path` for `proxy`, which runs `config` (read from `path`).
    pub fn new(path: PathBuf, config: Config, proxy: Proxy) -> Arc<Self> {
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        Arc::new(Self {
            path,
            running: Mutex::new(config),
            proxy,
            state: Mutex::new(ConfigState::default()),
            modified: Mutex::new(modified),
        })
    }

    /// The file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The state now.
    pub fn state(&self) -> ConfigState {
        lock(&self.state).clone()
    }

    /// Reads the file and, if it is good, applies it: rules (unchanged ones keep their state)
    /// and routes. If it is not, nothing changes and the error is kept for the status.
    ///
    /// # Errors
    ///
    /// The file's first problem.
    pub fn reload(&self) -> Result<(), config::ConfigError> {
        let result = config::load(&self.path).and_then(|config| {
            apply_rules(self.proxy.spillway(), &config).map_err(|err| {
                config::ConfigError::file(&self.path.display().to_string(), err.to_string())
            })?;
            self.proxy.set_routes(&config);
            let mut running = lock(&self.running);
            let restart = running.listener != config.listener || running.admin != config.admin;
            *running = config;
            Ok(restart)
        });
        let mut state = lock(&self.state);
        match result {
            Ok(restart) => {
                state.reloads += 1;
                state.last_error = None;
                state.restart_needed |= restart;
                tracing::info!(file = %self.path.display(), restart_needed = state.restart_needed, "configuration reloaded");
                Ok(())
            }
            Err(err) => {
                tracing::warn!(error = %err, "reload refused; the running configuration stays");
                state.last_error = Some(err.to_string());
                Err(err)
            }
        }
    }

    /// [`reload`](Self::reload) on a blocking thread: reading and parsing a large file must
    /// not stall the runtime's workers, which serve the requests.
    pub async fn reload_off_runtime(self: &Arc<Self>) -> Result<(), config::ConfigError> {
        let this = Arc::clone(self);
        match tokio::task::spawn_blocking(move || this.reload()).await {
            Ok(result) => result,
            Err(err) => Err(config::ConfigError::file(
                &self.path.display().to_string(),
                format!("the reload failed: {err}"),
            )),
        }
    }

    /// Reloads when the file's modification time changes (checked once a second) and on
    /// SIGHUP, until the task is dropped.
    pub async fn watch(self: Arc<Self>) {
        #[cfg(unix)]
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            #[cfg(unix)]
            let hangup_received = async {
                match hangup.as_mut() {
                    Some(signal) => signal.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hangup_received = std::future::pending::<Option<()>>();
            tokio::select! {
                _ = tick.tick() => {
                    let modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
                    let changed = {
                        let mut last = lock(&self.modified);
                        let changed = modified.is_some() && modified != *last;
                        *last = modified;
                        changed
                    };
                    if changed {
                        let _ = self.reload_off_runtime().await;
                    }
                }
                _ = hangup_received => {
                    let _ = self.reload_off_runtime().await;
                }
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
