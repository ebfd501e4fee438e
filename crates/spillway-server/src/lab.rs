//! `spillway lab`: the overload lab from the command line.
//!
//! - `spillway lab --quick` runs the simulated lab in its short mode and prints its tables (or,
//!   with `--json`, one JSON array of rows);
//! - `spillway lab` runs the full simulated lab (exponential and log-normal service times) and the
//!   real lab on loopback, then writes `docs/overload.md` and its plots;
//! - `spillway lab --matrix` prints the simulated shape matrix and its fixed-limit floor, and
//!   `--matrix --loopback` runs the matrix through the real proxy on loopback beside its
//!   simulated twin;
//! - `spillway lab --mix` prints the tables of the scenarios whose requests claim a
//!   criticality, a tenant or a deadline;
//! - `spillway lab --long-run` prints each strategy's refusals below capacity over a long run,
//!   simulated, and with `--loopback` through the real proxy too;
//! - `spillway lab --trace LOAD` prints how each strategy's limit moved in one sweep, simulated,
//!   and with `--loopback` through the real proxy beside its twin.

mod docs;
pub mod long_run;
pub mod loopback;
pub mod loopback_matrix;
pub mod one_service;
pub mod trace;

use clap::ValueEnum;
use spillway::adaptive::{
    AdaptiveQueue, BbrConfig, BufferScaling, EnvoyGradientConfig, QueueOrder,
};
use spillway_lab::matrix_report::MatrixReport;
use spillway_lab::{LabError, LabParams, RetryPolicy, Scenario, ServiceTime, Strategy};
use std::path::PathBuf;
use std::time::Duration;

/// The service-time distributions on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Distribution {
    /// Exponential (an M/M/c service).
    Exponential,
    /// Log-normal, with `--sigma`.
    Lognormal,
    /// A fixed time.
    Fixed,
    /// Two fixed times: `--slow-share` of the requests take `--slow-factor` times as long as
    /// the rest.
    Bimodal,
}

