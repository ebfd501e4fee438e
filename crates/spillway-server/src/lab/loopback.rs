//! The real lab on loopback: the demo's upstream (fixed workers, service times fixed or drawn as
//! the simulated lab draws them) behind the `spillway` proxy, driven by an open-loop load
//! generator at the scenario's rates, evenly spaced or as a Poisson process.
//!
//! Each request is sent at its intended time whatever happened to the ones before it, on its own
//! task, and its latency is measured from that intended time, so a stalled generator cannot hide
//! latency (no coordinated omission). Clients time out and retry as in the simulated lab.
//! Everything listens on 127.0.0.1 and is bounded: at most `max_outstanding` requests in flight
//! from the generator (more are counted as `skipped`), and every run ends by its scenario's end
//! plus the clients' last timeout.

use crate::server::Server;
use crate::upstream::{Upstream, UpstreamShape, DEADLINE_HEADER, WORK_HEADER};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spillway::adaptive::{AdaptiveQueue, EnvoyGradientConfig};
use spillway::system::{LinuxProbe, ManualProbe, SystemProbe};
use spillway::Spillway;
use spillway_lab::arrivals::{Arrivals, Spacing};
use spillway_lab::measure::{AttemptRecord, Outcome, RunRecord, Tick};
use spillway_lab::mix::{Claim, Mix};
use spillway_lab::mix_result::{group_results, ClaimedAttempt, MixResult};
use spillway_lab::{
    LabParams, LabReport, RetryPolicy, RunResult, Scenario, ServiceTime, Strategy, Traced,
    SENTINEL_LOAD_PER_CORE,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A sampling tick and a time-series bucket (the simulated lab's).
const TICK: Duration = Duration::from_nanos(spillway_lab::measure::BUCKET_NANOS);

/// The real lab's service, clients and run lengths.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopbackParams {
    /// The upstream.
    pub upstream: UpstreamShape,
    /// The upstream's capacity in requests a second, as measured by [`measure_capacity`]; `None`
    /// until then (offered loads are multiples of it, and goodput a fraction of it).
    pub capacity: Option<f64>,
    /// How long a client waits for an answer.
    pub client_timeout: Duration,
    /// Retries after a refusal (429), an error or a timeout.
    pub retries: u32,
    /// The back-off before the first retry (doubling, jittered 50-100%).
    pub backoff: Duration,
    /// A sweep point's warm-up.
    pub warm_up: Duration,
    /// A sweep point's measured time.
    pub measure: Duration,
    /// Requests the generator keeps in flight at most.
    pub max_outstanding: usize,
    /// How the generator spaces new requests (retries come after their back-off), with the
    /// upstream's seed.
    pub spacing: Spacing,
    /// `envoy_gradient`'s settings, for its runs and their twins.
    pub envoy: EnvoyGradientConfig,
    /// The adaptive strategies' queue (`None`: a full limit refuses at once), for their runs
    /// and their twins; the scenarios with claims set their own.
    pub adaptive_queue: Option<AdaptiveQueue>,
}

impl Default for LoopbackParams {
    /// The demo's upstream (4 workers x 10 ms: 400 requests a second), the simulated lab's clients
    /// (200 ms timeout, 2 retries from 50 ms), sweeps of 5 s after 1 s, evenly spaced requests.
    fn default() -> Self {
        Self {
            upstream: UpstreamShape {
                workers: 4,
                service: ServiceTime::Fixed {
                    time: Duration::from_millis(10),
                },
                seed: 1,
                flaky: false,
            },
            capacity: None,
            client_timeout: Duration::from_millis(200),
            retries: 2,
            backoff: Duration::from_millis(50),
            warm_up: Duration::from_secs(1),
            measure: Duration::from_secs(5),
            max_outstanding: 20_000,
            spacing: Spacing::Even,
            envoy: EnvoyGradientConfig::default(),
            adaptive_queue: None,
        }
    }
}

impl LoopbackParams {
    /// The loopback lab's defaults with the clients of the simulated lab's `params` (their
    /// timeout, retries and back-off), its `envoy_gradient` start and buffer scaling, and its
    /// adaptive queue.
    pub fn with_clients_of(params: &LabParams) -> Self {
        let (retries, backoff) = match params.retry {
            RetryPolicy::Off => (0, Duration::ZERO),
            RetryPolicy::Backoff { retries, backoff } => (retries, backoff),
        };
        Self {
            client_timeout: params.client_timeout,
            retries,
            backoff,
            envoy: params.envoy,
            adaptive_queue: params.adaptive_queue,
            ..Self::default()
        }
    }

    /// The capacity: measured, or else the upstream's nominal workers / work.
    pub fn capacity(&self) -> f64 {
        self.capacity.unwrap_or_else(|| self.upstream.capacity())
    }

    /// The simulated twin of a trace or a long run on this service: [`lab_params`](Self::lab_params)
    /// with the spread `params` gives the simulated service (`--service-spread`; the real
    /// service has its own).
    pub fn twin(&self, params: &LabParams) -> LabParams {
        LabParams {
            service_spread: params.service_spread,
            ..self.lab_params()
        }
    }

    /// The same setting in the simulated lab's terms (for its tables and plots): the upstream's
    /// service-time distribution with a mean of `workers / capacity`, what each request holds a
    /// worker for as measured.
    pub fn lab_params(&self) -> LabParams {
        LabParams {
            workers: u32::try_from(self.upstream.workers).unwrap_or(u32::MAX),
            service_time: self.upstream.service.with_mean(Duration::from_secs_f64(
                self.upstream.workers as f64 / self.capacity(),
            )),
            client_timeout: self.client_timeout,
            retry: match self.retries {
                0 => RetryPolicy::Off,
                retries => RetryPolicy::Backoff {
                    retries,
                    backoff: self.backoff,
                },
            },
            seed: self.upstream.seed,
            warm_up: self.warm_up,
            measure: self.measure,
            adaptive_queue: self.adaptive_queue,
            envoy: self.envoy,
            // The loopback lab's proxy runs `bbr`'s defaults, and so does its twin.
            bbr: spillway::adaptive::BbrConfig::default(),
            static_concurrency_limit: None,
            // The real service's own spread is its own: the twin's work takes the time drawn
            // (`--service-spread` sets one for a trace's or a long run's twin).
            service_spread: 0.0,
        }
    }
}

/// Sentinel's load threshold on this machine: 2.5 per CPU (load1 is the machine's).
fn sentinel_threshold() -> f64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    SENTINEL_LOAD_PER_CORE * cpus as f64
}

