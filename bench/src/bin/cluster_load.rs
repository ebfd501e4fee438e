//! Cluster limits on Redis, measured on this machine against a real `redis-server` (started
//! here, on a free loopback port): the time a check adds (strict, leased, and a one-call
//! fixed window as Envoy's rate-limit service does it), the rate admitted against the limit for
//! 1, 2 and 3 processes, and the fallback and recovery times when Redis is killed and
//! restarted. Prints the `## Cluster limits on Redis` section of docs/benchmarks.md.
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin cluster_load > bench/cluster.md
//! ```

#[path = "../../../crates/spillway-redis/tests/common/mod.rs"]
mod redis_server;

use hdrhistogram::Histogram;
use redis::aio::ConnectionManager;
use redis_server::RedisServer;
use spillway_redis::{LeaseMode, LeaseSettings, LeasedWindow, SharedWindow};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Checks timed per way, after as many again to warm up.
const TIMED_CHECKS: u64 = 20_000;
/// The shared limit of the rate runs, a second.
const LIMIT: f64 = 1000.0;
/// Offered, a second, in all: 3x the limit.
const OFFERED: u64 = 3000;
/// Seconds per rate run; the first is not counted.
const SECONDS: u64 = 6;

/// One way to check a shared limit.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    Strict,
    Leased,
    /// A fixed one-second window: INCRBY and EXPIRE pipelined per request, every request
    /// counted (Envoy's rate-limit service's design).
    FixedWindow,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Strict => "strict (one script call)",
            Way::Leased => "leased (local, batches refilled in a task)",
            Way::FixedWindow => "fixed window, one call (Envoy's design)",
        }
    }
}

/// A process of the fleet: its connection and, leased, its lease and refilling task.
struct Process {
    way: Way,
    conn: ConnectionManager,
    window: SharedWindow,
    lease: Option<Arc<LeasedWindow>>,
    driver: Option<tokio::task::JoinHandle<()>>,
    fixed_key: String,
    limit: f64,
}

impl Process {
    async fn new(redis: &RedisServer, way: Way, name: &str, limit: f64) -> Self {
        let conn = redis.connect().await;
        let window = SharedWindow::per_second(name, limit).unwrap();
        let (lease, driver) = if way == Way::Leased {
            let clock = Arc::new(spillway::SystemClock::new());
            let lease = Arc::new(
                LeasedWindow::with_settings(window.clone(), clock, LeaseSettings::default())
                    .unwrap(),
            );
            let client = redis::Client::open(redis.url()).unwrap();
            let driven = lease.clone();
            let driver =
                tokio::spawn(async move { driven.connect_and_drive(client, |_| {}).await });
            (Some(lease), Some(driver))
        } else {
            (None, None)
        };
        Self {
            way,
            conn,
            window,
            lease,
            driver,
            fixed_key: format!("fixed:{{{name}}}"),
            limit,
        }
    }