/// The options of `spillway lab`.
#[derive(Debug, Clone, clap::Args)]
pub struct LabArgs {
    /// The short mode: the simulated lab with 8 s sweeps; prints its tables and writes nothing.
    #[arg(long)]
    pub quick: bool,
    /// The seed of every random draw: the same seed prints the same numbers.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON instead of the tables: with `--quick` (and in the full mode, of the simulated
    /// lab with exponential service times) one array, a row per strategy, scenario and load;
    /// with `--matrix`, its cells and the fixed-limit floor; with `--mix`, `--long-run` or
    /// `--trace`, their reports.
    #[arg(long)]
    pub json: bool,
    /// The service's workers (requests worked on at once).
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    pub workers: i64,
    /// The mean service time, in milliseconds.
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
    pub service_ms: f64,
    /// The service-time distribution (the full mode runs both).
    #[arg(long, value_enum, default_value_t = Distribution::Exponential)]
    pub distribution: Distribution,
    /// The log-normal shape (the underlying normal's standard deviation).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub sigma: f64,
    /// The bimodal service's share of slow requests, from 0 to 1.
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true)]
    pub slow_share: f64,
    /// How many times as long a bimodal service's slow requests take, from 1 to 1000.
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
    pub slow_factor: f64,
    /// How long a client waits for an answer, in milliseconds.
    #[arg(long, default_value_t = 200.0, allow_negative_numbers = true)]
    pub timeout_ms: f64,
    /// Retries after a refusal or a timeout (0: none).
    #[arg(long, default_value_t = 2, allow_negative_numbers = true)]
    pub retries: i64,
    /// The back-off before the first retry, in milliseconds (doubling, jittered 50-100%).
    #[arg(long, default_value_t = 50.0, allow_negative_numbers = true)]
    pub backoff_ms: f64,
    /// How much the simulated service's time for the same work varies, from 0 (never: the
    /// default) to 0.5: each attempt's work takes its drawn time times a factor drawn
    /// uniformly from `1 - spread` to `1 + spread`, as a real service's does. With `--quick`,
    /// `--long-run` or `--trace` (on loopback, for the simulated twin: the real service has
    /// its own).
    #[arg(
        long,
        value_name = "FRACTION",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub service_spread: f64,
    /// The strategies, comma-separated (default: all; with `--matrix`, `--long-run` or
    /// `--trace`, the adaptive ones).
    #[arg(long, value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// Where the full lab writes overload.md and its plots.
    #[arg(long, default_value = "docs")]
    pub docs: PathBuf,
    /// The full lab: skip the real lab on loopback.
    #[arg(long)]
    pub no_loopback: bool,
    /// The shape matrix only: each strategy (default: the adaptive ones) on services of 1 to
    /// 32 workers with exponential, log-normal and bimodal service times of `--service-ms`,
    /// simulated in the short mode, as docs/overload.md has it, with the fixed-limit floor on
    /// each shape (the largest fixed concurrency limit meeting the overload target, and what
    /// it refuses below capacity); prints its tables (or JSON) and writes nothing. The options of the service's shape (`--workers`,
    /// `--distribution`, `--sigma`, `--slow-share`, `--slow-factor`) are ignored.
    #[arg(long)]
    pub matrix: bool,
    /// The scenarios with claims only (mixed criticality, a noisy tenant, deadlines), each at
    /// 0.5x to 10x with and without classes and with a static split of the limit, simulated
    /// in the short mode; prints docs/overload.md's tables of them (or JSON) and draws their
    /// plot, `<docs>/overload/sim-mix.svg`. Their service is the simulated lab's
    /// (`--workers`, `--service-ms` and the distribution apply); each scenario sets its own
    /// queue. With `--loopback`: through the real proxy on loopback instead (the loopback
    /// lab's upstream and clients; no static split, which the binary cannot express; about 4
    /// minutes), drawing `<docs>/overload/loopback-mix.svg`.
    #[arg(long, conflicts_with = "matrix")]
    pub mix: bool,
    /// The long run only: each strategy (default: the adaptive ones) from a cold start at
    /// 0.5x, 0.7x and 0.9x of capacity for 60 s each, on the service of `--workers`,
    /// `--service-ms` and the distribution, simulated; prints the attempts refused, in the
    /// first 10 s and after, and in each 10 s (or JSON). Below capacity a protection should
    /// refuse nothing. With `--loopback`: through the real proxy on loopback beside its
    /// simulated twin (the upstream's capacity measured first; about 3 minutes a strategy;
    /// the generator, the proxy and the upstream share this machine's CPUs, so keep the
    /// service to a few hundred requests a second, as the loopback matrix does).
    #[arg(long, conflicts_with_all = ["matrix", "mix", "quick", "no_loopback"])]
    pub long_run: bool,
    /// One sweep at this load (a multiple of capacity, above 0 and at most 100; 5 s of warm-up
    /// and 30 s measured), traced: each strategy (default: the adaptive ones) on the service of
    /// `--workers`, `--service-ms` and the distribution, simulated, with its limit, the
    /// requests in the service, goodput, p99 and the RTTs the limit was computed from (its
    /// baseline and latest) second by second from the first (the JSON has a point every 100
    /// ms). With `--loopback`: through the real proxy on loopback beside its
    /// simulated twin (the upstream's capacity measured first; about 40 s a strategy), to see
    /// where the two labs part.
    #[arg(
        long,
        value_name = "LOAD",
        allow_negative_numbers = true,
        conflicts_with_all = ["matrix", "mix", "long_run", "quick", "no_loopback"]
    )]
    pub trace: Option<f64>,
    /// With `--trace`: trace a spike from its load (to 5x for 10 s) or a slowdown at it (the
    /// service 5 times slower for 10 s) instead of a sweep, 10 s after the start.
    #[arg(long, value_enum, requires = "trace")]
    pub trace_event: Option<TraceEvent>,
    /// With `--matrix`: run the matrix through the real proxy on loopback (1 to 32 workers,
    /// exponential and bimodal service times, no long run; about 50 minutes for the five
    /// adaptive strategies) beside its simulated twin, and print the section of
    /// docs/overload.md it makes. The clients' options apply (stretched on services slower than
    /// 10 ms); `--service-ms` and `--quick` do not. With `--mix`, `--long-run` or `--trace`:
    /// those through the real proxy.
    #[arg(long)]
    pub loopback: bool,
    /// The adaptive strategies' queue, with `--quick`, `--matrix`, `--long-run` or `--trace`
    /// (simulated), or `--matrix`, `--long-run` or `--trace` with `--loopback` (through the
    /// real proxy; the loopback matrix stretches its timeout with the clients' on its slower
    /// services); the full lab and
    /// the scenarios with claims run without one: how many requests may wait for a place (0:
    /// none, a full limit refuses at once).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub queue_capacity: i64,
    /// The queue's longest wait, in milliseconds.
    #[arg(long, default_value_t = 100.0, allow_negative_numbers = true)]
    pub queue_timeout_ms: f64,
    /// Which waiting request a freed place goes to.
    #[arg(long, value_enum, default_value_t = QueueOrderArg::Fifo)]
    pub queue_order: QueueOrderArg,
    /// `envoy_gradient`'s open start, with `--quick`, `--matrix`, `--mix`, `--long-run` or
    /// `--trace` (on loopback, `--matrix`, `--long-run` or `--trace`; the full lab runs the
    /// defaults), for `envoy_gradient`
    /// and the scenarios with claims: the limit from the start until the first minRTT is measured
    /// from the calls as they come (0: Envoy's start, pinned at 3; see docs/config.md).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub envoy_start_limit: i64,
    /// `envoy_gradient`'s buffer scaling, where `--envoy-start-limit` may be given: `fixed`
    /// (Envoy's) or `spread` (the buffer times the spread of the service's RTTs; see
    /// docs/config.md).
    #[arg(long, value_enum, default_value_t = BufferScalingArg::Fixed)]
    pub envoy_buffer_scaling: BufferScalingArg,
    /// `envoy_gradient`'s sample windows, where `--envoy-start-limit` may be given: each lasts
    /// at least this many minRTTs, and at least 100 ms (0 to 100; default 12; 0: Envoy's fixed
    /// 100 ms windows; see docs/config.md).
    #[arg(long, allow_negative_numbers = true)]
    pub envoy_window_min_rtts: Option<f64>,
    /// `envoy_gradient`'s in-flight floor, where `--envoy-start-limit` may be given: in a
    /// sample window in which the limit did not bind, it falls no lower than this many times
    /// the most calls in flight in the last 50 windows whose RTT was within the buffer (0 to
    /// 100; default 6; 0: Envoy's gradient alone; see docs/config.md).
    #[arg(long, allow_negative_numbers = true)]
    pub envoy_in_flight_floor: Option<f64>,
    /// `bbr`'s RT correction, for `bbr_probe` in the simulated lab (`--quick`, `--matrix`,
    /// `--long-run` or `--trace`; the loopback lab runs `bbr`'s defaults): how many standard
    /// errors each round's mean RT is raised by before the RT filter takes the smallest (0 to
    /// 3; default 0; see docs/config.md).
    #[arg(
        long,
        value_name = "ERRORS",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub bbr_rtt_correction: f64,
}