/// `rule` as the configuration file's `[[adaptive]]` table.
fn adaptive_toml(rule: spillway::adaptive::AdaptiveRule) -> Result<String, toml::ser::Error> {
    #[derive(serde::Serialize)]
    struct File {
        adaptive: Vec<spillway::adaptive::AdaptiveRule>,
    }
    toml::to_string(&File {
        adaptive: vec![rule],
    })
}

/// The headers a scenario's requests claim in (`[criticality]`, `[tenant]` and `[deadline]`
/// of the `classes` strategy's configuration read them; the others' ignore them).
const CLASS_HEADER: &str = "x-criticality";
const TENANT_HEADER: &str = "x-api-key";
const DEADLINE_MS_HEADER: &str = "x-deadline-ms";

/// The proxy configuration of `strategy` in front of `upstream`.
fn config_text(
    strategy: Strategy,
    lab: &spillway_lab::LabParams,
    upstream: std::net::SocketAddr,
    capacity: f64,
) -> Result<String, toml::ser::Error> {
    let mut text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [default]\nresource = \"{}\"\nupstream = \"app\"\n",
        spillway_lab::RESOURCE
    );
    let resource = spillway_lab::RESOURCE;
    let rules = match strategy {
        Strategy::StaticQps => format!(
            "[[flow]]\nid = \"capacity-qps\"\nresource = \"{resource}\"\ncount = {}\n",
            capacity.round()
        ),
        Strategy::StaticConcurrency => format!(
            "[[flow]]\nid = \"static-concurrency\"\nresource = \"{resource}\"\ngrade = \"concurrency\"\ncount = {}\n",
            lab.static_limit()
        ),
        Strategy::SentinelSystem => format!(
            "[[system]]\nid = \"sentinel-load\"\nhighest_system_load = {}\n",
            sentinel_threshold()
        ),
        Strategy::Bbr => "[[system]]\nid = \"bbr\"\nhighest_system_load = 0.0\n".to_string(),
        Strategy::BbrBucketAverage => "[[system]]\nid = \"bbr\"\nhighest_system_load = 0.0\n\
             min_rt = { type = \"bucket_average\", window = \"10s\" }\n"
            .to_string(),
        Strategy::None => String::new(),
        // The simulated lab's rule, written as the file's `[[adaptive]]`.
        _ => match strategy.adaptive_rule(lab) {
            Some(rule) => adaptive_toml(rule)?,
            None => String::new(),
        },
    };
    text.push('\n');
    text.push_str(&rules);
    if strategy == Strategy::Classes {
        text.push_str(&format!(
            "\n[criticality]\nheader = \"{CLASS_HEADER}\"\n\n[tenant]\nkey = \"header:{TENANT_HEADER}\"\n\n\
             [deadline]\nheader = \"{DEADLINE_MS_HEADER}\"\n"
        ));
    }
    Ok(text)
}

