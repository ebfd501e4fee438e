//! Cluster rules end to end on a fleet: three real `spillway serve` processes sharing one real
//! `redis-server`. Low traffic on every kind of rule is never refused; a burst of first requests
//! at fresh processes stays within the limit; Redis killed and restarted under load keeps the
//! bound over the window's aligned buckets; a killed process's places go to the others within
//! the heartbeat TTL. Each test prints one line of the figures it measured (run with
//! `--nocapture`). Waits are on events (a log line, the admin API's status, the upstream seeing
//! a request), each within a deadline. The tests run one at a time: each measures real time on
//! a machine of two cores.

#![cfg(unix)]

use support::child;
#[path = "../../spillway-redis/tests/common/mod.rs"]
mod redis_server;
mod support;

use bytes::Bytes;
use child::{free_port, serve, wait_for_line, DEADLINE};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis_server::RedisServer;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The tests of this file run one at a time (see the top comment).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The limit of the `qps` rules of the burst and the kill tests: passes a second, fleet-wide.
const LIMIT: usize = 300;

/// The leased check's bound over two consecutive buckets: the limit plus `2 x max_batch`
/// (the default, 10) per process, for three processes.
const LEASED_BOUND: usize = LIMIT + 2 * MAX_BATCH as usize * 3;

/// The most passes a lease takes at once (the default `max_batch`).
const MAX_BATCH: u64 = 10;

/// A bucket of the `qps` rules' window (`interval = "1s"`, `buckets = 2`), in ms: Redis's clock,
/// which is this machine's, aligns buckets on its multiples of Unix time.
const BUCKET_MS: u64 = 500;

/// The window of the `qps` rules, in ms.
const WINDOW_MS: u64 = 1_000;

/// How often the admin API's status is read while waiting for a change.
const POLL: Duration = Duration::from_millis(20);

/// A leased `qps` rule of 300 a second over a 1 s window of two buckets.
const LEASED_QPS: &str = "limit = 300\ninterval = \"1s\"\nbuckets = 2";

/// A strict `qps` rule of 300 a second (one Redis call a request).
const STRICT_QPS: &str = "kind = \"qps\"\nmode = \"strict\"\nlimit = 300";

/// A leased token bucket of 300 permits a second, storing one second of them (Guava's burst).
const BUCKET: &str = "kind = \"bucket\"\nlimit = 300\nburst = 1";

/// A leased concurrency rule of 30 requests in flight.
const PLACES: &str = "kind = \"concurrency\"\nlimit = 30";

/// The low-traffic test's routes: name, its rule's fields, requests a second to each process.
const LOW_TRAFFIC: [(&str, &str, u64); 8] = [
    ("qps1", LEASED_QPS, 1),
    ("qps4", LEASED_QPS, 4),
    ("bucket1", BUCKET, 1),
    ("bucket4", BUCKET, 4),
    ("conc1", PLACES, 1),
    ("conc4", PLACES, 4),
    ("strict1", STRICT_QPS, 1),
    ("strict4", STRICT_QPS, 4),
];

/// The test's HTTP/1.1 client.
type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// When a request was in flight, in Unix ms: Redis decided it in between, on this machine's
/// clock, so a request wholly inside a span was certainly counted in that span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Flight {
    /// When the client sent it.
    sent: u64,
    /// When the client had its answer.
    answered: u64,
}

/// A request's answer: when it was in flight, and its status or why there was none.
type Answer = (Flight, Result<StatusCode, String>);

/// Takes the one-test-at-a-time lock, and lets this process open as many files as its hard
/// limit allows (the burst opens 1,200 connections, and the upstream's side of them is here).
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    let _ = spillway_server::descriptors::raise_limit();
    ONE_AT_A_TIME.lock().await
}

