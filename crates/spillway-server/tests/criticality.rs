//! Criticality, tenants and deadlines through the real proxy: `[criticality]`, `[tenant]`,
//! `[deadline]` and a route's own `criticality` and `deadline`; an adaptive limit's queue that
//! sheds the least critical first; the time left told to the upstream and waited for no
//! longer; the per-class metrics and `/api/status`. Time is tokio's, paused; every wait is on
//! an event.

mod support;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use support::server::Served;
use tokio::sync::Notify;

/// What the upstream saw: each request's path and its deadline headers, in arrival order.
type Seen = Arc<Mutex<Vec<String>>>;

/// An upstream: `/hold` waits for `release` (one per notification), anything else answers at
/// once; each request is noted with its `grpc-timeout` and `x-deadline-ms`.
async fn upstream(release: Arc<Notify>, seen: Seen) -> SocketAddr {
    support::upstream(move |request: Request<Incoming>| {
        let (release, seen) = (release.clone(), seen.clone());
        async move {
            let header = |name| {
                let value = request.headers().get(name);
                value.map_or("-".to_owned(), |v| v.to_str().unwrap().to_owned())
            };
            let noted = format!(
                "{} grpc-timeout={} x-deadline-ms={} tag={}",
                request.uri().path(),
                header("grpc-timeout"),
                header("x-deadline-ms"),
                header("x-tag"),
            );
            seen.lock().unwrap().push(noted);
            if request.uri().path() == "/hold" {
                release.notified().await;
            }
            Response::new(Full::new(Bytes::from("ok")))
        }
    })
    .await
}

struct Harness {
    served: Served,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    release: Arc<Notify>,
    seen: Seen,
    upstream: SocketAddr,
}

async fn start(rules: &str) -> Harness {
    start_with("", rules).await
}