/// What one run through the proxy saw.
struct Ran {
    lab: LabParams,
    attempts: Vec<ClaimedAttempt>,
    samples: Vec<Tick>,
    end: u64,
    skipped: u64,
    /// Work the upstream started after its client gave up.
    late: u64,
}

impl Ran {
    fn summarize(&self, strategy: Strategy, scenario: Scenario) -> RunResult {
        let attempts: Vec<AttemptRecord> = self.attempts.iter().map(|a| a.record).collect();
        self.record(strategy, scenario, &attempts).summarize()
    }

    /// What the run saw, with `attempts` its attempts' records.
    fn record<'a>(
        &'a self,
        strategy: Strategy,
        scenario: Scenario,
        attempts: &'a [AttemptRecord],
    ) -> RunRecord<'a> {
        RunRecord {
            params: &self.lab,
            scenario,
            strategy,
            attempts,
            ticks: &self.samples,
            end: self.end,
            skipped: self.skipped,
        }
    }
}

/// The loopback parameters for the service of `params` (its workers and service time, an
/// upstream seeded with its seed) with the clients of `base` and Poisson arrivals, at the
/// capacity measured first; for runs of `strategies`, each of which the binary must express.
///
/// # Errors
///
/// A strategy the binary cannot express (the static split), too many workers, or a loopback
/// port that cannot be bound.
pub async fn on_measured_service(
    params: &LabParams,
    base: &LoopbackParams,
    strategies: &[Strategy],
) -> Result<LoopbackParams, Box<dyn std::error::Error + Send + Sync>> {
    if let Some(strategy) = strategies.iter().find(|strategy| !strategy.in_binary()) {
        return Err(Box::new(spillway_lab::LabError::new(
            "strategies",
            format!("{strategy} cannot run on loopback: the binary cannot express it"),
        )));
    }
    let upstream = UpstreamShape {
        workers: usize::try_from(params.workers)?,
        service: params.service_time,
        seed: params.seed,
        flaky: false,
    };
    let capacity = measure_capacity(upstream).await?;
    Ok(LoopbackParams {
        upstream,
        capacity: Some(capacity),
        spacing: Spacing::Poisson,
        ..base.clone()
    })
}