/// Milliseconds of Unix time now: the clock Redis's `TIME` reads on this machine, which
/// aligns the windows' buckets.
#[allow(clippy::disallowed_methods)]
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// An upstream answering `ok` at once, but holding a request with an `x-hold` header until the
/// gate is set to `true`; each held request's arrival is sent on the channel first.
async fn gated_upstream() -> (SocketAddr, watch::Sender<bool>, mpsc::UnboundedReceiver<()>) {
    let (gate, opened) = watch::channel(false);
    let (arrived, arrivals) = mpsc::unbounded_channel();
    let addr = support::upstream(move |request: Request<Incoming>| {
        let (mut opened, arrived) = (opened.clone(), arrived.clone());
        async move {
            if request.headers().contains_key("x-hold") {
                let _ = arrived.send(());
                let _ = opened.wait_for(|open| *open).await;
            }
            Response::new(Full::new(Bytes::from("ok")))
        }
    })
    .await;
    (addr, gate, arrivals)
}

/// The `[cluster]` section on `redis`, with `extra` lines.
fn cluster(redis: &RedisServer, extra: &str) -> String {
    format!("[cluster]\nredis = \"{}\"\n{extra}\n\n", redis.url())
}

/// A route of `/NAME` to the resource NAME, and the cluster rule `NAME-fleet` on it with
/// `fields` (kind, mode, limit...).
fn rule(name: &str, fields: &str) -> String {
    format!(
        "[[route]]\nresource = \"{name}\"\npath = \"/{name}\"\nupstream = \"app\"\n\n\
         [[cluster_rule]]\nid = \"{name}-fleet\"\nresource = \"{name}\"\n{fields}\n\n"
    )
}

/// One `spillway serve` process: its proxy's and its admin API's ports, the child (killed when
/// dropped) and its directory.
struct Process {
    port: u16,
    admin: u16,
    child: child::Spillway,
    _dir: tempfile::TempDir,
}

impl Process {
    /// Starts `spillway serve` in front of `upstream` with `rules` (the `[cluster]` section, the
    /// routes and the rules); returns it with its log.
    fn spawn(upstream: SocketAddr, rules: &str) -> (Self, std::sync::mpsc::Receiver<String>) {
        let (port, admin) = (free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "[listener]\nlisten = \"127.0.0.1:{port}\"\n\n\
             [admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
             [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n{rules}"
        );
        let (child, log) = serve(dir.path(), &config, None);
        let process = Self {
            port,
            admin,
            child,
            _dir: dir,
        };
        (process, log)
    }

    /// `GET /api/status` from its admin API, as JSON.
    async fn status(&self, client: &HttpClient) -> Value {
        let uri = format!("http://127.0.0.1:{}/api/status", self.admin)
            .parse()
            .unwrap();
        let response = tokio::time::timeout(DEADLINE, client.get(uri))
            .await
            .expect("the admin API answers")
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&body).unwrap()
    }
}

/// Three processes in front of `upstream` with `rules`, started together; returns once each
/// says it is listening.
fn fleet(upstream: SocketAddr, rules: &str) -> [Process; 3] {
    let started: [_; 3] = std::array::from_fn(|_| Process::spawn(upstream, rules));
    started.map(|(process, log)| {
        tokio::task::block_in_place(|| wait_for_line(&log, "spillway listening"));
        process
    })
}

/// A client for the proxies and their admin APIs. It drops a connection idle for 2 s: the
/// admin API closes one idle for its `header_timeout` (5 s), and a request sent on a
/// connection as the server closes it fails (seen on a loaded machine).
fn client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(2))
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build_http()
}

