//! Cluster rules in the file, end to end: two proxies sharing one limit on a real
//! `redis-server`, a Redis out of reach at startup (the fallback), and the file's checks. Waits
//! are on events (a response, a metric), each within a timeout.

#[path = "../../spillway-redis/tests/common/mod.rs"]
mod redis_server;
mod support;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis_server::RedisServer;
use spillway_server::checked::parse;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use support::server::{call, get, Harness, TOKEN};
use tokio::sync::{mpsc, Notify};

/// Longest any one wait may take before the test fails (never reached when it passes).
const STEP: Duration = Duration::from_secs(30);

/// An upstream answering `ok`.
async fn upstream() -> SocketAddr {
    gated_upstream().await.0
}

/// An upstream answering `ok`, but holding a request with an `x-hold` header until the gate
/// opens; each held request's arrival is sent on the channel.
async fn gated_upstream() -> (SocketAddr, Arc<Notify>, mpsc::UnboundedReceiver<()>) {
    let gate = Arc::new(Notify::new());
    let (arrived, arrivals) = mpsc::unbounded_channel();
    let opened = gate.clone();
    let addr = support::upstream(move |request: http::Request<hyper::body::Incoming>| {
        let (gate, arrived) = (opened.clone(), arrived.clone());
        async move {
            if request.headers().contains_key("x-hold") {
                let open = gate.notified();
                let _ = arrived.send(());
                open.await;
            }
            http::Response::new(http_body_util::Full::new(Bytes::from("ok")))
        }
    })
    .await;
    (addr, gate, arrivals)
}

struct Proxy {
    addr: SocketAddr,
    handle: spillway_server::Proxy,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    server: Harness,
}

/// A proxy for `/api` on `upstream`, with `cluster` (the `[cluster]` section and the rules).
async fn proxy(upstream: SocketAddr, cluster: &str) -> Proxy {
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n[[route]]\nresource = \"api\"\npath = \"/api\"\nupstream = \"app\"\n\n{cluster}"
    );
    let server = Harness::start(&text).await;
    Proxy {
        addr: server.proxy,
        handle: server.handle.clone(),
        client: Client::builder(TokioExecutor::new()).build_http(),
        server,
    }
}

