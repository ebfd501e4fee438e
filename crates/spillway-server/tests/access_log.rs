//! spillway's access log, through the real proxy on tokio's paused clock: each line is a JSON
//! object with what the limits decided; and a log written in shadow mode, replayed with the
//! same rules enforced, refuses what the live shadow mode would have refused, rule by rule.

mod support;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use spillway_server::checked::parse;
use spillway_server::replay::{replay, ReplayOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use support::server::Served;

/// A spillway on tokio's clock reading Unix time, as `spillway serve`'s reads it.
fn unix_clocked() -> spillway::Spillway {
    spillway::Spillway::new_with_clock(spillway_tower::TokioClock::unix())
}

/// An upstream that answers `/c...` and `/d...` after 31 ms, anything else after 5 ms.
async fn upstream() -> std::net::SocketAddr {
    support::upstream(|request: Request<hyper::body::Incoming>| async move {
        let path = request.uri().path();
        let took = if path.starts_with("/c") || path.starts_with("/d") {
            31
        } else {
            5
        };
        tokio::time::sleep(Duration::from_millis(took)).await;
        Response::new(Full::new(Bytes::from_static(b"ok")))
    })
    .await
}

/// The rules of both runs: a QPS limit on `/a`, a per-user limit on `/b`, a concurrency
/// limit on `/c`, Dubbo's `executes` on `/d`.
const RULES: &str = r#"
[[route]]
resource = "a"
path = "/a"
upstream = "app"

[[route]]
resource = "b"
path = "/b"
upstream = "app"

[[route]]
resource = "c"
path = "/c"
upstream = "app"

[[route]]
resource = "d"
path = "/d"
upstream = "app"
executes = 1

[[flow]]
id = "a-qps"
resource = "a"
count = 20

[[keyed]]
id = "b-per-user"
resource = "b"
key = "header:x-user"
count = 5

[[flow]]
id = "c-in-flight"
resource = "c"
grade = "concurrency"
count = 2
"#;

/// The rules with `listener` in `[listener]`, logging to `log`.
fn config_text(upstream: std::net::SocketAddr, log: &Path, listener: &str) -> String {
    format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n{listener}\n\n\
         [access_log]\npath = {:?}\nheaders = [\"user-agent\"]\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n{RULES}",
        log.display().to_string()
    )
}

/// A runtime on tokio's paused clock: the proxy, the upstream and the clients all run on it.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

/// The log's lines, as JSON.
fn lines(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).expect("the access log");
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// Serves `text` on `runtime` (paused), sends `requests` (each: when, after the start; path;
/// `x-user`), waits for every answer, stops the proxy and flushes the log.
fn serve_and_log(
    runtime: &tokio::runtime::Runtime,
    text: &str,
    requests: Vec<(Duration, &'static str, Option<&'static str>)>,
) {
    runtime.block_on(async {
        let config = parse(text, "live.toml").expect("a good file");
        let served = Served::with(&config, unix_clocked(), None).await;
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let start = tokio::time::Instant::now();
        let proxy = served.proxy;
        let sent: Vec<_> = requests
            .into_iter()
            .map(|(at, path, user)| {
                let client = client.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(start + at).await;
                    let mut request = Request::get(format!("http://{proxy}{path}"))
                        .header("user-agent", "replay-test");
                    if let Some(user) = user {
                        request = request.header("x-user", user);
                    }
                    let response = client
                        .request(request.body(Empty::new()).expect("a request"))
                        .await
                        .expect("an answer");
                    let _ = http_body_util::BodyExt::collect(response.into_body()).await;
                })
            })
            .collect();
        for request in sent {
            request.await.expect("the request's task");
        }
        let handle = served.handle.clone();
        served.shutdown().await;
        assert!(handle.flush_access_log(Duration::from_secs(60)));
    });
}

/// The arrivals of a stream of `rate` a second for `seconds`, each on a multiple of `step`
/// milliseconds (tokio's timers fire on whole milliseconds), gaps drawn uniformly from 0 to
/// twice the mean by an LCG: the same schedule on every run.
fn arrivals(rate: u64, seconds: u64, step: u64, seed: u64) -> Vec<Duration> {
    let mut state = seed;
    let mut at = 0u64;
    let mut out = Vec::new();
    let steps = 1_000 / rate / step;
    loop {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        at += ((state >> 33) % (2 * steps + 1)) * step;
        if at >= seconds * 1_000 {
            return out;
        }
        out.push(Duration::from_millis(at));
    }
}

