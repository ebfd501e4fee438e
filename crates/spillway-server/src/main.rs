//! `spillway`: protect any HTTP service as a sidecar or gateway.

use clap::{Parser, Subcommand};
use spillway_server::admin::{self, Admin};
use spillway_server::reload::Reloader;
use spillway_server::{config, demo, Server};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc: per-thread free lists, no arena locks, no `mprotect` as glibc's per-thread heaps grow
/// and shrink under a proxy's request-sized allocations.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "spillway",
    version,
    about = "Flow control and overload protection for any HTTP service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy with a configuration file.
    Serve {
        /// The configuration (TOML).
        #[arg(long, short, default_value = "spillway.toml")]
        config: PathBuf,
        /// The log's format (by default the file's `[log] format`, else `text`): `json` writes
        /// one JSON object per line.
        #[arg(long, value_enum)]
        log_format: Option<config::LogFormat>,
    },
    /// Check a configuration file and exit: 0 if it is good, 1 with the errors if not.
    Check {
        /// The configuration (TOML).
        #[arg(long, short, default_value = "spillway.toml")]
        config: PathBuf,
    },
    /// The overload lab: goodput and p99 against offered load, and recovery, for every
    /// protection on identical arrivals. `--quick` prints the simulated lab's tables; without it,
    /// both labs run and docs/overload.md is written.
    Lab(spillway_server::lab::LabArgs),
    /// What a rule file would have done to recorded traffic: each request of the access logs
    /// goes through the rules as `serve` would put it, at its recorded time, holding its places
    /// for its recorded duration; prints, per rule and per route, what would be refused.
    Replay {
        /// The rules to replay (a configuration file, TOML).
        #[arg(long, short, default_value = "spillway.toml")]
        config: PathBuf,
        /// The access logs (gzip-compressed ones are read as they are), the oldest first.
        #[arg(required = true)]
        logs: Vec<PathBuf>,
        /// The logs' format.
        #[arg(long, value_enum, default_value_t = spillway_server::replay::Format::Auto)]
        format: spillway_server::replay::Format,
        /// nginx logs written in this `log_format` (its string, quoted for the shell:
        /// '$remote_addr [$time_local] "$request" $status $request_time'), not `combined`.
        #[arg(long, value_name = "PATTERN")]
        log_format: Option<String>,
        /// Print the whole result as one JSON object.
        #[arg(long)]
        json: bool,
        /// Stop at the first malformed line (by default each is counted and skipped).
        #[arg(long)]
        strict: bool,
        /// How far out of time order lines may be and still be replayed in order.
        #[arg(long, default_value = "10s", value_parser = humantime_serde::re::humantime::parse_duration)]
        reorder_window: std::time::Duration,
        /// Show a per-key rule's keys by their fingerprint (16 hex digits), not as they are.
        #[arg(long)]
        hash_keys: bool,
        /// Replay the logs through these rules too, and show both side by side.
        #[arg(long)]
        compare: Option<PathBuf>,
        /// Draw the requests and would-refuse a second (of both, with `--compare`) as an SVG.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// An upstream, the proxy with example rules and a load generator, with a live table.
    Demo {
        /// How long to run.
        #[arg(long, default_value_t = 15)]
        seconds: u64,
    },
    /// Print the shell's completion script: `spillway completions bash > /etc/bash_completion.d/spillway`
    /// (zsh: into a directory of `$fpath` as `_spillway`; fish:
    /// `~/.config/fish/completions/spillway.fish`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `spillway man > spillway.1`, or with `--dir`, write one
    /// page per command (`spillway.1`, `spillway-serve.1`, ...) into a directory.
    Man {
        /// The directory to write every command's page into.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// `spillway completions SHELL`: the script on stdout.
fn completions(shell: clap_complete::Shell) -> ExitCode {
    use clap::CommandFactory as _;
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "spillway", &mut script);
    match std::io::stdout().write_all(&script) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`| head`) changes nothing.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: cannot write the completions: {err}");
            ExitCode::FAILURE
        }
    }
}