/// Refuses `envoy_gradient` settings other than the defaults, naming the first flag that gave
/// one: for the runs that record none (the full lab, the loopback scenarios with claims).
fn envoy_defaults_only(envoy: &EnvoyGradientConfig) -> Result<(), LabError> {
    let defaults = EnvoyGradientConfig::default();
    let changed = [
        (
            "envoy_start_limit",
            envoy.start_limit != defaults.start_limit,
        ),
        (
            "envoy_buffer_scaling",
            envoy.buffer_scaling != defaults.buffer_scaling,
        ),
        (
            "envoy_window_min_rtts",
            envoy.window_min_rtts != defaults.window_min_rtts,
        ),
        (
            "envoy_in_flight_floor",
            envoy.in_flight_floor != defaults.in_flight_floor,
        ),
    ];
    match changed.into_iter().find(|(_, changed)| *changed) {
        Some((field, _)) => Err(LabError::new(
            field,
            format!(
                "the full lab and the loopback scenarios with claims run envoy_gradient's \
                 defaults: give --{} with --quick, --matrix, --mix, --long-run or --trace (on \
                 loopback: --matrix, --long-run or --trace)",
                field.replace('_', "-")
            ),
        )),
        None => Ok(()),
    }
}

/// [`BufferScaling`] on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BufferScalingArg {
    /// The configured buffer, as Envoy.
    Fixed,
    /// The buffer times the spread of the service's RTTs at the last minRTT measurement.
    Spread,
}