/// Runs `strategy` in `scenario` against a fresh upstream and proxy.
///
/// # Errors
///
/// If a loopback port cannot be bound or the configuration is refused.
pub async fn run_point(
    params: &LoopbackParams,
    strategy: Strategy,
    scenario: Scenario,
) -> Result<RunResult, Box<dyn std::error::Error + Send + Sync>> {
    let ran = run(params, strategy, scenario).await?;
    Ok(ran.summarize(strategy, scenario))
}

/// Runs `strategy` in `scenario` against a fresh upstream and proxy, and keeps the run's time
/// series whatever its scenario (as `spillway_lab::simulate_traced` does), its limit read from
/// the proxy every 100 ms.
///
/// # Errors
///
/// As [`run_point`].
pub async fn trace_point(
    params: &LoopbackParams,
    strategy: Strategy,
    scenario: Scenario,
) -> Result<Traced, Box<dyn std::error::Error + Send + Sync>> {
    let ran = run(params, strategy, scenario).await?;
    let attempts: Vec<AttemptRecord> = ran.attempts.iter().map(|a| a.record).collect();
    Ok(ran.record(strategy, scenario, &attempts).traced())
}

/// Runs `strategy` in a `scenario` whose requests claim something ([`Scenario::Mix`]) against
/// a fresh upstream and proxy, and measures each group of its requests apart.
///
/// # Errors
///
/// As [`run_point`], or if the scenario has no mix.
pub async fn run_mix_point(
    params: &LoopbackParams,
    strategy: Strategy,
    scenario: Scenario,
) -> Result<MixResult, Box<dyn std::error::Error + Send + Sync>> {
    let mix = scenario
        .mix()
        .ok_or_else(|| format!("{scenario} has no mix of claims"))?;
    let ran = run(params, strategy, scenario).await?;
    let groups = group_results(mix, &ran.lab, scenario, &ran.attempts, ran.end);
    Ok(MixResult {
        run: ran.summarize(strategy, scenario),
        groups,
        wasted: ran.late,
        baseline_rtt_ms: None,
    })
}

