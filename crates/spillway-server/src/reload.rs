//! Hot reload: the configuration file is re-read when it changes (watched through the OS's
//! file notifications, `notify`) or on SIGHUP; a good file is applied, a bad one changes nothing
//! and is reported.

mod watched;

use crate::config::{self, Config};
use crate::proxy::Proxy;
use crate::server::apply_rules;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use watched::Watched;

pub use crate::config_state::ConfigState;

/// The settings read once, at start: a reload that changes one of them applies the rest and
/// reports it as needing a restart. Everything else (rules, routes, upstreams, `blocked`,
/// `listener.shadow`, `listener.upstream_timeout`, `listener.body_timeout`,
/// `listener.max_body_size`, `listener.tunnel_idle_timeout` (for tunnels opened from then on),
/// `listener.finish_when_client_leaves`, `listener.trusted_proxies`,
/// `listener.forwarded_header`, `listener.peer_ip_prefix_v4` and `_v6`, and a new
/// certificate and key for a listener that has TLS) applies at once.
pub fn restart_fields(running: &Config, new: &Config) -> Vec<&'static str> {
    let (a, b) = (&running.listener, &new.listener);
    let (x, y) = (&running.admin, &new.admin);
    [
        ("listener.listen", a.listen != b.listen),
        (
            "listener.max_connections",
            a.max_connections != b.max_connections,
        ),
        ("listener.at_capacity", a.at_capacity != b.at_capacity),
        (
            "listener.max_connections_per_client",
            a.max_connections_per_client != b.max_connections_per_client,
        ),
        (
            "listener.header_timeout",
            a.header_timeout != b.header_timeout,
        ),
        ("listener.send_timeout", a.send_timeout != b.send_timeout),
        (
            "listener.max_header_size",
            a.max_header_size != b.max_header_size,
        ),
        ("listener.drain_timeout", a.drain_timeout != b.drain_timeout),
        ("listener.workers", a.workers != b.workers),
        ("listener.origin_header", a.origin_header != b.origin_header),
        // A new certificate or key applies at once; TLS on or off takes a restart.
        ("listener.tls", a.tls.is_some() != b.tls.is_some()),
        ("admin.listen", x.listen != y.listen),
        ("admin.token", x.token != y.token),
        ("admin.metrics_public", x.metrics_public != y.metrics_public),
        ("admin.allowed_hosts", x.allowed_hosts != y.allowed_hosts),
        ("admin.history", x.history != y.history),
        (
            "admin.history_resources",
            x.history_resources != y.history_resources,
        ),
        ("admin.header_timeout", x.header_timeout != y.header_timeout),
        ("admin.max_pending", x.max_pending != y.max_pending),
        ("admin.max_streams", x.max_streams != y.max_streams),
        ("log.format", running.log.format != new.log.format),
    ]
    .into_iter()
    .filter_map(|(field, changed)| changed.then_some(field))
    .collect()
}

/// The reloader's SIGHUP stream, where there are signals.
#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = ();

/// Re-reads a configuration file into a running proxy.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    running: Mutex<Config>,
    proxy: Proxy,
    /// Shared with the proxy's metrics.
    state: Arc<Mutex<ConfigState>>,
    /// What the file, and the files it names, were at the last look.
    looked: Mutex<Looked>,
    /// Woken after every reload attempt (for tests and the status to wait on).
    attempted: tokio::sync::Notify,
    /// Held while the rules change, by a reload and by the admin API's `PUT /api/rules`: one
    /// at a time, so that a reload that read the file before a write cannot put back what the
    /// write replaced after it.
    writing: Arc<Mutex<()>>,
}

/// How long the file must be quiet after a notification before it is read, and the longest a
/// stream of notifications can put that off.
const SETTLE: Duration = Duration::from_millis(150);
const SETTLE_MAX: Duration = Duration::from_secs(2);

/// After a notification: waits until none has come for [`SETTLE`] (at most [`SETTLE_MAX`]
/// after the first), so that a burst of them (a write in several parts, a rename) is one
/// change, read once the file is whole. A file written in place is empty, then partial, for a
/// moment, and a partial file can be good TOML.
async fn settle(changes: &mut tokio::sync::mpsc::Receiver<()>) {
    let until = tokio::time::Instant::now() + SETTLE_MAX;
    loop {
        let quiet = until.min(tokio::time::Instant::now() + SETTLE);
        match tokio::time::timeout_at(quiet, changes.recv()).await {
            Ok(Some(())) => {}
            Ok(None) | Err(_) => return,
        }
    }
}