/// `spillway man [--dir DIR]`: the main page on stdout, or every command's page in `dir`.
fn man(dir: Option<&std::path::Path>) -> ExitCode {
    use clap::CommandFactory as _;
    let command = Cli::command();
    let written = match dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut page)
                .and_then(|()| std::io::stdout().write_all(&page))
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(command, dir))
        }
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`| head`) changes nothing.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: cannot write the manual page: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The signals that stop `serve`, registered before it says it is listening: a signal sent from
/// then on is handled, never the default action (which ends the process at once). SIGHUP is the
/// reloader's ([`Reloader::start_watching`]), registered at the same point.
struct Signals {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn register() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let registered = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(signal) => Some(signal),
                Err(err) => {
                    tracing::warn!(error = %err, signal = name, "cannot handle the signal");
                    None
                }
            };
            Self {
                terminate: registered(SignalKind::terminate(), "SIGTERM"),
                interrupt: registered(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// Completes on the first SIGINT (Ctrl-C) or SIGTERM (what Kubernetes, Docker and systemd
    /// send to stop a process); returns the signal's name.
    async fn stop(&mut self) -> &'static str {
        #[cfg(unix)]
        if let (Some(terminate), Some(interrupt)) =
            (self.terminate.as_mut(), self.interrupt.as_mut())
        {
            return tokio::select! {
                _ = interrupt.recv() => "SIGINT",
                _ = terminate.recv() => "SIGTERM",
            };
        }
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

/// The configuration at `path`, checked, or its problems printed.
fn checked_config(path: &std::path::Path) -> Option<config::Config> {
    let name = path.display().to_string();
    match config::read(path).and_then(|text| spillway_server::checked::parse(&text, &name)) {
        Ok(config) => Some(config),
        Err(err) => {
            for problem in err.problems() {
                eprintln!("error: {problem}");
            }
            None
        }
    }
}

/// `spillway replay`: checks the configurations, replays the logs (through both with
/// `compare`), prints the report, and draws the timeline if asked.
fn replay(
    path: &std::path::Path,
    compare: Option<&std::path::Path>,
    plot: Option<&std::path::Path>,
    options: &spillway_server::replay::ReplayOptions,
    json: bool,
) -> ExitCode {
    use spillway_server::replay;
    let mut reports = Vec::new();
    for path in std::iter::once(path).chain(compare) {
        let Some(config) = checked_config(path) else {
            return ExitCode::FAILURE;
        };
        let name = path.display().to_string();
        match replay::replay(&config, &name, options) {
            Ok(report) => reports.push(report),
            Err(err) => {
                eprintln!("error: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    let text = match (json, reports.as_slice()) {
        (true, [one]) => serde_json::to_string_pretty(one),
        (true, [a, b]) => serde_json::to_string_pretty(&serde_json::json!({ "a": a, "b": b })),
        (false, [one]) => Ok(one.to_text()),
        (false, [a, b]) => Ok(replay::compare_text(a, b)),
        _ => Ok(String::new()),
    };
    let text = match text {
        Ok(text) => text,
        Err(err) => {
            eprintln!("error: cannot write the report as JSON: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(plot) = plot {
        let all: Vec<&replay::ReplayReport> = reports.iter().collect();
        if let Err(err) = replay::plot(&all, plot) {
            eprintln!("error: cannot draw the plot: {err}");
            return ExitCode::FAILURE;
        }
    }
    // A reader that went away (`| head`) changes nothing.
    let _ = std::io::stdout().write_all(text.trim_end().as_bytes());
    let _ = std::io::stdout().write_all(b"\n");
    ExitCode::SUCCESS
}

/// Runs the proxy, the admin API and the reloader until SIGINT or SIGTERM, then drains: the
/// proxy's listener closes at once, requests in flight get up to `listener.drain_timeout` to
/// end, and the admin API (whose `/readyz` answers 503 from the signal on) closes after them.
async fn serve(path: PathBuf, config: config::Config) -> ExitCode {
    // On Unix time, as Sentinel's windows are: the access log's times and a replay of it cut
    // the same windows.
    let spillway = spillway::Spillway::new_with_clock(spillway::SystemClock::unix());
    let server = match Server::bind(&config, spillway).await {
        Ok(server) => server,
        Err(err) if err.kind() == std::io::ErrorKind::InvalidInput => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
        Err(err) => {
            eprintln!("error: cannot listen on {}: {err}", config.listener.listen);
            return ExitCode::FAILURE;
        }
    };
    let admin_listener = match admin::bind(config.admin.listen).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!(
                "error: cannot listen on {} (admin): {err}",
                config.admin.listen
            );
            return ExitCode::FAILURE;
        }
    };
    let proxy = server.proxy().clone();
    let closing = proxy.clone();
    let reloader = Reloader::new(path, config.clone(), proxy.clone());
    let admin = Admin::new(
        proxy,
        Some(reloader.clone()),
        config::admin_token(&config.admin),
    )
    .with_public_metrics(config.admin.metrics_public)
    .with_allowed_hosts(config.admin.allowed_hosts.clone())
    .with_history(config.admin.history, config.admin.history_resources)
    .with_limits(
        admin::AdminLimits::of(&config.admin)
            .with_client_networks(config.listener.peer_ip_prefixes().unwrap_or_default()),
    );
    let mut signals = Signals::register();
    // SIGHUP reloads from here on, before the line that says the process is ready.
    let watch = reloader.clone().start_watching();
    if let (Ok(addr), Ok(admin_addr)) = (server.local_addr(), admin_listener.local_addr()) {
        tracing::info!(
            proxy = %addr,
            admin = %admin_addr,
            max_connections = server.max_connections(),
            open_file_limit = spillway_server::descriptors::Descriptors::now().limit,
            "spillway listening"
        );
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let watching = tokio::spawn(watch);
    // The admin API serves through the drain (`/readyz` says it drains), and stops after it.
    let (admin_stop_tx, admin_stop_rx) = tokio::sync::watch::channel(false);
    let admin_task = tokio::spawn(admin.run(admin_listener, stopped(admin_stop_rx)));
    let workers = config.listener.workers.resolve();
    let mut proxy_task = tokio::spawn(server.run_on_workers(workers, stopped(stop_rx)));
    let signal = signals.stop().await;
    closing.health().set_draining();
    let deadline = config.listener.drain_timeout;
    tracing::info!(
        signal,
        ?deadline,
        "shutting down: draining requests in flight"
    );
    let _ = stop_tx.send(true);
    watching.abort();
    let proxy_result = match tokio::time::timeout(deadline, &mut proxy_task).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(
                ?deadline,
                "the drain deadline passed: cutting the requests left"
            );
            proxy_task.abort();
            Ok(Ok(()))
        }
    };
    let _ = admin_stop_tx.send(true);
    let _ = admin_task.await;
    // The access log's last lines reach the file before the process ends.
    let within = std::time::Duration::from_secs(5);
    let flushed = tokio::task::spawn_blocking(move || closing.flush_access_log(within)).await;
    if !matches!(flushed, Ok(true)) {
        tracing::warn!("the access log's last lines may be lost: they were not written in 5 s");
    }
    match proxy_result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(err)) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The logs' filter when `SPILLWAY_LOG` sets none: spillway's at `info`, and the HTTP
/// libraries' errors only, since their warnings are about what clients send (h2 warns once a
/// connection for each client resetting streams too fast, which it answers with a GOAWAY
/// itself: a line an attacker could write a hundred times a second).
const DEFAULT_LOGS: &str = "info,h2=error,hyper=error,hyper_util=error";

/// Structured logs on stderr, as text or one JSON object a line; the level comes from
/// `SPILLWAY_LOG` (default [`DEFAULT_LOGS`]), in `tracing_subscriber`'s filter syntax
/// (`spillway_server=debug`, ...).
fn init_logs(format: config::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SPILLWAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOGS));
    use std::io::IsTerminal as _;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Colour codes only for a person at a terminal, not in a log file or a collector.
        config::LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        // The event's fields beside `timestamp`, `level`, `target` and `message`.
        config::LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any descriptor is opened: the connection cap (`auto`) is read from it.
    spillway_server::descriptors::raise_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Check { config: path } => {
            let name = path.display().to_string();
            let checked = config::read(&path).and_then(|text| {
                let config = spillway_server::checked::parse(&text, &name)?;
                // The files it names: certificate, key, CA files.
                spillway_server::Prepared::check(&config)
                    .map_err(|err| config::ConfigError::file(&name, err))?;
                Ok(config::warnings(&config, &text, &name))
            });
            match checked {
                Ok(warnings) => {
                    for warning in warnings {
                        eprintln!("warning: {warning}");
                    }
                    // A reader that went away (`| head`) changes nothing: the file is good.
                    let _ = writeln!(std::io::stdout(), "{name}: ok");
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    for problem in err.problems() {
                        eprintln!("error: {problem}");
                    }
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve {
            config: path,
            log_format,
        } => {
            // The flag's format at once; the file's once it is read (its problems are
            // printed as they are, on stderr).
            if let Some(format) = log_format {
                init_logs(format);
            }
            let name = path.display().to_string();
            let loaded = config::read(&path).and_then(|text| {
                let config = spillway_server::checked::parse(&text, &name)?;
                Ok((config::warnings(&config, &text, &name), config))
            });
            let config = match loaded {
                Ok((warnings, config)) => {
                    if log_format.is_none() {
                        init_logs(config.log.format);
                    }
                    for warning in warnings {
                        tracing::warn!("{warning}");
                    }
                    config
                }
                Err(err) => {
                    for problem in err.problems() {
                        eprintln!("error: {problem}");
                    }
                    return ExitCode::FAILURE;
                }
            };
            let code = runtime.block_on(serve(path, config));
            // A blocking task stuck on a hung file (a rules write waiting on its disk) must not
            // keep the process past its drain: the runtime waits for such tasks 1 s at most.
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            code
        }
        Command::Lab(args) => match runtime.block_on(spillway_server::lab::run(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::FAILURE
            }
        },
        Command::Replay {
            config: path,
            logs,
            format,
            log_format,
            json,
            strict,
            reorder_window,
            hash_keys,
            compare,
            plot,
        } => {
            let options = spillway_server::replay::ReplayOptions {
                logs,
                format,
                log_format,
                strict,
                reorder_window,
                hash_keys,
                progress: true,
            };
            replay(&path, compare.as_deref(), plot.as_deref(), &options, json)
        }
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => man(dir.as_deref()),
        Command::Demo { seconds } => match runtime.block_on(demo::run(seconds)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::FAILURE
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    /// Keeps the target of every event it is given.
    struct Targets(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Targets {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let target = event.metadata().target().to_owned();
            self.0.lock().unwrap().push(target);
        }
    }

    #[test]
    fn the_default_logs_keep_spillway_s_and_the_http_libraries_errors_alone() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let filter = tracing_subscriber::EnvFilter::new(super::DEFAULT_LOGS);
        let subscriber = tracing_subscriber::registry()
            .with(filter)
            .with(Targets(Arc::clone(&seen)));
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "h2::proto::streams", "reset too fast");
            tracing::warn!(target: "hyper::proto", "a client's mistake");
            tracing::error!(target: "h2::proto", "broken");
            tracing::info!(target: "spillway_server::reload", "reloaded");
            tracing::debug!(target: "spillway_server::conn", "closed");
        });
        assert_eq!(
            *seen.lock().unwrap(),
            ["h2::proto", "spillway_server::reload"]
        );
    }
}