/// Runs `strategy` in `scenario` against a fresh upstream and proxy: what it saw.
async fn run(
    params: &LoopbackParams,
    strategy: Strategy,
    scenario: Scenario,
) -> Result<Ran, Box<dyn std::error::Error + Send + Sync>> {
    scenario.validate()?;
    let mix = scenario.mix();
    // A scenario with deadlines: its clients give up at their deadline.
    let params = &LoopbackParams {
        client_timeout: mix.and_then(Mix::deadline).unwrap_or(params.client_timeout),
        ..params.clone()
    };
    let lab = LabParams {
        adaptive_queue: mix
            .map(spillway_lab::mix_report::queue_for)
            .or(params.adaptive_queue),
        ..params.lab_params()
    };
    // The simulated twin's requests (checked before anything starts): the same times, and the
    // same work less what the upstream adds to each (the timer's overhead: the twin's mean,
    // what a request holds a worker for as measured, less the upstream's nominal mean), so
    // that each request holds a worker about as long as its twin does. (Scaling each by the
    // ratio of the means instead kept the mean but not the spread: a real exponential service
    // then varied less than its twin, and queued less near capacity.)
    let arrivals = Arrivals::new(&lab, scenario, params.spacing)?;
    let overhead = lab
        .service_time
        .mean()
        .saturating_sub(params.upstream.service.mean());
    let upstream = Arc::new(Upstream::start(params.upstream).await?);
    let config = crate::checked::parse(
        &config_text(strategy, &lab, upstream.addr(), params.capacity())?,
        "lab.toml",
    )?;
    // Sentinel's strategy reads the host's load1; the BBR-only ones get a probe whose load (1)
    // always opens their gate (threshold 0), as in the simulated lab.
    let spillway = match strategy {
        Strategy::Bbr | Strategy::BbrBucketAverage => {
            let probe = ManualProbe::new();
            probe.set_load(1.0);
            Spillway::builder().system_probe(probe).build()
        }
        _ => Spillway::new(),
    };
    let server = Server::bind(&config, spillway.clone()).await?;
    let proxy = server.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stop_rx.await;
    }));

    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(4096)
        .build_http();
    let uri: http::Uri = format!("http://{proxy}/work").parse()?;
    let start = Instant::now();
    let arrivals_end = scenario.arrivals_end(&lab);
    let attempts = Arc::new(Mutex::new(Vec::<ClaimedAttempt>::new()));
    let outstanding = Arc::new(AtomicUsize::new(0));
    let skipped = Arc::new(AtomicU64::new(0));

    // The scenario's slowdown, and the samples of the time series.
    let ticks = {
        let spillway = spillway.clone();
        let upstream = upstream.clone();
        let lab = lab.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut interval = tokio::time::interval_at(start, TICK / 10);
            let mut n = 0u64;
            loop {
                interval.tick().await;
                let at = start.elapsed();
                upstream.set_slowdown(scenario.slowdown_at(at));
                if n % 10 == 0 {
                    let gate_open = LinuxProbe::global().load() > sentinel_threshold();
                    let limit = strategy.admitted_limit(&lab, &spillway, gate_open);
                    let in_flight = spillway.inbound_node().concurrency().max(0) as u64;
                    samples.push(Tick {
                        at: 100_000_000 * (n / 10),
                        in_flight,
                        limit,
                        rtt: strategy.rtt_estimates(&spillway),
                    });
                }
                n += 1;
                if at > arrivals_end {
                    return samples;
                }
            }
        })
    };

    // The generator: each request on its own task, sent at its time whatever became of those
    // before it.
    let mut clients = tokio::task::JoinSet::new();
    for (index, arrival) in (0u64..).zip(arrivals) {
        let (next, work) = (arrival.at, arrival.work.saturating_sub(overhead));
        tokio::time::sleep_until(start + next).await;
        if outstanding.load(Ordering::Relaxed) >= params.max_outstanding {
            skipped.fetch_add(1, Ordering::Relaxed);
        } else {
            outstanding.fetch_add(1, Ordering::Relaxed);
            let request = Request {
                client: client.clone(),
                uri: uri.clone(),
                params: params.clone(),
                start,
                intended: next,
                work,
                index,
                claim: mix.map(|_| arrival.claim),
                deadline_claimed: mix.and_then(Mix::deadline).is_some(),
                upstream_started: upstream.started(),
                attempts: attempts.clone(),
            };
            let outstanding = outstanding.clone();
            clients.spawn(async move {
                request.run().await;
                outstanding.fetch_sub(1, Ordering::Relaxed);
            });
        }
        // Reap finished clients now and then, so that the set stays small.
        while clients.try_join_next().is_some() {}
    }
    while clients.join_next().await.is_some() {}
    let samples = ticks.await?;
    // Work still waiting at the upstream starts after its client left: counted once it has
    // (a second at most; a worker is freed every few milliseconds).
    let settled = Instant::now() + Duration::from_secs(1);
    while upstream.busy_workers() > 0 && Instant::now() < settled {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let late = upstream.late_starts();
    // Idle pooled connections would hold the proxy's graceful drain open.
    drop(client);
    let _ = stop_tx.send(());
    drop(upstream);
    let _ = tokio::time::timeout(Duration::from_secs(5), serving).await;

    let mut attempts = attempts.lock().map(|a| a.clone()).unwrap_or_default();
    // In the order they were sent, as the simulation keeps them (a request's first attempt
    // before its retries).
    attempts.sort_by_key(|a| (a.record.sent, !a.record.first));
    Ok(Ran {
        lab,
        attempts,
        samples,
        end: nanos(start.elapsed()),
        skipped: skipped.load(Ordering::Relaxed),
        late,
    })
}

/// One client's request: its attempts, with time-outs and retries.
struct Request {
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    uri: http::Uri,
    params: LoopbackParams,
    start: Instant,
    intended: Duration,
    /// The work the request drew, the same on every attempt.
    work: Duration,
    index: u64,
    /// What it claims, in a scenario with a mix.
    claim: Option<Claim>,
    /// Whether it tells the proxy its deadline (the scenario has deadlines).
    deadline_claimed: bool,
    /// What the upstream counts [`DEADLINE_HEADER`] from.
    upstream_started: Instant,
    attempts: Arc<Mutex<Vec<ClaimedAttempt>>>,
}