use crate::file_stamp::FileStamp;

impl Reloader {
    /// A reloader of `path` for `proxy`, which runs `config` (read from `path`).
    pub fn new(path: PathBuf, config: Config, proxy: Proxy) -> Arc<Self> {
        let looked = Looked {
            file: FileStamp::read(&path).ok(),
            named: named_files(&config)
                .into_iter()
                .map(|named| {
                    let stamp = FileStamp::read(&named).ok();
                    (named, stamp)
                })
                .collect(),
        };
        Arc::new(Self {
            path,
            running: Mutex::new(config),
            state: Arc::clone(proxy.config_state()),
            proxy,
            looked: Mutex::new(looked),
            attempted: tokio::sync::Notify::new(),
            writing: Arc::default(),
        })
    }

    /// The lock held while the rules change (see [`Admin`](crate::admin::Admin)'s
    /// `PUT /api/rules`, which takes it too).
    pub(crate) fn writing(&self) -> &Arc<Mutex<()>> {
        &self.writing
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
        let file_error =
            |err: String| config::ConfigError::file(&self.path.display().to_string(), err);
        let name = self.path.display().to_string();
        let _writing = lock(&self.writing);
        let result = config::read(&self.path).and_then(|text| {
            if text.trim().is_empty() {
                return Err(file_error(
                    "the file is empty (as a file being written in place is for a moment): \
                     an empty configuration is never applied by a reload"
                        .into(),
                ));
            }
            let config = crate::checked::parse(&text, &name)?;
            let warnings = config::warnings(&config, &text, &name);
            // What the file names in other files is read first: a bad one changes nothing.
            let prepared = crate::proxy::Prepared::new(&config).map_err(file_error)?;
            apply_rules(&self.proxy, &config).map_err(file_error)?;
            self.proxy.install(prepared);
            let mut running = lock(&self.running);
            let restart = restart_fields(&running, &config);
            // What needs a restart is still the started value: compare with that next time.
            let (listener, admin) = (running.listener.clone(), running.admin.clone());
            *running = config;
            if !restart.is_empty() {
                running.listener.listen = listener.listen;
                running.listener.max_connections = listener.max_connections;
                running.listener.at_capacity = listener.at_capacity;
                running.listener.max_connections_per_client = listener.max_connections_per_client;
                running.listener.header_timeout = listener.header_timeout;
                running.listener.send_timeout = listener.send_timeout;
                running.listener.max_header_size = listener.max_header_size;
                running.listener.drain_timeout = listener.drain_timeout;
                running.listener.workers = listener.workers;
                running.listener.origin_header = listener.origin_header;
                if running.listener.tls.is_some() != listener.tls.is_some() {
                    running.listener.tls = listener.tls;
                }
                running.admin = admin;
            }
            Ok((restart, warnings))
        });
        let mut state = lock(&self.state);
        match result {
            Ok((restart, warnings)) => {
                // Rules that can never apply, as the start logs them: they do not stop a reload.
                for warning in warnings {
                    tracing::warn!("{warning}");
                }
                state.reloads += 1;
                state.last_reload_unix_seconds = Some(crate::unix_time::unix_seconds_now());
                state.last_error = None;
                state.restart_needed = !restart.is_empty();
                state.restart_fields = restart;
                tracing::info!(
                    file = %self.path.display(),
                    restart_needed = ?state.restart_fields,
                    "configuration reloaded"
                );
                Ok(())
            }
            Err(err) => {
                tracing::warn!(error = %err, "reload refused; the running configuration stays");
                state.failures += 1;
                state.last_error = Some(err.to_string());
                Err(err)
            }
        }
    }

    /// [`reload`](Self::reload) on a blocking thread: reading and parsing a large file must
    /// not stall the runtime's workers, which serve the requests.
    pub async fn reload_off_runtime(self: &Arc<Self>) -> Result<(), config::ConfigError> {
        self.reload_holding(()).await
    }