    /// One request's check.
    async fn check(&mut self) -> bool {
        match self.way {
            Way::Strict => self
                .window
                .try_acquire(&mut self.conn, 1)
                .await
                .is_ok_and(|checked| checked.admitted),
            Way::Leased => self.lease.as_ref().unwrap().try_acquire(1),
            Way::FixedWindow => {
                let second = wall_seconds();
                let key = format!("{}:{second}", self.fixed_key);
                let counted: Result<(u64, bool), _> = redis::pipe()
                    .cmd("INCRBY")
                    .arg(&key)
                    .arg(1)
                    .cmd("EXPIRE")
                    .arg(&key)
                    .arg(2)
                    .query_async(&mut self.conn)
                    .await;
                counted.is_ok_and(|(count, _)| count as f64 <= self.limit)
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(driver) = &self.driver {
            driver.abort();
        }
    }
}

/// The wall clock's second (the fixed window's key, as Envoy's service keys it).
fn wall_seconds() -> u64 {
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut redis = RedisServer::start().await;
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut redis.connect().await)
        .await
        .unwrap();
    let version = version
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();

    let mut out = Vec::new();
    out.push("## Cluster limits on Redis".to_owned());
    out.push(String::new());
    out.push(format!(
        "Generated by `cargo run --release --manifest-path bench/Cargo.toml --bin cluster_load` against Redis {version} on loopback, started by the harness; the harness, Redis and the processes it simulates (tasks with a connection each) share this machine's 2 cores. Semantics: [cluster.md](cluster.md)."
    ));
    out.push(String::new());

    // 1. The time a check adds.
    out.push(format!("Time a check adds, one process, {TIMED_CHECKS} checks in a row after as many to warm up, against a limit no check reaches (a leased check still refuses when its batch is spent before the next arrives; it takes the same time either way):"));
    out.push(String::new());
    out.push("| check | p50 | p99 |".to_owned());
    out.push("|---|---:|---:|".to_owned());
    for way in [Way::Strict, Way::Leased, Way::FixedWindow] {
        let mut process = Process::new(&redis, way, &format!("latency-{way:?}"), 1e12).await;
        if way == Way::Leased {
            // Its first batch in.
            while !process.check().await {
                tokio::task::yield_now().await;
            }
        }
        let mut histogram = Histogram::<u64>::new(3).unwrap();
        for round in 0..2 * TIMED_CHECKS {
            let started = Instant::now();
            let admitted = process.check().await;
            let nanos = started.elapsed().as_nanos() as u64;
            if round >= TIMED_CHECKS {
                assert!(admitted || way == Way::Leased);
                histogram.record(nanos.max(1)).unwrap();
            }
        }
        out.push(format!(
            "| {} | {} | {} |",
            way.name(),
            micros(histogram.value_at_quantile(0.5)),
            micros(histogram.value_at_quantile(0.99))
        ));
    }
    out.push(String::new());

    // 2. Admitted against the limit.
    out.push(format!(
        "Admitted against a limit of {LIMIT:.0}/s, offered {OFFERED}/s in all (split evenly between the processes, each at a fixed rate) for {SECONDS} s; the first second not counted. A second's count is of the requests admitted in that second from the start, which is not aligned to the windows' buckets (nor to the fixed window's wall-clock seconds), so one second can hold a little more than the limit:"
    ));
    out.push(String::new());
    out.push("| check | processes | mean admitted / limit | highest second / limit | round trips to Redis per request |".to_owned());
    out.push("|---|---:|---:|---:|---:|".to_owned());
    for way in [Way::Strict, Way::Leased, Way::FixedWindow] {
        for processes in 1..=3u64 {
            let name = format!("rate-{way:?}-{processes}");
            let (seconds, calls) = rate_run(&mut redis, way, &name, processes).await;
            let counted = &seconds[1..];
            let mean = counted.iter().sum::<u64>() as f64 / counted.len() as f64 / LIMIT;
            let highest = *counted.iter().max().unwrap() as f64 / LIMIT;
            let requests = OFFERED * SECONDS;
            out.push(format!(
                "| {} | {processes} | {mean:.3} | {highest:.3} | {:.3} |",
                way.name(),
                calls as f64 / requests as f64
            ));
        }
    }
    out.push(String::new());

    // 3. Redis killed and restarted under load.
    let (fallback, recovery, share) = outage(&mut redis).await;
    out.push(format!(
        "Redis killed (SIGKILL) under load and restarted {} s later, 3 leased processes offered {:.0}/s each against {LIMIT:.0}/s: every process was in its fallback {} ms after the kill at the latest (its next refill failing), admitted {share} a second on average over {} s of the outage (its fair share: {:.0}; a span not aligned to the local window's buckets can hold up to 1.25x), and was back on the shared limit {} ms after the restart at the latest (a new connection tried every 500 ms, and a refill as soon as one is made). No request failed: a check answers yes or no.",
        OUTAGE.as_secs(),
        OFFERED as f64 / 3.0,
        fallback.as_millis(),
        OUTAGE_COUNTED.as_secs(),
        LIMIT / 3.0,
        recovery.as_millis()
    ));
    println!("{}", out.join("\n"));
}

fn micros(nanos: u64) -> String {
    if nanos < 10_000 {
        format!("{:.2} µs", nanos as f64 / 1000.0)
    } else {
        format!("{:.0} µs", nanos as f64 / 1000.0)
    }
}

/// `processes` processes checking `way` at OFFERED / processes a second each for SECONDS:
/// the admitted count of each wall-clock second from the start, and the calls to Redis.
async fn rate_run(
    redis: &mut RedisServer,
    way: Way,
    name: &str,
    processes: u64,
) -> (Vec<u64>, u64) {
    let seconds: Arc<Vec<AtomicU64>> = Arc::new((0..SECONDS).map(|_| AtomicU64::new(0)).collect());
    let calls_before = redis_calls(redis).await;
    let start = Instant::now() + Duration::from_millis(200);
    let mut tasks = Vec::new();
    for _ in 0..processes {
        let mut process = Process::new(redis, way, name, LIMIT).await;
        let seconds = seconds.clone();
        tasks.push(tokio::spawn(async move {
            let every = Duration::from_nanos(1_000_000_000 * processes / OFFERED);
            let mut ticks = tokio::time::interval_at(start, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let end = start + Duration::from_secs(SECONDS);
            loop {
                let at = ticks.tick().await;
                if at >= end {
                    break;
                }
                if process.check().await {
                    let second = (at - start).as_secs() as usize;
                    seconds[second].fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let calls = redis_calls(redis).await - calls_before;
    (
        seconds.iter().map(|s| s.load(Ordering::Relaxed)).collect(),
        calls,
    )
}

/// Round trips to Redis so far: the scripts run (`EVALSHA`, `EVAL`) and the fixed window's
/// pipelines (one `INCRBY` each), from INFO's command statistics.
async fn redis_calls(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis.connect().await)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (command, stats) = line.split_once(':')?;
            if !matches!(
                command,
                "cmdstat_evalsha" | "cmdstat_eval" | "cmdstat_incrby"
            ) {
                return None;
            }
            stats
                .split(',')
                .find_map(|field| field.strip_prefix("calls=")?.parse::<u64>().ok())
        })
        .sum()
}

/// How long Redis stays down, and how long of that the admissions are counted.
const OUTAGE: Duration = Duration::from_secs(5);
const OUTAGE_COUNTED: Duration = Duration::from_secs(4);

/// Three leased processes under load; Redis killed at 2 s and restarted 5 s later: the latest
/// any process switched to its fallback after the kill, the latest any switched back after the
/// restart, and the mean admitted a second per process during the outage.
async fn outage(redis: &mut RedisServer) -> (Duration, Duration, u64) {
    let mut leases = Vec::new();
    let mut load = Vec::new();
    let admitted_in_outage = Arc::new(AtomicU64::new(0));
    let in_outage = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for _ in 0..3 {
        let mut process = Process::new(redis, Way::Leased, "outage", LIMIT).await;
        leases.push(process.lease.clone().unwrap());
        let (admitted, counting) = (admitted_in_outage.clone(), in_outage.clone());
        load.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_nanos(3_000_000_000 / OFFERED));
            loop {
                ticks.tick().await;
                if process.check().await && counting.load(Ordering::Relaxed) {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.kill().await;
    let killed = Instant::now();
    let fallback = until_all(&leases, LeaseMode::Fallback).await - killed;
    // The outage's admissions, counted over 2 whole seconds once all are in the fallback.
    in_outage.store(true, Ordering::Relaxed);
    tokio::time::sleep(OUTAGE_COUNTED).await;
    in_outage.store(false, Ordering::Relaxed);
    let share = admitted_in_outage.load(Ordering::Relaxed) / 3 / OUTAGE_COUNTED.as_secs();
    tokio::time::sleep((killed + OUTAGE).saturating_duration_since(Instant::now())).await;
    redis.restart().await;
    let restarted = Instant::now();
    let recovery = until_all(&leases, LeaseMode::Global).await - restarted;
    for task in load {
        task.abort();
    }
    (fallback, recovery, share)
}

/// When every lease is in `mode` (looked at every millisecond; at most 30 s).
async fn until_all(leases: &[Arc<LeasedWindow>], mode: LeaseMode) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(30);
    while leases.iter().any(|lease| lease.mode() != mode) {
        assert!(Instant::now() < deadline, "not all in {mode:?} after 30 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Instant::now()
}