impl Request {
    async fn run(self) {
        let mut sent = self.intended;
        for attempt in 0..=self.params.retries {
            let deadline = Instant::now() + self.params.client_timeout;
            let outcome = tokio::time::timeout(self.params.client_timeout, async {
                let mut request = http::Request::get(self.uri.clone())
                    .header(WORK_HEADER, self.work.as_nanos().to_string());
                if let Some(claim) = self.claim {
                    let by = deadline.saturating_duration_since(self.upstream_started);
                    request = request
                        .header(CLASS_HEADER, claim.class.as_str())
                        .header(TENANT_HEADER, claim.tenant.to_string())
                        .header(DEADLINE_HEADER, by.as_nanos().to_string());
                }
                // A deadline the proxy reads only where the scenario has one, as the
                // simulation's entries claim one.
                if self.deadline_claimed {
                    let millis = self.params.client_timeout.as_millis().to_string();
                    request = request.header(DEADLINE_MS_HEADER, millis);
                }
                let request = request.body(Empty::new());
                let Ok(request) = request else {
                    return Outcome::Failed;
                };
                match self.client.request(request).await {
                    Ok(response) => {
                        let status = response.status();
                        let body = response.into_body().collect().await;
                        match (status.as_u16(), body) {
                            (200..=299, Ok(_)) => Outcome::Answered,
                            (429, _) => Outcome::Refused,
                            // The proxy's refusal of a request with no time left.
                            (504, _) if self.deadline_claimed => Outcome::Refused,
                            _ => Outcome::Failed,
                        }
                    }
                    Err(_) => Outcome::Failed,
                }
            })
            .await
            .unwrap_or(Outcome::TimedOut);
            let ended = self.start.elapsed();
            if let Ok(mut attempts) = self.attempts.lock() {
                attempts.push(ClaimedAttempt {
                    record: AttemptRecord {
                        sent: nanos(sent),
                        first: attempt == 0,
                        outcome: Some(outcome),
                        admitted: outcome != Outcome::Refused,
                        ended: Some(nanos(ended)),
                    },
                    request: usize::try_from(self.index).unwrap_or(usize::MAX),
                    claim: self.claim.unwrap_or_default(),
                });
            }
            if outcome == Outcome::Answered || attempt == self.params.retries {
                return;
            }
            // Jitter from a low-discrepancy sequence: deterministic, evenly spread in [0.5, 1].
            let spread = ((self.index * 11 + u64::from(attempt)) as f64 * 0.618_033_988_7).fract();
            let wait = self
                .params
                .backoff
                .mul_f64(f64::from(1u32 << attempt.min(20)) * (0.5 + spread / 2.0));
            tokio::time::sleep(wait).await;
            sent = self.start.elapsed();
        }
    }
}

/// How many requests a second `shape`'s upstream completes when it always has work: its workers
/// over the time each request holds one, the distribution's mean plus the timer's
/// [overhead](Upstream::timer_overhead) as measured with 4 clients per worker in closed loops,
/// directly (no proxy), for 2.5 s.
///
/// The mean is the distribution's, not the mean of the times drawn in those 2.5 s: with a
/// random service a few hundred draws would set the capacity several percent off (a 1-worker
/// exponential service of 10 ms draws about 250, whose mean is off by 6% one time in three),
/// while the timer's overhead varies little from one request to the next.
///
/// # Errors
///
/// If it cannot bind a loopback port, or the upstream completed no request in 2.5 s.
pub async fn measure_capacity(shape: UpstreamShape) -> std::io::Result<f64> {
    let upstream = Upstream::start(shape).await?;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let uri: http::Uri = format!("http://{}/", upstream.addr())
        .parse()
        .map_err(std::io::Error::other)?;
    let until = Instant::now() + Duration::from_millis(2500);
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..4 * shape.workers {
        let (client, uri) = (client.clone(), uri.clone());
        loops.spawn(async move {
            while Instant::now() < until {
                if let Ok(response) = client.get(uri.clone()).await {
                    let _ = response.into_body().collect().await;
                }
            }
        });
    }
    while loops.join_next().await.is_some() {}
    let overhead = upstream
        .timer_overhead()
        .ok_or_else(|| std::io::Error::other("the upstream completed no request in 2.5 s"))?;
    Ok(shape.workers as f64 / (shape.service.mean() + overhead).as_secs_f64())
}