#[test]
fn each_line_is_a_json_object_with_what_the_limits_decided() {
    let dir = tempfile::tempdir().expect("a directory");
    let log = dir.path().join("access.log");
    let runtime = paused_runtime();
    let upstream = runtime.block_on(upstream());
    let text = config_text(upstream, &log, "");
    let at = |ms| Duration::from_millis(ms);
    // Two users at once on `/b` (one is refused: 5 a second, the sixth within the second),
    // a path no route takes, and a bad one.
    let mut requests: Vec<_> = (0..6).map(|n| (at(n * 10), "/b", Some("ann"))).collect();
    requests.push((at(100), "/b", None));
    requests.push((at(200), "/a?q=1", None));
    requests.push((at(300), "/nowhere", None));
    runtime.block_on(async {
        let config = parse(&text, "live.toml").expect("a good file");
        let served = Served::with(&config, unix_clocked(), None).await;
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let start = tokio::time::Instant::now();
        for (when, path, user) in requests {
            tokio::time::sleep_until(start + when).await;
            let mut request = Request::get(format!("http://{}{path}", served.proxy))
                .header("user-agent", "replay-test");
            if let Some(user) = user {
                request = request.header("x-user", user);
            }
            let response = client
                .request(request.body(Empty::new()).expect("a request"))
                .await
                .expect("an answer");
            let _ = http_body_util::BodyExt::collect(response.into_body()).await;
        }
        let handle = served.handle.clone();
        served.shutdown().await;
        assert!(handle.flush_access_log(Duration::from_secs(60)));
    });
    let lines = lines(&log);
    assert_eq!(lines.len(), 9, "{lines:#?}");
    let first = &lines[0];
    for field in [
        "time",
        "method",
        "host",
        "path",
        "ip",
        "status",
        "duration_ms",
    ] {
        assert!(first.get(field).is_some(), "no {field} in {first}");
    }
    assert_eq!(first["method"], "GET");
    assert_eq!(first["ip"], "127.0.0.1");
    assert_eq!(first["route"], "/b");
    assert_eq!(first["resource"], "b");
    assert_eq!(first["decision"], "pass");
    assert_eq!(first["status"], 200);
    // The headers the rules read, and those the section names.
    assert_eq!(first["headers"]["x-user"], "ann");
    assert_eq!(first["headers"]["user-agent"], "replay-test");
    // On the paused clock, the upstream's 5 ms exactly, to the microsecond.
    assert_eq!(first["duration_ms"], 5.0);
    let refused = &lines[5];
    assert_eq!(refused["decision"], "block");
    assert_eq!(refused["reason"], "keyed");
    assert_eq!(refused["rule"], "b-per-user");
    assert_eq!(refused["key"], "ann");
    assert_eq!(refused["status"], 429);
    assert_eq!(
        lines[6]["decision"], "pass",
        "no user: the rule keeps no count for it"
    );
    assert_eq!(lines[7]["path"], "/a?q=1");
    assert_eq!(lines[8]["decision"], "no_route");
    assert!(lines[8].get("route").is_none());
    // Times are the arrivals, 10 ms apart on the paused clock.
    let time = |line: &Value| {
        let text = line["time"].as_str().expect("a time").to_owned();
        assert!(text.ends_with('Z') && text.len() == 27, "{text}");
        text
    };
    let (t0, t1) = (time(&lines[0]), time(&lines[1]));
    let micros = |text: &str| text[20..26].parse::<u64>().expect("microseconds");
    assert_eq!((micros(&t1) + 1_000_000 - micros(&t0)) % 1_000_000, 10_000);
}

/// A request whose client leaves (once the request reached the upstream) gets a line (499,
/// `client_gone`) when it ends: by default it runs on to the upstream's answer
/// (`finish_when_client_leaves`), and its duration is from its arrival to then, the
/// upstream's 10 s; with `false` it ends when the client left, at once. The forwarding header keeps every value.
#[test]
fn a_request_whose_client_leaves_before_its_answer_gets_a_line_and_headers_keep_every_value() {
    for run_on in [true, false] {
        let dir = tempfile::tempdir().expect("a directory");
        let log = dir.path().join("access.log");
        let runtime = paused_runtime();
        runtime.block_on(async {
            // An upstream that takes 10 s, and says when a request reached it.
            let reached = std::sync::Arc::new(tokio::sync::Notify::new());
            let arrived = reached.clone();
            let upstream = support::upstream(move |_| {
                let arrived = arrived.clone();
                async move {
                    arrived.notify_one();
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    Response::new(Full::new(Bytes::from_static(b"late")))
                }
            })
            .await;
            let listener =
                format!("trusted_proxies = [\"127.0.0.1\"]\nfinish_when_client_leaves = {run_on}");
            let text = config_text(upstream, &log, &listener);
            let config = parse(&text, "live.toml").expect("a good file");
            let served = Served::with(&config, unix_clocked(), None).await;
            let client: Client<_, Empty<Bytes>> =
                Client::builder(TokioExecutor::new()).build_http();
            let request = Request::get(format!("http://{}/a", served.proxy))
                .header("x-forwarded-for", "192.0.2.1")
                .header("x-forwarded-for", "192.0.2.2")
                .body(Empty::new())
                .expect("a request");
            // The client gives up once its request has reached the upstream.
            let asking = tokio::spawn(client.request(request));
            reached.notified().await;
            asking.abort();
            assert!(asking.await.unwrap_err().is_cancelled());
            drop(client);
            // Past the upstream's answer.
            tokio::time::sleep(Duration::from_secs(11)).await;
            let handle = served.handle.clone();
            served.shutdown().await;
            assert!(handle.flush_access_log(Duration::from_secs(60)));
        });
        let lines = lines(&log);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert_eq!(line["status"], 499, "{line}");
        assert_eq!(line["decision"], "client_error");
        assert_eq!(line["reason"], "client_gone");
        assert_eq!(line["resource"], "a");
        let duration = line["duration_ms"].as_f64().expect("a duration");
        if run_on {
            assert!((10_000.0..10_200.0).contains(&duration), "{line}");
        } else {
            assert!(duration < 100.0, "{line}");
        }
        // Both values of the forwarding header the trusted proxies write, in order.
        assert_eq!(
            line["headers"]["x-forwarded-for"],
            serde_json::json!(["192.0.2.1", "192.0.2.2"])
        );
    }
}