impl From<BufferScalingArg> for BufferScaling {
    fn from(arg: BufferScalingArg) -> Self {
        match arg {
            BufferScalingArg::Fixed => BufferScaling::Fixed,
            BufferScalingArg::Spread => BufferScaling::Spread,
        }
    }
}

/// The events `--trace` can follow instead of a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TraceEvent {
    /// The offered load jumps, then falls back.
    Spike,
    /// The service slows down, then recovers.
    Slowdown,
}

/// [`QueueOrder`] on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QueueOrderArg {
    /// The one that waited longest.
    Fifo,
    /// The newest.
    Lifo,
    /// In order until the queue fails a request, then the newest first until it is empty (see
    /// `QueueOrder::Adaptive`).
    Adaptive,
}

/// A duration from milliseconds given on the command line.
fn millis(field: &'static str, ms: f64) -> Result<Duration, LabError> {
    Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| {
        LabError::new(
            field,
            format!("must be a number of milliseconds, at least 0, got {ms}"),
        )
    })
}

impl LabArgs {
    /// The lab parameters these options give (before the quick mode shortens them).
    ///
    /// # Errors
    ///
    /// A [`LabError`] naming the first bad option.
    pub fn params(&self) -> Result<LabParams, LabError> {
        let workers = u32::try_from(self.workers).map_err(|_| {
            LabError::new(
                "workers",
                format!("must be between 1 and 100000, got {}", self.workers),
            )
        })?;
        let mean = millis("service_ms", self.service_ms)?;
        let service_time = match self.distribution {
            Distribution::Exponential => ServiceTime::Exponential { mean },
            Distribution::Lognormal => ServiceTime::LogNormal {
                mean,
                sigma: self.sigma,
            },
            Distribution::Fixed => ServiceTime::Fixed { time: mean },
            Distribution::Bimodal => ServiceTime::Bimodal {
                mean,
                slow_share: self.slow_share,
                slow_factor: self.slow_factor,
            },
        };
        let retries = u32::try_from(self.retries).map_err(|_| {
            LabError::new(
                "retries",
                format!("must be between 0 and 10, got {}", self.retries),
            )
        })?;
        let retry = match retries {
            0 => RetryPolicy::Off,
            retries => RetryPolicy::Backoff {
                retries,
                backoff: millis("backoff_ms", self.backoff_ms)?,
            },
        };
        let queue_timeout = millis("queue_timeout_ms", self.queue_timeout_ms)?;
        let adaptive_queue = match self.queue_capacity {
            0 => None,
            capacity => {
                let queue = AdaptiveQueue {
                    capacity: u32::try_from(capacity).map_err(|_| {
                        LabError::new(
                            "queue_capacity",
                            format!("must be between 0 and 1000000, got {capacity}"),
                        )
                    })?,
                    order: match self.queue_order {
                        QueueOrderArg::Fifo => QueueOrder::Fifo,
                        QueueOrderArg::Lifo => QueueOrder::Lifo,
                        QueueOrderArg::Adaptive => QueueOrder::Adaptive,
                    },
                    timeout: queue_timeout,
                };
                queue.validate().map_err(|err| {
                    // Named as the options are.
                    let option = match err.field() {
                        "queue.capacity" => "queue_capacity",
                        "queue.timeout" => "queue_timeout_ms",
                        other => other,
                    };
                    LabError::new(option, err.problem().to_string())
                })?;
                Some(queue)
            }
        };
        let single = self.long_run || self.trace.is_some();
        if self.loopback && !self.matrix && !self.mix && !single {
            return Err(LabError::new(
                "loopback",
                "--loopback runs the shape matrix, the scenarios with claims, the long run or \
                 a trace on loopback: give --matrix, --mix, --long-run or --trace too (the \
                 full lab runs the loopback lab unless --no-loopback)",
            ));
        }
        if adaptive_queue.is_some() && self.mix {
            return Err(LabError::new(
                "queue_capacity",
                "the scenarios with claims (--mix) give each its own queue",
            ));
        }
        if let (Some(queue), true) = (adaptive_queue, self.loopback && self.matrix) {
            // The loopback matrix stretches the queue's timeout with the clients' on its
            // slowest services: it must stay valid there, not fail an hour into the run.
            let stretch = loopback_matrix::LOOPBACK_MATRIX_WORKERS
                .iter()
                .map(|&workers| loopback_matrix::loopback_stretch(workers))
                .fold(1.0, f64::max);
            let stretched = AdaptiveQueue {
                timeout: queue.timeout.mul_f64(stretch),
                ..queue
            };
            if let Err(err) = stretched.validate() {
                return Err(LabError::new(
                    "queue_timeout_ms",
                    format!(
                        "the loopback matrix stretches it {stretch} times on its slowest \
                         services, and there it {}",
                        err.problem()
                    ),
                ));
            }
        }
        if adaptive_queue.is_some() && !self.quick && !self.matrix && !single {
            return Err(LabError::new(
                "queue_capacity",
                "the full lab writes docs/overload.md without a queue: give a queue with \
                 --quick, --matrix, --long-run or --trace",
            ));
        }
        if self.service_spread != 0.0 && (self.matrix || self.mix || (!self.quick && !single)) {
            return Err(LabError::new(
                "service_spread",
                "applies only with --quick, --long-run or --trace: the matrix, --mix and the \
                 full lab keep their services exact",
            ));
        }
        if self.bbr_rtt_correction != 0.0
            && (self.loopback || self.mix || (!self.quick && !self.matrix && !single))
        {
            return Err(LabError::new(
                "bbr_rtt_correction",
                "applies only to the simulated lab with --quick, --matrix, --long-run or \
                 --trace: the loopback lab, --mix and the full lab run bbr's defaults",
            ));
        }
        let envoy_start_limit = u32::try_from(self.envoy_start_limit).map_err(|_| {
            LabError::new(
                "envoy_start_limit",
                format!("must be between 0 and 1000, got {}", self.envoy_start_limit),
            )
        })?;
        let full = !self.quick && !self.matrix && !self.mix && !single;
        let defaults = EnvoyGradientConfig::default();
        let envoy = EnvoyGradientConfig {
            start_limit: envoy_start_limit,
            buffer_scaling: BufferScaling::from(self.envoy_buffer_scaling),
            window_min_rtts: self
                .envoy_window_min_rtts
                .unwrap_or(defaults.window_min_rtts),
            in_flight_floor: self
                .envoy_in_flight_floor
                .unwrap_or(defaults.in_flight_floor),
            ..defaults
        };
        // The loopback scenarios with claims do not record these settings in their output.
        if full || (self.loopback && self.mix) {
            envoy_defaults_only(&envoy)?;
        }
        let params = LabParams {
            adaptive_queue,
            envoy,
            workers,
            service_time,
            client_timeout: millis("timeout_ms", self.timeout_ms)?,
            retry,
            seed: self.seed,
            service_spread: self.service_spread,
            bbr: BbrConfig {
                rtt_correction: self.bbr_rtt_correction,
                ..BbrConfig::default()
            },
            ..LabParams::default()
        };
        let params = if self.quick { params.quick() } else { params };
        params.validate()?;
        Ok(params)
    }