impl Proxy {
    async fn get(&self) -> (StatusCode, String) {
        let uri = format!("http://{}/api", self.addr).parse().unwrap();
        let response = tokio::time::timeout(STEP, self.client.get(uri))
            .await
            .expect("the proxy answers")
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// `GET /api/status` from the proxy's admin API.
    async fn admin_status(&self) -> serde_json::Value {
        let (status, body) = tokio::time::timeout(STEP, get(self.server.admin, "/api/status"))
            .await
            .expect("the admin API answers");
        assert_eq!(status, StatusCode::OK, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// A request with `x-hold`, which the gated upstream holds until its gate opens.
    fn held(&self) -> tokio::task::JoinHandle<StatusCode> {
        let uri: http::Uri = format!("http://{}/api", self.addr).parse().unwrap();
        let client = self.client.clone();
        tokio::spawn(async move {
            let request = http::Request::get(uri)
                .header("x-hold", "1")
                .body(Empty::new())
                .unwrap();
            client.request(request).await.unwrap().status()
        })
    }

    /// Sends requests until one passes (the rule's first lease, or its fallback, is in).
    async fn until_one_passes(&self) {
        let passed = tokio::time::timeout(STEP, async {
            while self.get().await.0 != StatusCode::OK {}
        });
        passed.await.expect("a request passes within the timeout");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_share_a_cluster_rule_on_redis() {
    let redis = RedisServer::start().await;
    let upstream = upstream().await;
    // 1.5 a second over a 20 s window of one bucket: at most 11 passes a window for the fleet,
    // Sentinel's `passes / 20 + 1 > 1.5` refusing the 12th.
    let cluster = format!(
        "[cluster]\nredis = \"{}\"\n\n[[cluster_rule]]\nid = \"api-fleet\"\nresource = \"api\"\nlimit = 1.5\ninterval = \"20s\"\nbuckets = 1\nmax_batch = 2\n",
        redis.url()
    );
    let (a, b) = (
        proxy(upstream, &cluster).await,
        proxy(upstream, &cluster).await,
    );
    a.until_one_passes().await;
    b.until_one_passes().await;
    let mut passed = 2;
    let mut refused = None;
    for _ in 0..40 {
        for proxy in [&a, &b] {
            match proxy.get().await {
                (StatusCode::OK, _) => passed += 1,
                (status, body) => refused = Some((status, body)),
            }
        }
    }
    // At most 11 a window plus what the two instances held (2 x max_batch each), and the run
    // may straddle one window's end: twice that, at most.
    assert!(passed <= 2 * (11 + 2 * 2 * 2), "{passed} passed");
    let (status, body) = refused.expect("some requests were refused");
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        body.contains("cluster") && body.contains("api-fleet"),
        "{body}"
    );
    let metrics = a.handle.render_metrics().unwrap();
    assert!(
        metrics.contains("spillway_cluster_fallback{rule=\"api-fleet\",resource=\"api\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("spillway_cluster_starting{rule=\"api-fleet\",resource=\"api\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"spillway_requests_total{resource="api",outcome="block",reason="cluster"}"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("spillway_cluster_instances{rule=\"api-fleet\",resource=\"api\"} 2"),
        "{metrics}"
    );
    // The admin API's status says the same.
    let status = a.admin_status().await;
    assert_eq!(
        status["cluster"],
        serde_json::json!([{
            "rule": "api-fleet",
            "resource": "api",
            "kind": "qps",
            "check": "leased",
            "state": "global",
            "returning": false,
            "instances": 2,
            "error": null,
            "failures": 0
        }])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_out_of_reach_at_startup_means_the_fallback() {
    // A port nothing listens on: the kernel's pick, released.
    let port = redis_server::free_port();
    let upstream = upstream().await;
    let cluster = format!(
        "[cluster]\nredis = \"redis://127.0.0.1:{port}\"\nassumed_instances = 4\n\n[[cluster_rule]]\nid = \"api-fleet\"\nresource = \"api\"\nlimit = 400\n"
    );
    let proxy = proxy(upstream, &cluster).await;
    // Its fair share, 400 / 4 instances, passes while Redis is out of reach.
    proxy.until_one_passes().await;
    let metrics = proxy.handle.render_metrics().unwrap();
    assert!(
        metrics.contains("spillway_cluster_fallback{rule=\"api-fleet\",resource=\"api\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("spillway_cluster_failures_total{rule=\"api-fleet\",resource=\"api\"} "),
        "{metrics}"
    );
    let status = proxy.admin_status().await;
    assert_eq!(status["cluster"][0]["state"], "fallback");
    // Why, for the operator: the connection refused, not a timeout.
    let error = status["cluster"][0]["error"]
        .as_str()
        .unwrap()
        .to_lowercase();
    assert!(error.contains("refused"), "{error}");
    assert!(status["cluster"][0]["failures"].as_u64().unwrap() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_rule_limits_requests_in_flight_across_proxies() {
    let redis = RedisServer::start().await;
    let (upstream, gate, mut arrivals) = gated_upstream().await;
    let cluster = format!(
        "[cluster]\nredis = \"{}\"\n\n[[cluster_rule]]\nid = \"api-places\"\nresource = \"api\"\nkind = \"concurrency\"\nlimit = 1\n",
        redis.url()
    );
    let (a, b) = (
        proxy(upstream, &cluster).await,
        proxy(upstream, &cluster).await,
    );
    // A takes the fleet's one place and keeps a request in flight on it.
    a.until_one_passes().await;
    let held = a.held();
    tokio::time::timeout(STEP, arrivals.recv())
        .await
        .expect("the held request reaches the upstream");
    // Meanwhile B is refused, whatever its lease asks Redis, and says why.
    for _ in 0..20 {
        let (status, body) = b.get().await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert!(body.contains("api-places"), "{body}");
    }
    // The request ends: A's place goes back to Redis once spare, and B gets it.
    gate.notify_one();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    b.until_one_passes().await;
    let metrics = b.handle.render_metrics().unwrap();
    assert!(
        metrics.contains("spillway_cluster_instances{rule=\"api-places\",resource=\"api\"} 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_rule_is_one_rate_for_the_fleet() {
    let redis = RedisServer::start().await;
    let upstream = upstream().await;
    // One permit every 100 s, no burst: the fleet's first request passes (Guava's first is
    // free, and the next pays for it), then nothing for 100 s.
    let cluster = format!(
        "[cluster]\nredis = \"{}\"\n\n[[cluster_rule]]\nid = \"api-rate\"\nresource = \"api\"\nkind = \"bucket\"\nlimit = 0.01\nburst = 0\nmax_batch = 1\n",
        redis.url()
    );
    let (a, b) = (
        proxy(upstream, &cluster).await,
        proxy(upstream, &cluster).await,
    );
    a.until_one_passes().await;
    for _ in 0..20 {
        for proxy in [&a, &b] {
            let (status, body) = proxy.get().await;
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
            assert!(body.contains("api-rate"), "{body}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_rule_is_one_call_a_request_and_exact() {
    let redis = RedisServer::start().await;
    let upstream = upstream().await;
    // One permit every 100 s, no burst, checked with one call a request: exactly one request
    // passes in the fleet, whichever proxy sends it (before a proxy's first answer from Redis,
    // its fallback's share, 0.005 a second, passes nothing).
    let cluster = format!(
        "[cluster]\nredis = \"{}\"\nassumed_instances = 2\n\n[[cluster_rule]]\nid = \"api-strict\"\nresource = \"api\"\nkind = \"bucket\"\nmode = \"strict\"\nlimit = 0.01\nburst = 0\n",
        redis.url()
    );
    let (a, b) = (
        proxy(upstream, &cluster).await,
        proxy(upstream, &cluster).await,
    );
    let mut passed = 0;
    let global = "spillway_cluster_fallback{rule=\"api-strict\",resource=\"api\"} 0";
    for proxy in [&a, &b] {
        // Requests until the rule has answered from Redis (the request due at a probe asks it).
        let reached = tokio::time::timeout(STEP, async {
            loop {
                let (status, body) = proxy.get().await;
                match status {
                    StatusCode::OK => passed += 1,
                    _ => assert!(body.contains("api-strict"), "{body}"),
                }
                if proxy.handle.render_metrics().unwrap().contains(global) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        reached.await.expect("the strict rule reaches Redis");
    }
    for _ in 0..20 {
        for proxy in [&a, &b] {
            let (status, body) = proxy.get().await;
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
            assert!(body.contains("cluster rule api-strict"), "{body}");
        }
    }
    assert_eq!(passed, 1);
    let status = a.admin_status().await;
    assert_eq!(status["cluster"][0]["check"], "strict");
    assert_eq!(status["cluster"][0]["state"], "global");
    assert_eq!(status["cluster"][0]["instances"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_on_a_redis_cluster_named_by_its_nodes() {
    let cluster = redis_server::cluster::RedisCluster::start().await;
    let upstream = upstream().await;
    let nodes: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let section = format!(
        "[cluster]\nnodes = [{}]\n\n[[cluster_rule]]\nid = \"api-fleet\"\nresource = \"api\"\nlimit = 1.5\ninterval = \"20s\"\nbuckets = 1\nmax_batch = 2\n",
        nodes.join(", ")
    );
    let proxy = proxy(upstream, &section).await;
    // A cluster just formed may answer CLUSTERDOWN at first: the rule starts in its fallback
    // then. Count from when it admits against the shared limit.
    let global = "spillway_cluster_fallback{rule=\"api-fleet\",resource=\"api\"} 0";
    let in_global = tokio::time::timeout(STEP, async {
        while !proxy.handle.render_metrics().unwrap().contains(global) {
            // Polled: the probe runs every 500 ms.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    in_global.await.expect("the rule reaches the cluster");
    proxy.until_one_passes().await;
    let mut passed = 1;
    for _ in 0..40 {
        if proxy.get().await.0 == StatusCode::OK {
            passed += 1;
        }
    }
    // At most 11 a 20 s window plus what the instance held, and the run may straddle a
    // window's end: twice that.
    assert!(passed <= 2 * (11 + 2 * 2), "{passed} passed");
    let metrics = proxy.handle.render_metrics().unwrap();
    assert!(
        metrics.contains("spillway_cluster_fallback{rule=\"api-fleet\",resource=\"api\"} 0"),
        "{metrics}"
    );
}

/// Whether `proxy`'s metrics say its rule `api-fleet` admits by its fallback (`1`) or by the
/// shared limit (`0`).
fn in_fallback(proxy: &Proxy) -> bool {
    let metrics = proxy.handle.render_metrics().unwrap();
    metrics.contains("spillway_cluster_fallback{rule=\"api-fleet\",resource=\"api\"} 1")
}

/// Whether `proxy`'s metrics say its rule `api-fleet`, just back on Redis, keeps to its share.
fn returning(proxy: &Proxy) -> bool {
    let metrics = proxy.handle.render_metrics().unwrap();
    metrics.contains("spillway_cluster_returning{rule=\"api-fleet\",resource=\"api\"} 1")
}

/// Real time from `start` until `proxy`'s rule is seen in the fallback (`true`) or back on the
/// shared limit, polled every 10 ms (the metric is the event).
async fn time_until(proxy: &Proxy, fallback: bool, start: tokio::time::Instant) -> Duration {
    let reached = tokio::time::timeout(STEP, async {
        while in_fallback(proxy) != fallback {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    reached
        .await
        .expect("the rule changes mode within the timeout");
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_load_means_the_share_within_1s_and_back_within_2s() {
    let mut redis = RedisServer::start().await;
    let upstream = upstream().await;
    let cluster = format!(
        "[cluster]\nredis = \"{}\"\n\n[[cluster_rule]]\nid = \"api-fleet\"\nresource = \"api\"\nlimit = 300\n",
        redis.url()
    );
    let proxies = Arc::new([
        proxy(upstream, &cluster).await,
        proxy(upstream, &cluster).await,
        proxy(upstream, &cluster).await,
    ]);
    for proxy in proxies.iter() {
        proxy.until_one_passes().await;
    }
    // Load: each proxy gets a request every 2 ms, all through the kill and the restart; every
    // answer is counted by status.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut load = Vec::new();
    for index in 0..3 {
        let (proxies, mut stopped) = (proxies.clone(), stopped.clone());
        load.push(tokio::spawn(async move {
            let (mut ok, mut refused, mut other) = (0u64, 0u64, Vec::new());
            let mut every = tokio::time::interval(Duration::from_millis(2));
            while !*stopped.borrow_and_update() {
                every.tick().await;
                match proxies[index].get().await {
                    (StatusCode::OK, _) => ok += 1,
                    (StatusCode::TOO_MANY_REQUESTS, _) => refused += 1,
                    (status, body) => other.push((status, body)),
                }
            }
            (ok, refused, other)
        }));
    }
    let global = tokio::time::timeout(STEP, async {
        while proxies.iter().any(in_fallback) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    global.await.expect("all three on the shared limit");

    redis.kill().await;
    let killed = tokio::time::Instant::now();
    let mut to_fallback = Vec::new();
    for proxy in proxies.iter() {
        to_fallback.push(time_until(proxy, true, killed).await);
    }
    redis.restart().await;
    let restarted = tokio::time::Instant::now();
    let (mut back, mut seen_returning) = (Vec::new(), Vec::new());
    for proxy in proxies.iter() {
        back.push(time_until(proxy, false, restarted).await);
        // Just back, it keeps to its share until the others have had the chance to be back
        // (1.8 s by default): seen on the first at once, the others maybe after it ended.
        seen_returning.push(returning(proxy));
    }
    assert!(seen_returning[0], "{seen_returning:?}");
    let settled = tokio::time::timeout(STEP, async {
        while proxies.iter().any(returning) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    settled.await.expect("each ends keeping to its share");
    stop.send(true).unwrap();
    drop(stopped);
    for task in load {
        let (ok, refused, other) = task.await.unwrap();
        assert!(
            other.is_empty(),
            "answers other than 200 and 429: {other:?}"
        );
        assert!(ok > 0 && refused > 0, "{ok} passed, {refused} refused");
    }
    // Each proxy's time is measured from the kill (or the restart) itself: the proxies are
    // watched one after the other, so a later one's time is when it was first seen in its new
    // mode, at most its true time plus the 10 ms poll. Real time, since a real Redis process
    // is killed and started again: each within its bound (the call timeout and the probe
    // period, 100 and 500 ms, leave it room on a loaded machine).
    println!("fallback after {to_fallback:?}; back after {back:?}");
    for elapsed in &to_fallback {
        assert!(
            *elapsed <= Duration::from_secs(1),
            "fallback after {to_fallback:?}"
        );
    }
    for elapsed in &back {
        assert!(*elapsed <= Duration::from_secs(2), "back after {back:?}");
    }
}

/// `rule`'s status on `proxy`: its state and the instances it shares the limit among.
async fn rule_status(proxy: &Proxy) -> (String, Option<u64>) {
    let status = proxy.admin_status().await;
    let rule = &status["cluster"][0];
    let state = rule["state"].as_str().unwrap_or_default().to_owned();
    (state, rule["instances"].as_u64())
}

/// A rule changed through the admin API while Redis is down starts from the fleet its
/// predecessor knew: before, it assumed one instance and took the whole limit as its share
/// (found by an attack: the new limit plus two shares of the old admitted through an outage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_changed_during_an_outage_keeps_the_fleet_its_predecessor_knew() {
    let mut redis = RedisServer::start().await;
    let upstream = upstream().await;
    let cluster = format!(
        "[cluster]\nredis = \"{}\"\n\n[[cluster_rule]]\nid = \"api-fleet\"\nresource = \"api\"\nlimit = 300\n",
        redis.url()
    );
    let proxies = [
        proxy(upstream, &cluster).await,
        proxy(upstream, &cluster).await,
        proxy(upstream, &cluster).await,
    ];
    let counted = tokio::time::timeout(STEP, async {
        loop {
            for proxy in &proxies {
                proxy.until_one_passes().await;
            }
            if rule_status(&proxies[0]).await == ("global".to_owned(), Some(3)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    counted.await.expect("the first counts three instances");
    redis.kill().await;
    let first = &proxies[0];
    let fallen = tokio::time::timeout(STEP, async {
        while rule_status(first).await.0 != "fallback" {
            first.get().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    fallen.await.expect("in its fallback");
    let body = r#"{"cluster_rule": [{"id": "api-fleet", "resource": "api", "limit": 240}]}"#;
    let (status, response) = call(
        first.server.admin,
        http::Method::PUT,
        "/api/rules",
        Some(TOKEN),
        Bytes::from(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    // The new rule finds Redis failing and falls back, sharing 240 among the three.
    let shared = tokio::time::timeout(STEP, async {
        loop {
            first.get().await;
            let now = rule_status(first).await;
            if now.0 == "fallback" {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let now = shared.await.expect("the new rule in its fallback");
    assert_eq!(now, ("fallback".to_owned(), Some(3)));
}

#[test]
fn the_file_checks_cluster_rules_and_their_section() {
    let base = "[[route]]\nresource = \"api\"\npath = \"/api\"\nupstream = \"app\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:1\"\n\n";
    let rule = "[[cluster_rule]]\nid = \"fleet\"\nresource = \"api\"\nlimit = 10\n";
    let cases = [
        (format!("{base}{rule}"), "cluster_rule[0]", "need a [cluster] section"),
        (
            format!("{base}[cluster]\nredis = \"http://x\"\n\n{rule}"),
            "cluster.redis",
            "not a Redis URL",
        ),
        (
            format!("{base}[cluster]\nredis = \"redis://127.0.0.1:6379\"\n\n{rule}interval = \"1500us\"\n"),
            "cluster_rule[0].interval",
            "whole number of milliseconds",
        ),
        (
            format!("{base}[cluster]\nredis = \"redis://127.0.0.1:6379\"\n\n{rule}buckets = 3\n"),
            "cluster_rule[0].buckets",
            "do not divide",
        ),
        (
            format!("{base}[cluster]\nredis = \"redis://127.0.0.1:6379\"\n\n{rule}\n{rule}"),
            "cluster_rule[1].id",
            "earlier rule",
        ),
        (
            format!("{base}[cluster]\nredis = \"redis://127.0.0.1:6379\"\n\n{rule}kind = \"bucket\"\ninterval = \"2s\"\n"),
            "cluster_rule[0].interval",
            "for kind = \"qps\" rules, not kind = \"bucket\"",
        ),
        (
            format!("{base}[cluster]\nredis = \"redis://127.0.0.1:6379\"\n\n{rule}burst = 2\n"),
            "cluster_rule[0].burst",
            "for kind = \"bucket\" rules",
        ),
        (
            format!("{base}[cluster]\nredis = \"redis://127.0.0.1:6379\"\n\n{}", rule.replace("limit = 10", "limit = 2.5\nkind = \"concurrency\"")),
            "cluster_rule[0].limit",
            "whole number",
        ),
        (
            format!("{base}[cluster]\nredis = \"redis://127.0.0.1:6379\"\n\n{}", rule.replace("limit = 10", "limit = 0\nkind = \"bucket\"")),
            "cluster_rule[0].limit",
            "above 0",
        ),
        (
            format!("{base}[cluster]\nredis = \"redis://127.0.0.1:6379\"\nnodes = [\"redis://127.0.0.1:7000\"]\n\n{rule}"),
            "cluster.nodes",
            "not both",
        ),
        (
            format!("{base}[cluster]\ncall_timeout = \"1s\"\n\n{rule}"),
            "cluster.redis",
            "is required",
        ),
        (
            format!("{base}[cluster]\nnodes = [\"redis://127.0.0.1:7000\", \"http://x\"]\n\n{rule}"),
            "cluster.nodes",
            "not a Redis URL",
        ),
        (
            format!("{base}[cluster]\nredis = \"redis://127.0.0.1:6379\"\n\n{rule}kind = \"concurrency\"\nmode = \"strict\"\n"),
            "cluster_rule[0].mode",
            "leased only",
        ),
        (
            format!("{base}[cluster]\nredis = \"redis://127.0.0.1:6379\"\n\n{rule}kind = \"tokens\"\n"),
            "test.toml:17",
            "unknown variant `tokens`, expected one of `qps`, `bucket`, `concurrency`",
        ),
    ];
    for (text, field, why) in cases {
        let err = parse(&text, "test.toml").unwrap_err().to_string();
        assert!(err.contains(field) && err.contains(why), "{field}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_request_on_a_leased_rule_of_every_kind_is_admitted() {
    let redis = RedisServer::start().await;
    let upstream = upstream().await;
    for (id, kind) in [
        ("first-qps", "kind = \"qps\"\nlimit = 300\n"),
        ("first-bucket", "kind = \"bucket\"\nlimit = 300\n"),
        ("first-places", "kind = \"concurrency\"\nlimit = 6\n"),
    ] {
        // A fresh process: its lease holds nothing yet. Its first request waits for the first
        // lease (within twice the call timeout) instead of being refused for want of one.
        let cluster = format!(
            "[cluster]\nredis = \"{}\"\ncall_timeout = \"2s\"\n\n[[cluster_rule]]\nid = \"{id}\"\nresource = \"api\"\n{kind}",
            redis.url()
        );
        let proxy = proxy(upstream, &cluster).await;
        for n in 0..3 {
            let (status, body) = proxy.get().await;
            assert_eq!(status, StatusCode::OK, "{id}, request {n}: {body}");
        }
    }
}