/// Runs every strategy in every scenario, and the unprotected upstream at 0.5x for the unloaded
/// p99.
///
/// # Errors
///
/// As [`run_point`].
pub async fn run_lab(
    params: &LoopbackParams,
    strategies: &[Strategy],
    scenarios: &[Scenario],
) -> Result<LabReport, Box<dyn std::error::Error + Send + Sync>> {
    let mut params = params.clone();
    if params.capacity.is_none() {
        let capacity = measure_capacity(params.upstream).await?;
        eprintln!(
            "loopback lab: the upstream completes {capacity:.0} requests/s ({:.0} nominal)",
            params.upstream.capacity()
        );
        params.capacity = Some(capacity);
    }
    let params = &params;
    let unloaded = run_point(params, Strategy::None, Scenario::Sweep { load: 0.5 }).await?;
    let mut runs = Vec::new();
    // Only what the binary's configuration file can express runs through the proxy.
    for &strategy in strategies.iter().filter(|s| s.in_binary()) {
        for &scenario in scenarios {
            let started = Instant::now();
            let run = run_point(params, strategy, scenario).await?;
            eprintln!(
                "loopback lab: {strategy} {scenario}: goodput {:.3}, p99 {:.1} ms ({:.1} s)",
                run.goodput,
                run.p99_ms,
                started.elapsed().as_secs_f64()
            );
            runs.push(run);
        }
    }
    Ok(LabReport {
        params: params.lab_params(),
        strategies: strategies.to_vec(),
        runs,
        unloaded_p99_ms: unloaded.p99_ms,
    })
}

/// Runs the scenarios with claims through the proxy, each at
/// [`MIX_LOADS`](spillway_lab::mix_report::MIX_LOADS) for the strategies the binary can express
/// (no classes and classes: a static split is the simulated lab's only), and the unprotected
/// upstream at 0.5x for the unloaded p99.
///
/// # Errors
///
/// As [`run_point`].
pub async fn run_mix_lab(
    params: &LoopbackParams,
) -> Result<spillway_lab::mix_report::MixReport, Box<dyn std::error::Error + Send + Sync>> {
    let mut params = params.clone();
    if params.capacity.is_none() {
        params.capacity = Some(measure_capacity(params.upstream).await?);
    }
    let params = &params;
    let unloaded = run_point(params, Strategy::None, Scenario::Sweep { load: 0.5 }).await?;
    let mut runs = Vec::new();
    for mix in Mix::ALL {
        for load in spillway_lab::mix_report::MIX_LOADS {
            for strategy in Strategy::CLASSES.into_iter().filter(Strategy::in_binary) {
                let scenario = Scenario::Mix { load, mix };
                let result = run_mix_point(params, strategy, scenario).await?;
                eprintln!(
                    "loopback lab: {strategy} {scenario}: goodput {:.3}, p99 {:.1} ms",
                    result.run.goodput, result.run.p99_ms
                );
                runs.push(spillway_lab::mix_report::MixRun {
                    scenario: mix.name(),
                    load,
                    strategy: strategy.name(),
                    result,
                    meets_target: None,
                });
            }
        }
    }
    Ok(spillway_lab::mix_report::MixReport::judged(
        unloaded.p99_ms,
        runs,
    ))
}