/// As [`start`], with more `[listener]` fields.
async fn start_with(listener: &str, rules: &str) -> Harness {
    let (release, seen) = (Arc::new(Notify::new()), Seen::default());
    let upstream = upstream(release.clone(), seen.clone()).await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n{listener}\n[[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n{rules}"
    );
    Harness {
        served: Served::start(&text).await,
        client: Client::builder(TokioExecutor::new()).build_http(),
        release,
        seen,
        upstream,
    }
}

impl Harness {
    /// Sends `GET path` with `headers`, in a task of its own: its status and body.
    fn send(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> tokio::task::JoinHandle<(StatusCode, String)> {
        let mut request = Request::get(format!("http://{}{path}", self.served.proxy));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Empty::<Bytes>::new()).unwrap();
        let client = self.client.clone();
        tokio::spawn(async move {
            let response = client.request(request).await.unwrap();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        })
    }

    /// Waits until `n` requests wait in adaptive rule `rule`'s queue.
    async fn until_waiting(&self, rule: &str, n: u64) {
        let spillway = &self.served.spillway;
        while spillway.adaptive_state(rule).unwrap().waiting != n {
            tokio::task::yield_now().await;
        }
    }

    /// Waits until the upstream has seen `n` requests.
    async fn until_seen(&self, n: usize) {
        while self.seen.lock().unwrap().len() < n {
            tokio::task::yield_now().await;
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    fn metrics(&self) -> String {
        self.served.handle.render_metrics().unwrap()
    }
}

const QUEUED: &str = r#"
[criticality]
header = "x-criticality"

[[criticality.rule]]
class = "sheddable"
key = "header:user-agent"
values = ["crawler"]

[[route]]
resource = "api"
path = "/"
upstream = "app"

[[adaptive]]
id = "api-limit"
resource = "api"
algorithm = { type = "aimd", initial_limit = 1, min_limit = 1, max_limit = 1 }
queue = { capacity = 1, timeout = "10s" }
"#;

#[tokio::test(start_paused = true)]
async fn a_full_queue_sheds_the_least_critical_waiter_for_a_more_critical_newcomer() {
    let h = start(QUEUED).await;
    let held = h.send("/hold", &[("x-tag", "first")]);
    h.until_seen(1).await;
    // A crawler (sheddable, by its user agent) waits for the one place...
    let crawler = h.send("/hold", &[("user-agent", "crawler"), ("x-tag", "crawler")]);
    h.until_waiting("api-limit", 1).await;
    // ...and a request that names no class (critical, the default) takes its place in line.
    let critical = h.send("/hold", &[("x-tag", "critical")]);
    let (status, body) = crawler.await.unwrap();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body.contains("(sheddable request)"), "{body}");
    h.until_waiting("api-limit", 1).await;
    h.release.notify_one();
    assert_eq!(held.await.unwrap().0, StatusCode::OK);
    h.until_seen(2).await;
    h.release.notify_one();
    assert_eq!(critical.await.unwrap().0, StatusCode::OK);
    let tags: Vec<String> = h
        .seen()
        .iter()
        .map(|s| s.rsplit('=').next().unwrap().to_owned())
        .collect();
    assert_eq!(tags, ["first", "critical"]);
    let metrics = h.metrics();
    for line in [
        "spillway_criticality_requests_total{criticality=\"critical\",outcome=\"admitted\"} 2",
        "spillway_criticality_requests_total{criticality=\"sheddable\",outcome=\"shed\"} 1",
        "spillway_criticality_requests_total{criticality=\"sheddable\",outcome=\"admitted\"} 0",
        "spillway_criticality_wait_seconds_count{criticality=\"critical\"} 2",
        "spillway_adaptive_evicted_total{rule=\"api-limit\",resource=\"api\",criticality=\"sheddable\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
}

/// A request whose client leaves while it waits in an adaptive limit's queue leaves the queue
/// and is never forwarded (only a request already at the upstream runs on, with
/// `finish_when_client_leaves`, the default); it is counted as a client that left.
#[tokio::test(start_paused = true)]
async fn a_request_whose_client_leaves_in_the_queue_is_never_forwarded() {
    use tokio::io::AsyncWriteExt;
    let h = start(QUEUED).await;
    let held = h.send("/hold", &[("x-tag", "first")]);
    h.until_seen(1).await;
    let mut gone = tokio::net::TcpStream::connect(h.served.proxy)
        .await
        .unwrap();
    gone.write_all(b"GET /hold HTTP/1.1\r\nHost: x\r\nx-tag: gone\r\n\r\n")
        .await
        .unwrap();
    h.until_waiting("api-limit", 1).await;
    drop(gone);
    h.until_waiting("api-limit", 0).await;
    h.release.notify_one();
    assert_eq!(held.await.unwrap().0, StatusCode::OK);
    // The place is free for the next request, and the one that left was never forwarded.
    assert_eq!(
        h.send("/", &[("x-tag", "next")]).await.unwrap().0,
        StatusCode::OK
    );
    let tags: Vec<String> = h
        .seen()
        .iter()
        .map(|s| s.rsplit('=').next().unwrap().to_owned())
        .collect();
    assert_eq!(tags, ["first", "next"]);
    let left = "spillway_clients_left_total{listener=\"proxy\"} 1";
    assert!(h.metrics().contains(left), "{}", h.metrics());
}

#[tokio::test(start_paused = true)]
async fn a_trusted_header_names_the_class_and_a_less_critical_newcomer_is_refused() {
    let h = start(QUEUED).await;
    let held = h.send("/hold", &[]);
    h.until_seen(1).await;
    let plus = h.send(
        "/hold",
        &[("x-criticality", "critical-plus"), ("x-tag", "plus")],
    );
    h.until_waiting("api-limit", 1).await;
    // The queue is full of a more critical request: the newcomer (critical) is refused.
    let (status, body) = h.send("/", &[]).await.unwrap();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body.contains("(critical request)"), "{body}");
    h.release.notify_one();
    h.until_seen(2).await;
    h.release.notify_one();
    assert_eq!(held.await.unwrap().0, StatusCode::OK);
    assert_eq!(plus.await.unwrap().0, StatusCode::OK);
    let state = h.served.spillway.adaptive_state("api-limit").unwrap();
    assert_eq!(state.full, [0, 0, 1, 0]);
}

const DEADLINES: &str = r#"
[deadline]
header = "x-deadline-ms"
max = "30s"

[[route]]
resource = "slow"
path = "/hold"
upstream = "app"
deadline = "2s"

[[route]]
resource = "api"
path = "/"
upstream = "app"
"#;

#[tokio::test(start_paused = true)]
async fn the_upstream_is_told_the_time_left_and_waited_for_no_longer() {
    let h = start(DEADLINES).await;
    // The header's deadline, capped by nothing here, is passed on whole (no time passed).
    let (status, _) = h.send("/x", &[("x-deadline-ms", "1500")]).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    // A gRPC call's grpc-timeout is rewritten, and the header written, with what is left.
    let grpc = [
        ("content-type", "application/grpc"),
        ("grpc-timeout", "250m"),
        ("x-deadline-ms", "900"),
    ];
    assert_eq!(h.send("/x", &grpc).await.unwrap().0, StatusCode::OK);
    // The route's own deadline: the upstream gets 2 s, and past them the client gets 504.
    let started = tokio::time::Instant::now();
    let (status, body) = h.send("/hold", &[]).await.unwrap();
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(
        body,
        "slow blocked by deadline (critical request): observed 2000 against threshold 2000\n"
    );
    assert_eq!(started.elapsed().as_secs(), 2);
    let seen = h.seen();
    assert_eq!(seen[0], "/x grpc-timeout=- x-deadline-ms=1500 tag=-");
    assert_eq!(seen[1], "/x grpc-timeout=250000u x-deadline-ms=250 tag=-");
    assert_eq!(seen[2], "/hold grpc-timeout=- x-deadline-ms=2000 tag=-");
    // Each was admitted (the last ran out at the upstream, not in the proxy); the route's own
    // deadline passing is the upstream's error.
    let metrics = h.metrics();
    for line in [
        "spillway_criticality_requests_total{criticality=\"critical\",outcome=\"admitted\"} 3",
        "spillway_criticality_requests_total{criticality=\"critical\",outcome=\"deadline\"} 0",
        "spillway_requests_total{resource=\"slow\",outcome=\"error\",reason=\"\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_deadline_the_client_gave_is_told_to_the_upstream_and_its_call_keeps_its_place() {
    let h = start(&format!(
        "{DEADLINES}\n[[adaptive]]\nid = \"slow-limit\"\nresource = \"slow\"\n\
         algorithm = {{ type = \"aimd\", initial_limit = 10, min_limit = 1 }}\n"
    ))
    .await;
    // A client that gives 300 ms (shorter than the route's 2 s) and leaves when they run out.
    let call = h.send("/hold", &[("x-deadline-ms", "300")]);
    h.until_seen(1).await;
    assert_eq!(h.seen()[0], "/hold grpc-timeout=- x-deadline-ms=300 tag=-");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    call.abort();
    // Its call runs on while the upstream works: its place stays taken (before, the proxy
    // stopped waiting at the deadline and freed it, and a client with tiny deadlines sent the
    // upstream past the limit; found by an attack).
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let state = h.served.spillway.adaptive_state("slow-limit").unwrap();
    assert_eq!(state.in_flight, 1);
    // A client that stays past its deadline gets the upstream's answer when it comes.
    let stays = h.send("/hold", &[("x-deadline-ms", "300")]);
    h.until_seen(2).await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    h.release.notify_one();
    h.release.notify_one();
    let (status, body) = stays.await.unwrap();
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    // Neither is the upstream's failure, nor a client's: the upstream answered both.
    let metrics = h.metrics();
    for line in [
        "spillway_requests_total{resource=\"slow\",outcome=\"error\",reason=\"\"} 0",
        "spillway_requests_total{resource=\"slow\",outcome=\"success\",reason=\"\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    let state = h.served.spillway.adaptive_state("slow-limit").unwrap();
    assert_eq!((state.in_flight, state.limit), (0, 10));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_the_proxy_cannot_read_is_not_passed_on() {
    let h = start(DEADLINES).await;
    // Read as no deadline (a sign, more than 12 digits; a bad unit): before, passed on as
    // given, for an upstream to act on a deadline the proxy ignored (found by an attack).
    let grpc = [("content-type", "application/grpc"), ("grpc-timeout", "1x")];
    for headers in [
        &[("x-deadline-ms", "-5")][..],
        &[("x-deadline-ms", "18446744073709551615")][..],
        &grpc[..],
    ] {
        assert_eq!(h.send("/x", headers).await.unwrap().0, StatusCode::OK);
    }
    // Years, capped by `max` (30 s here) and written in the 12 digits a reader takes.
    let years = [
        ("content-type", "application/grpc"),
        ("grpc-timeout", "99999999H"),
    ];
    assert_eq!(h.send("/x", &years).await.unwrap().0, StatusCode::OK);
    assert_eq!(
        h.seen(),
        [
            "/x grpc-timeout=- x-deadline-ms=- tag=-",
            "/x grpc-timeout=- x-deadline-ms=- tag=-",
            "/x grpc-timeout=- x-deadline-ms=- tag=-",
            "/x grpc-timeout=30000000u x-deadline-ms=30000 tag=-",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn in_shadow_mode_a_request_with_no_time_left_is_forwarded_and_counted() {
    let h = start_with("shadow = true\n", DEADLINES).await;
    let (status, body) = h.send("/x", &[("x-deadline-ms", "0")]).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(h.seen(), ["/x grpc-timeout=- x-deadline-ms=0 tag=-"]);
    let metrics = h.metrics();
    let line =
        "spillway_requests_total{resource=\"api\",outcome=\"shadow_block\",reason=\"deadline\"} 1";
    assert!(metrics.contains(line), "{metrics}");
    assert!(
        !metrics.contains("resource=\"api\",outcome=\"pass\",reason=\"\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(start_paused = true)]
async fn every_refusal_names_the_request_s_criticality() {
    let h = start(&format!(
        "{DEADLINES}\n[[flow]]\nid = \"no-api\"\nresource = \"api\"\ncount = 0\n"
    ))
    .await;
    let (status, body) = h.send("/x", &[]).await.unwrap();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        body.starts_with("api blocked by flow rule no-api (critical request)"),
        "{body}"
    );
    let metrics = h.metrics();
    let line = "spillway_criticality_requests_total{criticality=\"critical\",outcome=\"shed\"} 1";
    assert!(metrics.contains(line), "{metrics}");
}

#[tokio::test(start_paused = true)]
async fn a_request_with_no_time_left_never_reaches_the_upstream() {
    let h = start(DEADLINES).await;
    let (status, body) = h.send("/x", &[("x-deadline-ms", "0")]).await.unwrap();
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(
        body,
        "api blocked by deadline (critical request): observed 0 against threshold 0\n"
    );
    let grpc = [("content-type", "application/grpc"), ("grpc-timeout", "0n")];
    let request = h.send("/x", &grpc);
    let (status, _) = request.await.unwrap();
    assert_eq!(status, StatusCode::OK, "a gRPC refusal is trailers-only");
    assert!(h.seen().is_empty(), "{:?}", h.seen());
    let metrics = h.metrics();
    let line =
        "spillway_criticality_requests_total{criticality=\"critical\",outcome=\"deadline\"} 2";
    assert!(metrics.contains(line), "{metrics}");
    let line = "spillway_requests_total{resource=\"api\",outcome=\"block\",reason=\"deadline\"} 2";
    assert!(metrics.contains(line), "{metrics}");
}

#[tokio::test(start_paused = true)]
async fn a_reload_changes_how_requests_are_classified() {
    let h = start(QUEUED).await;
    assert_eq!(h.send("/", &[]).await.unwrap().0, StatusCode::OK);
    // The same routes, now with the route's own class and no `[criticality]` section.
    let reloaded = QUEUED
        .replace("[criticality]\nheader = \"x-criticality\"\n", "")
        .replace(
            "[[criticality.rule]]\nclass = \"sheddable\"\nkey = \"header:user-agent\"\nvalues = [\"crawler\"]\n",
            "",
        )
        .replace("upstream = \"app\"\n", "upstream = \"app\"\ncriticality = \"sheddable_plus\"\n");
    assert!(!reloaded.contains("[criticality]"), "{reloaded}");
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{}\"\n\n{reloaded}",
        h.upstream
    );
    let config = spillway_server::checked::parse(&text, "test.toml").unwrap();
    h.served
        .handle
        .install(spillway_server::Prepared::new(&config).unwrap());
    // The header is no longer read: the route's class counts.
    let (status, _) = h
        .send("/", &[("x-criticality", "critical_plus")])
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let metrics = h.metrics();
    for line in [
        "spillway_criticality_requests_total{criticality=\"critical\",outcome=\"admitted\"} 1",
        "spillway_criticality_requests_total{criticality=\"sheddable_plus\",outcome=\"admitted\"} 1",
        "spillway_criticality_requests_total{criticality=\"critical_plus\",outcome=\"admitted\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_tenant_with_the_longest_line_gives_up_a_place_to_another_tenant() {
    let rules = QUEUED.replace("capacity = 1", "capacity = 4").replace(
        "[criticality]",
        "[tenant]\nkey = \"header:x-api-key\"\n\n[criticality]",
    );
    let h = start(&rules).await;
    let held = h.send("/hold", &[("x-api-key", "a")]);
    h.until_seen(1).await;
    // Tenant a fills the queue (its waiters spread over its two buckets, two in each)...
    let mut waiters = Vec::new();
    for n in 1..=4 {
        let tag = format!("a{n}");
        waiters.push((
            tag.clone(),
            h.send("/hold", &[("x-api-key", "a"), ("x-tag", &tag)]),
        ));
        h.until_waiting("api-limit", n).await;
    }
    // ...and b's newcomer takes the place of one of a's.
    let b = h.send("/hold", &[("x-api-key", "b"), ("x-tag", "b")]);
    waiters.push(("b".to_owned(), b));
    let spillway = h.served.spillway.clone();
    for turn in 0.. {
        let state = spillway.adaptive_state("api-limit").unwrap();
        if state.evicted == [0, 0, 1, 0] {
            break;
        }
        assert!(turn < 100_000, "{state:?}");
        tokio::task::yield_now().await;
    }
    // Each place freed goes to the next in line: held, then four of the five waiters.
    for seen in 1..=5 {
        h.until_seen(seen).await;
        h.release.notify_one();
    }
    let mut served = Vec::new();
    let mut refused = 0;
    for (tag, waiter) in waiters {
        let (status, body) = waiter.await.unwrap();
        match status {
            StatusCode::OK => served.push(tag),
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("{tag}: {other} {body} {:?}", h.seen()),
        }
    }
    assert_eq!(held.await.unwrap().0, StatusCode::OK);
    assert_eq!(refused, 1, "served {served:?}");
    assert!(served.contains(&"b".to_owned()), "served {served:?}");
    assert_eq!(h.seen().len(), 5, "{:?}", h.seen());
}