    /// The strategies these options name.
    ///
    /// # Errors
    ///
    /// A [`LabError`] for an unknown name.
    pub fn strategies(&self) -> Result<Vec<Strategy>, LabError> {
        if self.strategies.is_empty() {
            return Ok(Strategy::ALL.to_vec());
        }
        self.strategies
            .iter()
            .map(|name| {
                Strategy::from_name(name.trim()).ok_or_else(|| {
                    let known: Vec<_> = Strategy::ALL.iter().map(|s| s.name()).collect();
                    LabError::new(
                        "strategies",
                        format!("unknown strategy `{name}`; known: {}", known.join(", ")),
                    )
                })
            })
            .collect()
    }
}

/// `spillway lab --long-run`: the tables (or JSON) of the long run of the strategies named
/// (default: the adaptive ones) on the service of `params`, simulated or on loopback.
async fn run_long_run(
    args: &LabArgs,
    params: &LabParams,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let strategies = if args.strategies.is_empty() {
        Strategy::ADAPTIVE.to_vec()
    } else {
        args.strategies()?
    };
    let report = if args.loopback {
        let base = loopback::LoopbackParams::with_clients_of(params);
        long_run::loopback(params, &base, &strategies).await?
    } else {
        long_run::simulated(params, &strategies)?
    };
    if args.json {
        return Ok(serde_json::to_string_pretty(&report)?);
    }
    Ok(report.markdown())
}