    /// [`reload_off_runtime`](Self::reload_off_runtime), holding `held` (the admin API's turn
    /// to write) until the reload ends, even if the caller stops waiting for it.
    pub(crate) async fn reload_holding<T: Send + 'static>(
        self: &Arc<Self>,
        held: T,
    ) -> Result<(), config::ConfigError> {
        let this = Arc::clone(self);
        let reloading = tokio::task::spawn_blocking(move || {
            let _held = held;
            this.reload()
        });
        let result = match reloading.await {
            Ok(result) => result,
            Err(err) => Err(config::ConfigError::file(
                &self.path.display().to_string(),
                format!("the reload failed: {err}"),
            )),
        };
        self.attempted.notify_waiters();
        result
    }

    /// Completes after the next reload attempt, good or bad. Attempts count from the first
    /// poll, or from `enable` on the pinned future.
    pub fn attempted(&self) -> tokio::sync::futures::Notified<'_> {
        self.attempted.notified()
    }

    /// Whether the file, or a file it names (the listener's certificate and key, an
    /// upstream's authorities), changed since the last look: its modification time, size or
    /// inode. A configuration file that is gone, or cannot be read, is reported once (logged,
    /// and shown as the status's `last_error`) until it is back; the running configuration
    /// stays. A named file that is gone is a change: the reload it starts reports it.
    pub fn file_changed(&self) -> bool {
        let named = named_files(&lock(&self.running));
        let mut looked = lock(&self.looked);
        let file_changed = match std::fs::metadata(&self.path) {
            Ok(metadata) => {
                let stamp = FileStamp::of(&metadata);
                looked.file.replace(stamp) != Some(stamp)
            }
            Err(err) => {
                if looked.file.take().is_some() {
                    let message = format!("{}: cannot read: {err}", self.path.display());
                    tracing::warn!(error = %message, "the configuration file is gone; the running configuration stays");
                    let mut state = lock(&self.state);
                    state.failures += 1;
                    state.last_error = Some(message);
                }
                false
            }
        };
        let mut named_changed = false;
        let mut now = HashMap::with_capacity(named.len());
        for file in named {
            let stamp = FileStamp::read(&file).ok();
            // One not looked at before was read by the reload that named it.
            named_changed |= looked
                .named
                .get(&file)
                .is_some_and(|before| *before != stamp);
            now.insert(file, stamp);
        }
        looked.named = now;
        file_changed || named_changed
    }

    /// [`file_changed`](Self::file_changed) on a blocking thread.
    async fn file_changed_off_runtime(self: &Arc<Self>) -> bool {
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || this.file_changed())
            .await
            .unwrap_or(false)
    }

    /// Reloads when the file changes and on SIGHUP, until the task is dropped. The file's
    /// directory is watched (so that a file replaced by a rename, as editors, `kubectl` and
    /// deploy tools write it, is seen); if the OS cannot watch it, the file is polled once a
    /// second instead.
    pub async fn watch(self: Arc<Self>) {
        self.start_watching().await;
    }

    /// [`watch`](Self::watch), with SIGHUP handled from this call on rather than from the
    /// returned future's first poll: `serve` calls it before it says it is listening, so that
    /// a SIGHUP sent from then on always reloads. Must be called on a tokio runtime.
    pub fn start_watching(self: Arc<Self>) -> impl std::future::Future<Output = ()> + Send {
        #[cfg(unix)]
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        #[cfg(not(unix))]
        let hangup = ();
        self.watch_from(hangup)
    }

    async fn watch_from(self: Arc<Self>, hangup: Hangup) {
        #[cfg(unix)]
        let mut hangup = hangup;
        #[cfg(not(unix))]
        let () = hangup;
        // One pending notification is enough: a burst is one change.
        let (events, mut changes) = tokio::sync::mpsc::channel::<()>(1);
        let mut watched = Watched::new(events);
        self.watch_off_runtime(&mut watched).await;
        // Without notifications (or where a directory cannot be watched), a look once a
        // second; with them, once a minute as a backstop.
        let period = |watched: &Option<Watched>| match watched {
            Some(watched) if watched.is_complete() => Duration::from_secs(60),
            _ => Duration::from_secs(1),
        };
        let mut every = period(&watched);
        let mut tick = tokio::time::interval(every);
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
            let (look, ticked) = tokio::select! {
                _ = tick.tick() => (true, true),
                Some(()) = changes.recv() => {
                    settle(&mut changes).await;
                    (true, false)
                }
                _ = hangup_received => (false, false),
            };
            // The look at the files' stamps off the runtime too: a hung filesystem holds it,
            // not a thread that serves requests.
            let reload = !look || self.file_changed_off_runtime().await;
            if reload {
                let _ = self.reload_off_runtime().await;
            }
            // The new configuration may name files elsewhere; a directory that could not be
            // watched is tried again at each look.
            let incomplete = watched.as_ref().is_some_and(|w| !w.is_complete());
            if reload || (ticked && incomplete) {
                self.watch_off_runtime(&mut watched).await;
                // What changed before a directory was watched again (one made again, its
                // files in it already) sent no event: one more look, and a reload if so.
                for _ in 0..3 {
                    if !self.file_changed_off_runtime().await {
                        break;
                    }
                    let _ = self.reload_off_runtime().await;
                    self.watch_off_runtime(&mut watched).await;
                }
            }
            if period(&watched) != every {
                every = period(&watched);
                tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            }
        }
    }

    /// Has `watched` watch the directories of the file and of the files it names, on a
    /// blocking thread (the OS is asked about each path).
    async fn watch_off_runtime(self: &Arc<Self>, watched: &mut Option<Watched>) {
        let Some(mut watching) = watched.take() else {
            return;
        };
        let files: Vec<PathBuf> = std::iter::once(self.path.clone())
            .chain(named_files(&lock(&self.running)))
            .collect();
        let updated = tokio::task::spawn_blocking(move || {
            watching.update(&files);
            watching
        });
        // A panic there (none is known) leaves the file looked at once a second.
        *watched = updated.await.ok();
    }
}