/// A duration in ns, saturating.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway::adaptive::BufferScaling;

    /// The simulated twin of a measured upstream keeps its service's shape, with the mean each
    /// request held a worker for as measured.
    #[test]
    fn the_simulated_twin_keeps_the_upstream_s_shape_at_the_measured_mean() {
        let params = LoopbackParams {
            upstream: UpstreamShape {
                workers: 4,
                service: ServiceTime::Bimodal {
                    mean: Duration::from_millis(10),
                    slow_share: 0.1,
                    slow_factor: 10.0,
                },
                seed: 3,
                flaky: false,
            },
            // 4 workers measured at 320 a second: 12.5 ms a request, not the nominal 10.
            capacity: Some(320.0),
            ..LoopbackParams::default()
        };
        let twin = params.lab_params();
        assert_eq!(twin.workers, 4);
        assert_eq!(
            twin.service_time,
            ServiceTime::Bimodal {
                mean: Duration::from_micros(12_500),
                slow_share: 0.1,
                slow_factor: 10.0,
            }
        );
        assert_eq!(
            LoopbackParams::default().lab_params().service_time.label(),
            "fixed, 10.00ms"
        );
        // The twin of a trace or a long run: exact, unless a spread is given for it.
        assert_eq!(twin.service_spread, 0.0);
        let spread = LabParams {
            service_spread: 0.02,
            ..LabParams::default()
        };
        let varied = params.twin(&spread);
        assert_eq!(varied.service_spread, 0.02);
        assert_eq!(
            LabParams {
                service_spread: 0.0,
                ..varied
            },
            twin
        );
    }

    /// An open start, a spread buffer, Envoy's fixed windows and a queue given to the loopback
    /// lab reach the proxy's file and the simulated twin.
    #[test]
    fn the_open_start_and_the_queue_reach_the_proxy_and_the_twin() {
        let queue = AdaptiveQueue {
            capacity: 1000,
            order: spillway::adaptive::QueueOrder::Adaptive,
            timeout: Duration::from_millis(190),
        };
        let params = LoopbackParams {
            envoy: EnvoyGradientConfig {
                start_limit: 50,
                buffer_scaling: BufferScaling::Spread,
                window_min_rtts: 0.0,
                ..Default::default()
            },
            adaptive_queue: Some(queue),
            ..LoopbackParams::default()
        };
        let twin = params.lab_params();
        assert_eq!(twin.envoy, params.envoy);
        assert_eq!(twin.adaptive_queue, Some(queue));
        let upstream = "127.0.0.1:9".parse().unwrap();
        let text = config_text(Strategy::EnvoyGradient, &twin, upstream, 350.0).unwrap();
        let parsed = crate::checked::parse(&text, "lab.toml").unwrap();
        let rule = parsed.adaptive[0].get_ref().clone();
        match rule.algorithm {
            spillway::adaptive::AdaptiveAlgorithm::EnvoyGradient(config) => {
                assert_eq!(config, params.envoy);
            }
            other => panic!("not Envoy's controller: {other:?}"),
        }
        assert_eq!(rule.queue, Some(queue));
        assert_eq!(Some(rule), Strategy::EnvoyGradient.adaptive_rule(&twin));
    }

    /// Each strategy's file parses, and an adaptive strategy's holds the simulated lab's rule.
    #[test]
    fn every_strategy_s_file_parses_with_the_simulated_lab_s_rules() {
        let params = LoopbackParams::default();
        let lab = params.lab_params();
        let upstream = "127.0.0.1:9".parse().unwrap();
        for strategy in Strategy::ALL {
            let text = config_text(strategy, &lab, upstream, 350.0).unwrap();
            let parsed = crate::checked::parse(&text, "lab.toml").unwrap();
            let adaptive: Vec<_> = parsed
                .adaptive
                .iter()
                .map(|r| r.get_ref().clone())
                .collect();
            assert_eq!(
                adaptive,
                strategy.adaptive_rule(&lab).into_iter().collect::<Vec<_>>()
            );
        }
    }
}