/// `spillway lab --trace LOAD`: the traced sweep at `LOAD` of the strategies named (default:
/// the adaptive ones) on the service of `params`, simulated or on loopback, as tables (or
/// JSON).
async fn run_trace(
    args: &LabArgs,
    params: &LabParams,
    load: f64,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let scenario = match args.trace_event {
        None => Scenario::Sweep { load },
        Some(TraceEvent::Spike) => Scenario::Spike { load },
        Some(TraceEvent::Slowdown) => Scenario::Slowdown { load },
    };
    scenario
        .validate()
        .map_err(|err| LabError::new("trace", err.message().to_string()))?;
    let strategies = if args.strategies.is_empty() {
        Strategy::ADAPTIVE.to_vec()
    } else {
        args.strategies()?
    };
    let report = if args.loopback {
        // The simulated lab's lengths, so that a sweep settles as it does there.
        let base = loopback::LoopbackParams {
            warm_up: params.warm_up,
            measure: params.measure,
            ..loopback::LoopbackParams::with_clients_of(params)
        };
        trace::loopback(params, &base, scenario, &strategies).await?
    } else {
        trace::simulated(params, scenario, &strategies)?
    };
    if args.json {
        return Ok(serde_json::to_string_pretty(&report)?);
    }
    Ok(report.markdown())
}

/// Writes `text` and a newline to stdout; a reader that went away (`| head`) is not an error.
fn print(text: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => Ok(result?),
    }
}