/// The files a configuration names, which a reload reads again: the listener's certificate and
/// key, and the upstreams' certificate authorities.
fn named_files(config: &Config) -> Vec<PathBuf> {
    let tls = config
        .listener
        .tls
        .iter()
        .flat_map(|tls| [tls.cert.clone(), tls.key.clone()]);
    let authorities = config
        .upstreams
        .iter()
        .filter_map(|upstream| upstream.get_ref().ca.clone());
    tls.chain(authorities).collect()
}

/// What the file, and the files it names, were at the last look.
#[derive(Debug)]
struct Looked {
    file: Option<FileStamp>,
    named: HashMap<PathBuf, Option<FileStamp>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_notifications_settles_once_the_file_is_quiet() {
        let (events, mut changes) = tokio::sync::mpsc::channel(1);
        // Notifications 100 ms apart for 500 ms: read 150 ms after the last.
        let start = tokio::time::Instant::now();
        tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                events.try_send(()).unwrap();
            }
            // The watcher lives on.
            std::future::pending::<()>().await;
            drop(events);
        });
        settle(&mut changes).await;
        assert_eq!(start.elapsed(), Duration::from_millis(650));
        // A stream that never stops is read after 2 s all the same.
        let (events, mut changes) = tokio::sync::mpsc::channel(1);
        let start = tokio::time::Instant::now();
        let sender = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if events.is_closed() {
                    break;
                }
                let _ = events.try_send(());
            }
        });
        settle(&mut changes).await;
        assert_eq!(start.elapsed(), SETTLE_MAX);
        sender.abort();
    }
    use crate::config::TlsFiles;

    #[test]
    fn a_new_cap_per_client_takes_a_restart() {
        let auto = crate::checked::parse("", "t.toml").unwrap();
        let eight = crate::checked::parse("[listener]\nmax_connections_per_client = 8\n", "t.toml")
            .unwrap();
        assert_eq!(
            restart_fields(&auto, &eight),
            ["listener.max_connections_per_client"]
        );
    }

    #[test]
    fn a_new_worker_count_takes_a_restart() {
        let auto = crate::checked::parse("", "t.toml").unwrap();
        let mut two = auto.clone();
        two.listener.workers = crate::config::Workers::Count(2);
        assert_eq!(restart_fields(&auto, &two), ["listener.workers"]);
        assert!(restart_fields(&two, &two.clone()).is_empty());
    }

    #[test]
    fn a_new_certificate_applies_at_once_and_tls_on_or_off_takes_a_restart() {
        let files = |name: &str| TlsFiles {
            cert: format!("{name}.crt").into(),
            key: format!("{name}.key").into(),
        };
        let plain = crate::checked::parse("", "t.toml").unwrap();
        let mut tls = plain.clone();
        tls.listener.tls = Some(files("a"));
        let mut renewed = tls.clone();
        renewed.listener.tls = Some(files("b"));
        assert!(restart_fields(&tls, &renewed).is_empty());
        assert_eq!(restart_fields(&plain, &tls), ["listener.tls"]);
        assert_eq!(restart_fields(&tls, &plain), ["listener.tls"]);
    }
}