/// The cluster rules of a status, in file order.
fn rules_of(status: &Value) -> &[Value] {
    status["cluster"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Whether there are rules, all in `state` (`"global"`, `"fallback"`).
fn all_in(state: &'static str) -> impl Fn(&[Value]) -> bool {
    move |rules| !rules.is_empty() && rules.iter().all(|rule| rule["state"] == state)
}

/// Whether the first rule counts `n` live instances.
fn instances(n: u64) -> impl Fn(&[Value]) -> bool {
    move |rules| rules.first().is_some_and(|rule| rule["instances"] == n)
}

/// Reads `process`'s status every 20 ms until `ready` holds of its cluster rules, failing if
/// `within` passes since `since` first; returns the time from `since`.
async fn until_rules(
    client: &HttpClient,
    process: &Process,
    since: Instant,
    within: Duration,
    ready: impl Fn(&[Value]) -> bool,
) -> Duration {
    loop {
        let status = process.status(client).await;
        if ready(rules_of(&status)) {
            return since.elapsed();
        }
        let rules = &status["cluster"];
        assert!(since.elapsed() < within, "not within {within:?}: {rules}");
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the shared bucket of the cluster rule `id` on `redis` stores at least `permits`
/// (by its state and Redis's clock, as its script resyncs them).
async fn until_bucket_stores(redis: &RedisServer, id: &str, permits: u64) {
    let mut connection = redis.connect().await;
    let key = format!("spillway:{{{id}}}:bucket");
    let since = Instant::now();
    loop {
        let (stored, next_free, rate, most): (Option<f64>, Option<f64>, Option<f64>, Option<f64>) =
            redis::cmd("HMGET")
                .arg(&key)
                .arg(&["s", "n", "r", "m"][..])
                .query_async(&mut connection)
                .await
                .unwrap();
        let (seconds, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut connection)
            .await
            .unwrap();
        let now = (seconds * 1_000_000 + micros) as f64;
        if let (Some(stored), Some(next_free), Some(rate), Some(most)) =
            (stored, next_free, rate, most)
        {
            let made = (now - next_free).max(0.0) * rate / 1e6;
            if (stored + made).min(most) >= permits as f64 {
                return;
            }
        }
        assert!(
            since.elapsed() < DEADLINE,
            "{key} stores fewer than {permits}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until every cluster rule of every process of `fleet` is on Redis.
async fn until_on_redis(client: &HttpClient, fleet: &[Process]) {
    for process in fleet {
        until_rules(client, process, Instant::now(), DEADLINE, all_in("global")).await;
    }
}

/// `GET /ROUTE` on the proxy at `port` (with `x-hold` when `hold`): the status, the body read
/// to its end, or why there was none (within the deadline).
async fn send(
    client: &HttpClient,
    port: u16,
    route: &str,
    hold: bool,
) -> Result<StatusCode, String> {
    let mut request = Request::get(format!("http://127.0.0.1:{port}/{route}"));
    if hold {
        request = request.header("x-hold", "1");
    }
    let request = request.body(Empty::new()).unwrap();
    let answered = tokio::time::timeout(DEADLINE, async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let _ = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok::<StatusCode, String>(status)
    });
    answered
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {DEADLINE:?}")))
}

/// [`send`] in a task of its own, its answer with when it was in flight.
fn spawn_send(
    client: &HttpClient,
    port: u16,
    route: &'static str,
    hold: bool,
) -> JoinHandle<Answer> {
    let client = client.clone();
    tokio::spawn(async move {
        let sent = unix_ms();
        let answer = send(&client, port, route, hold).await;
        let answered = unix_ms();
        (Flight { sent, answered }, answer)
    })
}

/// Open-loop load on `route` of the proxy at `port`: a request every `every`, each in a task of
/// its own (a slow answer delays no other), `most` of them or until `stop` changes; returns
/// every answer.
async fn open_loop(
    client: HttpClient,
    port: u16,
    route: &'static str,
    every: Duration,
    mut stop: watch::Receiver<bool>,
    most: usize,
) -> Vec<Answer> {
    let mut ticks = tokio::time::interval(every);
    let mut sent = Vec::new();
    while sent.len() < most {
        tokio::select! {
            _ = ticks.tick() => sent.push(spawn_send(&client, port, route, false)),
            _ = stop.changed() => break,
        }
    }
    let mut answers = Vec::with_capacity(sent.len());
    for request in sent {
        answers.push(request.await.unwrap());
    }
    answers
}

/// One route's answers: requests, when each admitted one was in flight (sorted by its send),
/// refusals (429), and every other answer.
#[derive(Debug, Default)]
struct Tally {
    requests: usize,
    admitted: Vec<Flight>,
    refused: usize,
    others: Vec<Result<StatusCode, String>>,
}

/// The tally of `route` among `answers`.
fn tally(route: &str, answers: &[(&str, Answer)]) -> Tally {
    let mut tally = Tally::default();
    for (_, (at, answer)) in answers.iter().filter(|(name, _)| *name == route) {
        tally.requests += 1;
        match answer {
            Ok(StatusCode::OK) => tally.admitted.push(*at),
            Ok(StatusCode::TOO_MANY_REQUESTS) => tally.refused += 1,
            other => tally.others.push(other.clone()),
        }
    }
    tally.admitted.sort_unstable();
    tally
}

/// Admissions (sorted by send) certainly decided in `[from, to)`: sent and answered in it. One
/// in flight across an end is left out, so a check against a bound needs no slack for
/// the time a request takes to reach Redis.
fn count(times: &[Flight], from: u64, to: u64) -> usize {
    let sent_in = &times[times.partition_point(|f| f.sent < from)..];
    sent_in
        .iter()
        .take_while(|f| f.sent < to)
        .filter(|f| f.answered < to)
        .count()
}

/// The most admissions in an aligned span `[k x 500, k x 500 + 1000)` ms and in a sliding 1 s
/// span starting at an admission, among the spans `keep` takes (by their start and end).
fn peaks(times: &[Flight], keep: impl Fn(u64, u64) -> bool) -> (usize, usize) {
    let (Some(first), Some(last)) = (times.first(), times.iter().map(|f| f.answered).max()) else {
        return (0, 0);
    };
    let first = first.sent;
    let aligned = ((first / BUCKET_MS).saturating_sub(1)..=last / BUCKET_MS)
        .map(|k| k * BUCKET_MS)
        .filter(|&start| keep(start, start + WINDOW_MS))
        .map(|start| count(times, start, start + WINDOW_MS))
        .max()
        .unwrap_or(0);
    let sliding = times
        .iter()
        .map(|f| f.sent)
        .filter(|&start| keep(start, start + WINDOW_MS))
        .map(|start| count(times, start, start + WINDOW_MS))
        .max()
        .unwrap_or(0);
    (aligned, sliding)
}

/// [`peaks`] before the kill (spans ending by it), around it (spans overlapping the time Redis
/// was down, from the kill to the restart), after the restart (spans starting from it), and
/// over the whole run.
fn periods(times: &[Flight], kill: u64, restart: u64) -> [(usize, usize); 4] {
    [
        peaks(times, |_, end| end <= kill),
        peaks(times, |start, end| start < restart && end > kill),
        peaks(times, |start, _| start >= restart),
        peaks(times, |_, _| true),
    ]
}

/// The fullest aligned span of `route`'s admissions: where it starts from the kill and from the
/// restart, and what each process admitted in it.
fn fullest_span(
    route: &str,
    admitted: &[Flight],
    by_process: &[(&str, usize, Flight)],
    kill: u64,
    restart: u64,
) -> String {
    let Some(first) = admitted.first() else {
        return "no admissions".to_owned();
    };
    let last = admitted
        .iter()
        .map(|f| f.answered)
        .max()
        .unwrap_or(first.answered);
    let start = ((first.sent / BUCKET_MS).saturating_sub(1)..=last / BUCKET_MS)
        .map(|k| k * BUCKET_MS)
        .max_by_key(|&start| count(admitted, start, start + WINDOW_MS))
        .unwrap_or(0);
    let mut each = [0usize; 3];
    for (_, index, flight) in by_process.iter().filter(|(name, ..)| *name == route) {
        let one = std::slice::from_ref(flight);
        each[*index] += count(one, start, start + WINDOW_MS);
    }
    let from = |at: u64| start as i64 - at as i64;
    format!(
        "fullest span from {} ms of the kill, {} ms of the restart: {each:?} by process",
        from(kill),
        from(restart)
    )
}

/// Aligned spans whose admissions pass their bound, as `(start from the kill in ms, admitted,
/// bound)`. The bound is `limit` plus `slack`, except on a span the switch to the fallback
/// falls in (one that ends after `kill_started`, when the test began to kill Redis, and starts
/// before `kill`, when Redis was dead, plus a window): there each process admits at most its
/// share less what it admitted in the span, so the fleet admits at most the sum of each
/// process's larger of its share and what Redis admitted it in the span (docs/cluster.md, "The
/// bound across a failure": the limit when the processes took equal parts), plus `slack`.
/// What Redis admitted a process is counted from its admissions answered before `kill`: Redis
/// decided them, but for those its fallback decided in the milliseconds between Redis's death
/// and `kill`, which loosen the check by as many.
fn over_bound(
    route: &str,
    admitted: &[Flight],
    by_process: &[(&str, usize, Flight)],
    (kill_started, kill): (u64, u64),
    (limit, slack): (usize, usize),
) -> Vec<(i64, usize, usize)> {
    let (Some(first), Some(last)) = (admitted.first(), admitted.iter().map(|f| f.answered).max())
    else {
        return Vec::new();
    };
    let mut over = Vec::new();
    for k in (first.sent / BUCKET_MS).saturating_sub(1)..=last / BUCKET_MS {
        let start = k * BUCKET_MS;
        let end = start + WINDOW_MS;
        let switch = end > kill_started && start < kill + WINDOW_MS;
        let base = if switch {
            let mut by_redis = [0usize; 3];
            for (_, index, flight) in by_process.iter().filter(|(name, ..)| *name == route) {
                if flight.answered < kill {
                    by_redis[*index] += count(std::slice::from_ref(flight), start, end);
                }
            }
            let share = limit / by_redis.len();
            by_redis.iter().map(|&redis| redis.max(share)).sum()
        } else {
            limit
        };
        let (admitted, bound) = (count(admitted, start, end), base + slack);
        if admitted > bound {
            over.push((start as i64 - kill as i64, admitted, bound));
        }
    }
    over
}

/// Admitted a second before the kill, while Redis was down, and after the restart (to the
/// last admission), each rounded.
fn rates(times: &[Flight], kill: u64, restart: u64) -> [u64; 3] {
    let (first, last) = (times.first(), times.last());
    let (first, last) = (first.map(|f| f.sent), last.map(|f| f.sent));
    let (Some(first), Some(last)) = (first, last) else {
        return [0; 3];
    };
    let rate = |from: u64, to: u64| {
        let seconds = to.saturating_sub(from).max(1) as f64 / 1000.0;
        (count(times, from, to) as f64 / seconds).round() as u64
    };
    [
        rate(first, kill),
        rate(kill, restart),
        rate(restart, last + 1),
    ]
}

/// Requests the gated upstream holds: their arrivals there, and those seen arrive.
struct Held {
    arrivals: mpsc::UnboundedReceiver<()>,
    requests: Vec<JoinHandle<Answer>>,
}

/// Sends `x-hold` requests to `processes` in turn until `held` has `want` requests the upstream
/// holds, failing past `deadline`: one at a time, a refused one (429) sent again 10 ms later.
async fn fill(
    client: &HttpClient,
    processes: [&Process; 2],
    held: &mut Held,
    want: usize,
    deadline: Instant,
) {
    let mut turn = 0;
    while held.requests.len() < want {
        let now_held = held.requests.len();
        assert!(Instant::now() < deadline, "{now_held} held, not {want}");
        let mut request = spawn_send(client, processes[turn % 2].port, "conc", true);
        turn += 1;
        let arrived = tokio::select! {
            _ = held.arrivals.recv() => true,
            answer = &mut request => {
                assert_eq!(answer.unwrap().1, Ok(StatusCode::TOO_MANY_REQUESTS));
                false
            }
        };
        if arrived {
            held.requests.push(request);
        } else {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn low_traffic_on_every_kind_is_never_refused() {
    let _one = one_at_a_time().await;
    let redis = RedisServer::start().await;
    let (upstream, _, _) = gated_upstream().await;
    // A request waits for a refill at most twice the call timeout: 2 s, so that a stall of
    // this busy 2-core machine (three processes, Redis and the test) is not taken for a
    // Redis too slow to answer.
    let mut rules = cluster(&redis, "call_timeout = \"1s\"");
    for (name, fields, _) in LOW_TRAFFIC {
        rules.push_str(&rule(name, fields));
    }
    let fleet = fleet(upstream, &rules);
    let client = client();
    until_on_redis(&client, &fleet).await;
    // A new bucket stores nothing (Guava's start): until it has stored the batches the three
    // processes' first requests may lease at once, the second of them at the same instant would
    // be refused by Guava's semantics, not for want of a lease.
    let buckets = LOW_TRAFFIC
        .iter()
        .filter(|(_, fields, _)| *fields == BUCKET);
    for (name, _, _) in buckets {
        until_bucket_stores(&redis, &format!("{name}-fleet"), 3 * MAX_BATCH).await;
    }
    // Six seconds of 1 or 4 requests a second on each route of each process, all at once.
    const SECONDS: u64 = 6;
    let (_running, stop) = watch::channel(false);
    let mut load = Vec::new();
    for process in &fleet {
        for (name, _, per_second) in LOW_TRAFFIC {
            let every = Duration::from_millis(1_000 / per_second);
            let most = (SECONDS * per_second) as usize;
            let (client, stop) = (client.clone(), stop.clone());
            let run = open_loop(client, process.port, name, every, stop, most);
            load.push((name, tokio::spawn(run)));
        }
    }
    let mut answers = Vec::new();
    for (name, run) in load {
        answers.extend(run.await.unwrap().into_iter().map(|answer| (name, answer)));
    }
    let mut figures = Vec::new();
    for (name, _, per_second) in LOW_TRAFFIC {
        let tally = tally(name, &answers);
        let (requests, admitted, refused) = (tally.requests, tally.admitted.len(), tally.refused);
        figures.push(format!("{name} {requests}/{admitted}/{refused}"));
        assert_eq!(requests, (3 * SECONDS * per_second) as usize, "{name}");
        let others = &tally.others;
        assert_eq!(admitted, requests, "{name}: {refused} refused, {others:?}");
    }
    println!(
        "low traffic, requests/admitted/refused per route (3 processes, {SECONDS} s): {}",
        figures.join(", ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_first_requests_stays_within_the_limit() {
    let _one = one_at_a_time().await;
    let redis = RedisServer::start().await;
    let (upstream, _, _) = gated_upstream().await;
    let rules = format!(
        "{}{}{}",
        // A first call within 1 s: on this busy 2-core machine, three processes starting at
        // once can take longer than the default 100 ms to hear from Redis.
        cluster(&redis, "startup_wait = \"2s\"\ncall_timeout = \"1s\""),
        rule("strict", STRICT_QPS),
        rule("leased", LEASED_QPS)
    );
    let fleet = fleet(upstream, &rules);
    let client = client();
    // Listening means on Redis: the process waited for every rule's first answer.
    for process in &fleet {
        let status = process.status(&client).await;
        assert!(
            all_in("global")(rules_of(&status)),
            "a rule not on Redis once its process listens: {}",
            status["cluster"]
        );
    }
    // Fired just after a bucket's start (timing on the window's clock, not a synchronisation):
    // the burst has the window's two buckets, 1 s, before the first of them leaves it.
    let into_bucket = unix_ms() % BUCKET_MS;
    tokio::time::sleep(Duration::from_millis(BUCKET_MS - into_bucket + 10)).await;
    const BURST: usize = 200;
    let fired = Instant::now();
    let mut burst = Vec::new();
    for _ in 0..BURST {
        for process in &fleet {
            for route in ["strict", "leased"] {
                burst.push((route, spawn_send(&client, process.port, route, false)));
            }
        }
    }
    let mut answers = Vec::new();
    for (route, request) in burst {
        answers.push((route, request.await.unwrap()));
    }
    let took = fired.elapsed();
    let mut states = Vec::new();
    for process in &fleet {
        let status = process.status(&client).await;
        let state = |rule: &Value| rule["state"].as_str().unwrap_or("none").to_owned();
        states.extend(rules_of(&status).iter().map(state));
    }
    let (strict, leased) = (tally("strict", &answers), tally("leased", &answers));
    let (strict_in, leased_in) = (strict.admitted.len(), leased.admitted.len());
    println!(
        "burst of {} first requests a route: strict {strict_in} admitted (limit {LIMIT}), \
         leased {leased_in} (bound {LEASED_BOUND}), in {} ms; states after: {states:?}",
        3 * BURST,
        took.as_millis()
    );
    for tally in [&strict, &leased] {
        assert!(tally.others.is_empty(), "{:?}", tally.others);
    }
    // Every decision fell between the first send and the last answer. A window is two
    // buckets: a burst within one window (as it is, fired 10 ms into a bucket, on a machine
    // that answers it within 990 ms) is held to the bound once; one that a slow machine spread
    // over more buckets, once per window it touched.
    let buckets = (10 + took.as_millis() as usize).div_ceil(BUCKET_MS as usize);
    let windows = buckets.div_ceil(2).max(1);
    let why = format!(
        "burst of {} ms ({windows} window(s)), states after {states:?}",
        took.as_millis()
    );
    assert!(
        (1..=windows * LIMIT).contains(&strict_in),
        "strict: {strict_in} admitted; {why}"
    );
    assert!(
        (1..=windows * LEASED_BOUND).contains(&leased_in),
        "leased: {leased_in} admitted; {why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_under_load_keeps_the_bound() {
    let _one = one_at_a_time().await;
    let mut redis = RedisServer::start().await;
    let (upstream, _, _) = gated_upstream().await;
    let rules = format!(
        "{}{}{}",
        cluster(&redis, ""),
        rule("leased", LEASED_QPS),
        rule("strict", STRICT_QPS)
    );
    let fleet = fleet(upstream, &rules);
    let client = client();
    until_on_redis(&client, &fleet).await;
    // 200 requests a second on each route of each process (twice the limit for the fleet),
    // through the kill and the restart.
    let (stop, stopped) = watch::channel(false);
    let (mut load, every) = (Vec::new(), Duration::from_millis(5));
    for (index, process) in fleet.iter().enumerate() {
        for route in ["leased", "strict"] {
            let (client, stop) = (client.clone(), stopped.clone());
            let run = open_loop(client, process.port, route, every, stop, usize::MAX);
            load.push((route, index, tokio::spawn(run)));
        }
    }
    // The scenario's phases, timed (not synchronisations): 2 s of load, Redis killed for 2 s,
    // then 3 s after its restart.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kill_started = unix_ms();
    redis.kill().await;
    let (killed, kill_ms) = (Instant::now(), unix_ms());
    let within = Duration::from_secs(5);
    let mut to_fallback = Vec::new();
    for process in &fleet {
        let fallback = all_in("fallback");
        let took = until_rules(&client, process, killed, within, fallback).await;
        to_fallback.push(took.as_millis());
    }
    tokio::time::sleep_until(killed + Duration::from_secs(2)).await;
    redis.restart().await;
    let (restarted, restart_ms) = (Instant::now(), unix_ms());
    let mut back = Vec::new();
    for process in &fleet {
        let took = until_rules(&client, process, restarted, within, all_in("global")).await;
        back.push(took.as_millis());
    }
    tokio::time::sleep_until(restarted + Duration::from_secs(3)).await;
    stop.send(true).unwrap();
    let (mut answers, mut by_process) = (Vec::new(), Vec::new());
    for (route, index, run) in load {
        let run = run.await.unwrap();
        let admitted = run
            .iter()
            .filter(|(_, answer)| *answer == Ok(StatusCode::OK));
        by_process.extend(admitted.map(|(flight, _)| (route, index, *flight)));
        answers.extend(run.into_iter().map(|answer| (route, answer)));
    }
    let mut figures = Vec::new();
    let mut over = Vec::new();
    for (route, bound) in [("leased", LEASED_BOUND), ("strict", LIMIT)] {
        let slack = bound - LIMIT;
        let tally = tally(route, &answers);
        assert!(tally.others.is_empty(), "{route}: {:?}", tally.others);
        let (requests, admitted, refused) = (tally.requests, tally.admitted.len(), tally.refused);
        assert!(
            refused > 0 && admitted > 0,
            "{route}: {admitted} in, {refused} out"
        );
        let [before, around, after, all] = periods(&tally.admitted, kill_ms, restart_ms);
        let rates = rates(&tally.admitted, kill_ms, restart_ms);
        let fullest = fullest_span(route, &tally.admitted, &by_process, kill_ms, restart_ms);
        figures.push(format!(
            "{route}: {requests} requests, {admitted} admitted, {refused} refused; admitted \
             a second before, while down, after {rates:?}; 1 s max (aligned, sliding) before \
             {before:?}, around the kill {around:?}, after the restart {after:?}, all {all:?} \
             (bound {bound}); {fullest}"
        ));
        // Aligned spans: the bound (around the switch to the fallback, the sum of each
        // process's larger of its share and what Redis admitted it). Any 1 s span: twice the
        // bound (a span across three buckets holds the middle one's passes and both ends',
        // docs/cluster.md).
        let times = (kill_started, kill_ms);
        let aligned = over_bound(route, &tally.admitted, &by_process, times, (LIMIT, slack));
        if !aligned.is_empty() || all.1 > 2 * bound {
            over.push((route, aligned));
        }
    }
    let figures = figures.join("; ");
    println!(
        "redis killed and restarted under load: {figures}; fallback after {to_fallback:?} ms, \
         back after {back:?} ms"
    );
    assert!(over.is_empty(), "over the bound on {over:?}: {figures}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_gives_its_share_to_the_others_within_the_heartbeat_ttl() {
    let _one = one_at_a_time().await;
    let redis = RedisServer::start().await;
    let (upstream, gate, arrivals) = gated_upstream().await;
    let rules = format!(
        "{}{}",
        cluster(&redis, "heartbeat_ttl = \"1s\""),
        rule("conc", "kind = \"concurrency\"\nlimit = 6")
    );
    let [a, b, mut c] = fleet(upstream, &rules);
    let client = client();
    // C holds two of the fleet's six places, with two requests in flight.
    let mut held = Held {
        arrivals,
        requests: Vec::new(),
    };
    fill(&client, [&c, &c], &mut held, 2, Instant::now() + DEADLINE).await;
    let c_held = std::mem::take(&mut held.requests);
    until_rules(&client, &a, Instant::now(), DEADLINE, instances(3)).await;
    // A and B get the four others, and no more while C's places are held.
    fill(&client, [&a, &b], &mut held, 4, Instant::now() + DEADLINE).await;
    for process in [&a, &b] {
        let answer = send(&client, process.port, "conc", true).await;
        assert_eq!(answer, Ok(StatusCode::TOO_MANY_REQUESTS));
    }
    // C dies (SIGKILL) holding its places: its heartbeat runs out after the TTL, 1 s, and its
    // places with it.
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    let killed = Instant::now();
    for request in c_held {
        let (_, answer) = request.await.unwrap();
        assert!(answer.is_err(), "through the killed process: {answer:?}");
    }
    let within = Duration::from_secs(3);
    let (to_two, to_six) = tokio::join!(
        until_rules(&client, &a, killed, within, instances(2)),
        async {
            fill(&client, [&a, &b], &mut held, 6, killed + within).await;
            killed.elapsed()
        }
    );
    gate.send(true).unwrap();
    for request in held.requests {
        assert_eq!(request.await.unwrap().1, Ok(StatusCode::OK));
    }
    println!(
        "a killed process (heartbeat_ttl 1 s): the others count 2 instances after {} ms, \
         hold all 6 places after {} ms",
        to_two.as_millis(),
        to_six.as_millis()
    );
}