/// Runs `spillway lab`.
///
/// # Errors
///
/// A bad option, a listener that cannot be bound, or a file that cannot be written.
pub async fn run(args: LabArgs) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let params = args.params()?;
    let strategies = args.strategies()?;
    if args.matrix {
        let strategies = if args.strategies.is_empty() {
            Strategy::ADAPTIVE.to_vec()
        } else {
            strategies
        };
        if args.loopback {
            let base = loopback::LoopbackParams::with_clients_of(&params);
            eprintln!(
                "loopback matrix: {} strategies, about {} minutes",
                strategies.len(),
                loopback_matrix::loopback_matrix_minutes(&base, strategies.len())
            );
            let matrix =
                loopback_matrix::run_loopback_matrix(&base, &strategies, params.seed).await?;
            let text = if args.json {
                serde_json::to_string_pretty(&matrix)?
            } else {
                matrix.markdown()
            };
            return print(&text);
        }
        let report = MatrixReport::run(&params.quick(), &strategies)?;
        let text = if args.json {
            serde_json::to_string_pretty(&report)?
        } else {
            report.markdown()
        };
        return print(&text);
    }
    if args.mix {
        let (report, plot) = if args.loopback {
            eprintln!("loopback lab: criticality, tenants and deadlines (about 4 minutes)");
            let base = loopback::LoopbackParams::default();
            (loopback::run_mix_lab(&base).await?, "loopback-mix.svg")
        } else {
            let report = spillway_lab::mix_report::run_mix_lab(&params.quick())?;
            (report, "sim-mix.svg")
        };
        let plots = args.docs.join("overload");
        std::fs::create_dir_all(&plots)?;
        let charts = spillway_lab::mix_report::mix_charts(&report);
        spillway_lab::plot::draw(&plots.join(plot), 900, &charts)?;
        let text = if args.json {
            serde_json::to_string_pretty(&report)?
        } else {
            spillway_lab::mix_report::mix_markdown(&report)
        };
        return print(&text);
    }
    if args.long_run {
        return print(&run_long_run(&args, &params).await?);
    }
    if let Some(load) = args.trace {
        return print(&run_trace(&args, &params, load).await?);
    }
    if args.quick {
        let report = spillway_lab::run_lab(&params, &strategies)?;
        let text = if args.json {
            spillway_lab::report::to_json(&report)?
        } else {
            spillway_lab::report::summary_markdown(&report)
        };
        return print(&text);
    }
    docs::write_all(&args, &params, &strategies).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        lab: LabArgs,
    }

    /// `--service-spread` reaches the simulated service with `--quick`, `--long-run` and
    /// `--trace`; the matrix, the scenarios with claims and the full lab refuse it, and a
    /// spread outside 0 to 0.5 is refused by name.
    #[test]
    fn a_service_spread_goes_where_a_service_is_simulated_alone() {
        for mode in [
            &["--quick"][..],
            &["--long-run"],
            &["--trace", "3"],
            &["--trace", "3", "--loopback"],
        ] {
            let args = [&["lab", "--service-spread", "0.02"][..], mode].concat();
            let cli = Cli::try_parse_from(args).unwrap();
            assert_eq!(cli.lab.params().unwrap().service_spread, 0.02, "{mode:?}");
        }
        for mode in [
            &[][..],
            &["--matrix"],
            &["--mix"],
            &["--matrix", "--loopback"],
        ] {
            let args = [&["lab", "--service-spread", "0.02"][..], mode].concat();
            let err = Cli::try_parse_from(args).unwrap().lab.params().unwrap_err();
            assert_eq!(err.field(), "service_spread", "{mode:?}");
            assert!(
                err.message()
                    .contains("only with --quick, --long-run or --trace"),
                "{err}"
            );
        }
        // Nothing given: exact, in every mode.
        let cli = Cli::try_parse_from(["lab", "--matrix"]).unwrap();
        assert_eq!(cli.lab.params().unwrap().service_spread, 0.0);
        for bad in ["-0.1", "0.6", "NaN", "inf"] {
            let cli = Cli::try_parse_from(["lab", "--quick", "--service-spread", bad]).unwrap();
            let err = cli.lab.params().unwrap_err();
            assert_eq!(err.field(), "service_spread", "{bad}");
            assert!(err.message().contains("between 0 and 0.5"), "{bad}: {err}");
        }
    }

    /// `--bbr-rtt-correction` reaches `bbr_probe` in the simulated lab's modes; the loopback
    /// lab, the scenarios with claims and the full lab refuse it, and a correction outside 0 to
    /// 3 is refused by name.
    #[test]
    fn a_bbr_rtt_correction_goes_to_the_simulated_lab() {
        for mode in [
            &["--quick"][..],
            &["--matrix"],
            &["--long-run"],
            &["--trace", "3"],
        ] {
            let args = [&["lab", "--bbr-rtt-correction", "1"][..], mode].concat();
            let cli = Cli::try_parse_from(args).unwrap();
            assert_eq!(
                cli.lab.params().unwrap().bbr.rtt_correction,
                1.0,
                "{mode:?}"
            );
        }
        for mode in [
            &[][..],
            &["--mix"],
            &["--matrix", "--loopback"],
            &["--trace", "3", "--loopback"],
            &["--long-run", "--loopback"],
        ] {
            let args = [&["lab", "--bbr-rtt-correction", "1"][..], mode].concat();
            let err = Cli::try_parse_from(args).unwrap().lab.params().unwrap_err();
            assert_eq!(err.field(), "bbr_rtt_correction", "{mode:?}");
            assert!(err.message().contains("run bbr's defaults"), "{err}");
        }
        let cli = Cli::try_parse_from(["lab", "--matrix"]).unwrap();
        assert_eq!(cli.lab.params().unwrap().bbr, BbrConfig::default());
        for bad in ["-0.5", "3.5", "NaN"] {
            let cli = Cli::try_parse_from(["lab", "--quick", "--bbr-rtt-correction", bad]).unwrap();
            let err = cli.lab.params().unwrap_err();
            assert_eq!(err.field(), "bbr_rtt_correction", "{bad}");
            assert!(err.message().contains("from 0 to 3"), "{bad}: {err}");
        }
    }

    /// `--trace` takes a load, `--loopback` and an event; it runs alone, and a load of 0 is
    /// refused by name.
    #[tokio::test]
    async fn a_trace_takes_a_load_and_an_event() {
        let cli = Cli::try_parse_from(["lab", "--trace", "5", "--loopback"]).unwrap();
        assert_eq!(cli.lab.trace, Some(5.0));
        assert!(cli.lab.params().is_ok());
        let cli =
            Cli::try_parse_from(["lab", "--trace", "1", "--trace-event", "slowdown"]).unwrap();
        assert_eq!(cli.lab.trace_event, Some(TraceEvent::Slowdown));
        assert!(Cli::try_parse_from(["lab", "--trace-event", "spike"]).is_err());
        assert!(Cli::try_parse_from(["lab", "--trace", "5", "--matrix"]).is_err());
        for load in ["0", "-1", "150", "NaN", "inf"] {
            let cli = Cli::try_parse_from(["lab", "--trace", load, "--loopback"]).unwrap();
            let params = cli.lab.params().unwrap();
            let given = cli.lab.trace.unwrap();
            // Refused by name before anything runs (on loopback, before the capacity is
            // measured).
            let err = run_trace(&cli.lab, &params, given).await.unwrap_err();
            assert!(err.to_string().contains("trace"), "{load}: {err}");
            assert!(err.to_string().contains("at most 100"), "{load}: {err}");
        }
        // A slowdown traced, simulated, in the short mode's lengths: its text names it.
        let cli = Cli::try_parse_from([
            "lab",
            "--trace",
            "1",
            "--trace-event",
            "slowdown",
            "--strategies",
            "aimd",
        ])
        .unwrap();
        let short = cli.lab.params().unwrap().quick();
        let text = run_trace(&cli.lab, &short, 1.0).await.unwrap();
        assert!(text.starts_with("Trace of a slowdown at 1x"), "{text}");
        assert!(text.contains("### aimd"), "{text}");
    }

    /// The loopback matrix takes the queue options, as given (it stretches them per service).
    #[test]
    fn the_loopback_matrix_takes_a_queue() {
        let cli = Cli::try_parse_from([
            "lab",
            "--matrix",
            "--loopback",
            "--queue-capacity",
            "1000",
            "--queue-order",
            "adaptive",
            "--queue-timeout-ms",
            "190",
        ])
        .unwrap();
        let params = cli.lab.params().unwrap();
        assert_eq!(
            params.adaptive_queue,
            Some(AdaptiveQueue {
                capacity: 1000,
                order: QueueOrder::Adaptive,
                timeout: Duration::from_millis(190),
            })
        );
    }
}