#[test]
fn a_shadow_log_replayed_enforced_refuses_what_shadow_mode_counted_rule_by_rule() {
    let dir = tempfile::tempdir().expect("a directory");
    let log = dir.path().join("access.log");
    let runtime = paused_runtime();
    let upstream = runtime.block_on(upstream());
    // Three seconds of open-loop arrivals: `/a` at twice its limit, three users on `/b` (one
    // far above its 5 a second, one near it, one below), and `/c` at about 3.1 in flight
    // against 2. A request to `/c` arrives on an even millisecond and ends on an odd one
    // (31 ms later), so that no arrival and end fall on the same instant: their order would
    // be a task's choice in the live run, and a time the log cannot tell apart.
    let mut requests: Vec<(Duration, &'static str, Option<&'static str>)> = Vec::new();
    requests.extend(arrivals(40, 3, 1, 1).into_iter().map(|at| (at, "/a", None)));
    for (rate, user, seed) in [(20, "ann", 2), (6, "bob", 3), (3, "cy", 4)] {
        let times = arrivals(rate, 3, 1, seed);
        requests.extend(times.into_iter().map(|at| (at, "/b", Some(user))));
    }
    requests.extend(
        arrivals(100, 3, 2, 5)
            .into_iter()
            .map(|at| (at, "/c", None)),
    );
    requests.extend(arrivals(40, 3, 2, 6).into_iter().map(|at| (at, "/d", None)));
    let sent = requests.len();
    // The number docs/replay.md quotes.
    assert_eq!(sent, 619);
    let live = config_text(upstream, &log, "shadow = true");
    serve_and_log(&runtime, &live, requests);
    drop(runtime);

    let lines = lines(&log);
    assert_eq!(lines.len(), sent);
    let mut shadowed: BTreeMap<String, u64> = BTreeMap::new();
    let failed: Vec<_> = lines.iter().filter(|line| line["status"] != 200).collect();
    assert!(
        failed.is_empty(),
        "{} of {}: {failed:#?}",
        failed.len(),
        lines.len()
    );
    for line in &lines {
        if line["decision"] == "shadow_block" {
            // A limit with no id (Dubbo's) is named by its kind.
            let rule = line.get("rule").unwrap_or(&line["reason"]);
            let rule = rule.as_str().expect("a rule").to_owned();
            *shadowed.entry(rule).or_default() += 1;
        }
    }

    // The same rules, enforced (the replay turns shadow mode off).
    let config = parse(&live, "live.toml").expect("a good file");
    let options = ReplayOptions {
        logs: vec![log.clone()],
        ..ReplayOptions::default()
    };
    let report = replay(&config, "live.toml", &options).expect("a replay");
    assert_eq!(report.requests, sent as u64);
    assert_eq!(report.read.malformed, 0);
    let replayed: BTreeMap<String, u64> = (report.rules.iter())
        .map(|rule| (rule.rule.clone(), rule.would_refuse))
        .collect();
    // Each rule refused a share of its route's requests in both runs.
    for rule in ["a-qps", "b-per-user", "c-in-flight", "executes"] {
        let live = shadowed.get(rule).copied().unwrap_or(0);
        let again = replayed.get(rule).copied().unwrap_or(0);
        assert!(live > 10, "{rule}: {shadowed:?}");
        // Equal: the log's times are to the microsecond, and on the paused clock exact; the
        // live rules read Unix time (as `spillway serve`'s do), so their windows are the
        // replay's; and no arrival shares its instant with an end (see above).
        assert_eq!(
            live, again,
            "{rule}: live {shadowed:?}, replayed {replayed:?}"
        );
    }
}
