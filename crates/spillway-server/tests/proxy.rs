//! The proxy end to end on loopback: an in-process upstream, the proxy in front, and requests
//! through it. Every wait is on an event (a response, a channel), never on time; time is
//! tokio's, paused, so that rules' windows cannot roll over in the middle of a test.

mod support;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::Arc;
use support::server::Served;
use tokio::sync::{oneshot, Notify};

/// Bodies the upstream's `/hold-body` has read whole, over the tests of this file.
static BODIES_READ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// An upstream: `/fail` answers 500, `/hold` waits for `release`, `/echo/...` echoes the path
/// and the `x-forwarded-for` it got, anything else answers 200 "ok".
async fn upstream(release: Arc<Notify>) -> SocketAddr {
    support::upstream(move |request: Request<Incoming>| {
        let release = release.clone();
        async move {
            let path = request.uri().path().to_owned();
            let body = match path.as_str() {
                "/fail" => {
                    let mut response = Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                    return response;
                }
                "/hold" => {
                    release.notified().await;
                    "released".to_owned()
                }
                "/hold-body" => {
                    // Reads the whole body, says so, then waits for `release`.
                    let body = request.into_body().collect().await;
                    if body.is_ok() {
                        BODIES_READ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    release.notified().await;
                    "released".to_owned()
                }
                "/upload" => {
                    // Reads the whole body before it answers.
                    let body = request.into_body().collect().await;
                    match body {
                        Ok(body) => format!("got {}", body.to_bytes().len()),
                        Err(_) => "body failed".to_owned(),
                    }
                }
                "/headers" => {
                    // Every header it got, one `name: value` line each.
                    let mut lines: Vec<String> = request
                        .headers()
                        .iter()
                        .map(|(name, value)| {
                            format!("{name}: {}", String::from_utf8_lossy(value.as_bytes()))
                        })
                        .collect();
                    lines.sort();
                    lines.join("\n")
                }
                "/hop" => {
                    // A header its `Connection` names: for this hop only.
                    let mut response = Response::new(Full::new(Bytes::from("hop")));
                    let headers = response.headers_mut();
                    headers.insert("connection", "x-upstream-secret".parse().unwrap());
                    headers.insert("x-upstream-secret", "1".parse().unwrap());
                    headers.insert("x-kept", "2".parse().unwrap());
                    return response;
                }
                _ if path.starts_with("/echo") => {
                    let forwarded = request
                        .headers()
                        .get("x-forwarded-for")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-")
                        .to_owned();
                    format!("{path} {forwarded}")
                }
                _ => "ok".to_owned(),
            };
            Response::new(Full::new(Bytes::from(body)))
        }
    })
    .await
}

struct Harness {
    served: Served,
    proxy: SocketAddr,
    handle: spillway_server::Proxy,
    spillway: spillway::Spillway,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    release: Arc<Notify>,
}

async fn start(rules: &str) -> Harness {
    start_with("", rules).await
}

/// As [`start`], with more `[listener]` fields.
async fn start_with(listener: &str, rules: &str) -> Harness {
    let release = Arc::new(Notify::new());
    let upstream = upstream(release.clone()).await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\norigin_header = \"x-caller\"\n{listener}\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n{rules}"
    );
    let served = Served::start(&text).await;
    Harness {
        proxy: served.proxy,
        handle: served.handle.clone(),
        spillway: served.spillway.clone(),
        served,
        client: Client::builder(TokioExecutor::new()).build_http(),
        release,
    }
}

impl Harness {
    async fn get(&self, path: &str) -> (StatusCode, http::HeaderMap, String) {
        let uri = format!("http://{}{path}", self.proxy).parse().unwrap();
        let response = self.client.get(uri).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    async fn status(&self, path: &str) -> StatusCode {
        self.get(path).await.0
    }

    /// Sends `/hold` (which waits at the upstream until `release`) and returns once it is in
    /// flight on `resource`; the task ends with its status.
    async fn hold(&self, resource: &str) -> tokio::task::JoinHandle<StatusCode> {
        let (client, uri) = (self.client.clone(), format!("http://{}/hold", self.proxy));
        let held =
            tokio::spawn(async move { client.get(uri.parse().unwrap()).await.unwrap().status() });
        let resource = self.spillway.resource(resource).unwrap();
        while resource.stats().concurrency == 0 {
            tokio::task::yield_now().await;
        }
        held
    }

    /// Sends `raw` on a connection of its own, waits until `reached()` says the request got
    /// where the test wants it, then closes the connection and returns once the proxy has
    /// counted the client as gone.
    async fn send_and_leave(&self, raw: &[u8], reached: impl Fn() -> bool) {
        use tokio::io::AsyncWriteExt;
        let clients_left = r#"spillway_clients_left_total{listener="proxy"}"#;
        let left = self.metric(clients_left);
        let mut stream = tokio::net::TcpStream::connect(self.proxy).await.unwrap();
        stream.write_all(raw).await.unwrap();
        while !reached() {
            tokio::task::yield_now().await;
        }
        drop(stream);
        while self.metric(clients_left) == left {
            tokio::task::yield_now().await;
        }
    }

    /// While a request holds `resource`'s one place (`executes = 1`) at the upstream, the next
    /// to `path` is refused; once the upstream answers, the place comes back and the held call
    /// counts as a success.
    async fn refuses_until_released(&self, path: &str, resource: &spillway::Resource) {
        assert_eq!(resource.stats().concurrency, 1);
        let (status, _, body) = self.get(path).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(body.contains("blocked by executes"), "{body}");
        self.release.notify_one();
        while resource.stats().concurrency != 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(resource.stats().total_success, 1);
    }

    /// The value of `series` (its name and labels, as `/metrics` writes them) in the metrics
    /// text; a series it does not have fails the test.
    fn metric(&self, series: &str) -> f64 {
        let metrics = self.metrics();
        let value = metrics.lines().find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then_some(value)
        });
        match value {
            Some(value) => value.parse().unwrap(),
            None => panic!("no {series} in:\n{metrics}"),
        }
    }

    /// The metrics text, as `/metrics` serves it.
    fn metrics(&self) -> String {
        self.handle.render_metrics().unwrap()
    }

    fn stats(&self, resource: &str) -> spillway::stats::NodeStats {
        self.spillway.resource(resource).unwrap().stats()
    }

    async fn shutdown(self) {
        self.served.shutdown().await;
    }
}

const ROUTES: &str = r#"
[[route]]
resource = "orders"
methods = ["GET"]
path = "/orders"
upstream = "app"

[[route]]
resource = "user"
path = "/echo/users/{id}"
upstream = "app"

[[route]]
resource = "fail"
path = "/fail"
upstream = "app"
"#;

#[tokio::test(start_paused = true)]
async fn routes_map_requests_to_resources_and_forward_them() {
    let h = start(&format!("{ROUTES}\n[default]\nupstream = \"app\"\n")).await;
    let (status, _, body) = h.get("/echo/users/7?x=1").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "/echo/users/7 127.0.0.1")
    );
    assert_eq!(h.status("/orders/42").await, StatusCode::OK);
    assert_eq!(h.status("/somewhere/else").await, StatusCode::OK);
    assert_eq!(h.stats("user").total_pass, 1);
    assert_eq!(h.stats("orders").total_pass, 1);
    assert_eq!(
        h.stats("unmatched").total_pass,
        1,
        "unmatched paths share one resource"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_a_default_upstream_unmatched_paths_get_404() {
    let h = start(ROUTES).await;
    assert_eq!(h.status("/nothing").await, StatusCode::NOT_FOUND);
    assert_eq!(h.status("/bad%2Fpath").await, StatusCode::BAD_REQUEST);
    let metrics = h.metrics();
    for outcome in ["no_route", "bad_path"] {
        let series = format!(
            "spillway_requests_total{{resource=\"unmatched\",outcome=\"{outcome}\",reason=\"\"}} 1"
        );
        assert!(metrics.contains(&series), "no {series} in\n{metrics}");
    }
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_flow_rule_blocks_with_429_and_its_headers() {
    let h = start(&format!(
        "{ROUTES}\n[[flow]]\nid = \"orders-qps\"\nresource = \"orders\"\ncount = 2\n"
    ))
    .await;
    assert_eq!(h.status("/orders").await, StatusCode::OK);
    assert_eq!(h.status("/orders").await, StatusCode::OK);
    let (status, headers, body) = h.get("/orders").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["ratelimit-policy"], r#""orders-qps";q=2;w=1"#);
    assert!(headers.contains_key("retry-after"));
    assert!(
        body.starts_with("orders blocked by flow rule orders-qps"),
        "{body}"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opens_on_upstream_5xx() {
    let h = start(&format!(
        "{ROUTES}\n[[breaker]]\nid = \"fail-errors\"\nresource = \"fail\"\nretry_timeout = \"60s\"\nmin_request_amount = 2\nstrategy = {{ type = \"error_count\", threshold = 1 }}\n"
    ))
    .await;
    assert_eq!(h.status("/fail").await, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(h.status("/fail").await, StatusCode::INTERNAL_SERVER_ERROR);
    let (status, headers, _) = h.get("/fail").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "60");
    assert_eq!(h.stats("fail").total_error, 2);
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn tps_limits_a_route() {
    let h = start(
        r#"
[[route]]
resource = "orders"
path = "/orders"
upstream = "app"
tps = { rate = 2, interval = "1h" }
"#,
    )
    .await;
    assert_eq!(h.status("/orders").await, StatusCode::OK);
    assert_eq!(h.status("/orders").await, StatusCode::OK);
    let (status, _, body) = h.get("/orders").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(body.contains("blocked by tps"), "{body}");
    assert_eq!(h.stats("orders").total_block, 1, "counted as a block");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn executes_refuses_past_its_limit_while_a_request_is_held() {
    let h = start(
        r#"
[[route]]
resource = "hold"
path = "/hold"
upstream = "app"
executes = 1
"#,
    )
    .await;
    let held = h.hold("hold").await;
    let (status, _, body) = h.get("/hold").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(body.contains("blocked by executes"), "{body}");
    h.release.notify_one(); // stored if the upstream is not waiting yet
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    h.shutdown().await;
}

/// A client that leaves while its request is at the upstream: by default the request runs on
/// to the upstream's answer and holds its place until then, so that `executes = 1` refuses
/// the next request while the upstream still works on the first; with
/// `finish_when_client_leaves = false` it is cancelled and its place given back at once. Each
/// is counted in `spillway_clients_left_total`.
#[tokio::test(start_paused = true)]
async fn a_request_whose_client_leaves_holds_its_place_until_the_upstream_answers() {
    const HOLD: &str =
        "[[route]]\nresource = \"hold\"\npath = \"/hold\"\nupstream = \"app\"\nexecutes = 1\n";
    for run_on in [true, false] {
        let listener = if run_on {
            ""
        } else {
            "finish_when_client_leaves = false"
        };
        let h = start_with(listener, HOLD).await;
        let resource = h.spillway.resource("hold").unwrap();
        // The client sends `/hold`, and leaves once the request is in flight.
        h.send_and_leave(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n", || {
            resource.stats().concurrency > 0
        })
        .await;
        if run_on {
            // The upstream still works on it: its place is held, and the next is refused; once
            // it answers, the call counts as a success, in the resource's statistics and in the
            // route's metrics, with its time.
            let running_on = r#"spillway_running_on{listener="proxy"}"#;
            assert_eq!(h.metric(running_on), 1.0);
            h.refuses_until_released("/hold", &resource).await;
            for (series, value) in [
                (r#"spillway_running_on{listener="proxy"}"#, 0.0),
                (
                    r#"spillway_requests_total{resource="hold",outcome="success",reason=""}"#,
                    1.0,
                ),
                (r#"spillway_response_seconds_count{resource="hold"}"#, 1.0),
            ] {
                assert_eq!(h.metric(series), value, "{series}");
            }
        } else {
            // Cancelled: its place comes back while the upstream still works on it, and the
            // next request is admitted (and, never released, times out at the upstream).
            while resource.stats().concurrency != 0 {
                tokio::task::yield_now().await;
            }
            // It reached no verdict on the upstream: no completion, no time, no error (a
            // success timed to its client's leaving, before).
            let stats = resource.stats();
            assert_eq!((stats.total_success, stats.total_error), (0, 0));
            assert_eq!(h.status("/hold").await, StatusCode::GATEWAY_TIMEOUT);
            // Only the second request's end is counted: an error (the 504), after its timeout.
            for (series, value) in [
                (
                    r#"spillway_requests_total{resource="hold",outcome="error",reason=""}"#,
                    1.0,
                ),
                (
                    r#"spillway_requests_total{resource="hold",outcome="success",reason=""}"#,
                    0.0,
                ),
                (r#"spillway_response_seconds_count{resource="hold"}"#, 1.0),
            ] {
                assert_eq!(h.metric(series), value, "{series}");
            }
        }
        h.shutdown().await;
    }
}

/// A request with a body runs on too once its whole body was sent on: `executes = 1` refuses
/// the next request while the upstream, which has read the body, still works on it.
#[tokio::test(start_paused = true)]
async fn a_request_whose_whole_body_was_forwarded_runs_on_when_its_client_leaves() {
    use std::sync::atomic::Ordering;
    const HOLD: &str =
        "[[route]]\nresource = \"hold\"\npath = \"/hold-body\"\nupstream = \"app\"\nexecutes = 1\n";
    let h = start(HOLD).await;
    let resource = h.spillway.resource("hold").unwrap();
    let read = BODIES_READ.load(Ordering::SeqCst);
    h.send_and_leave(
        b"POST /hold-body HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        || BODIES_READ.load(Ordering::SeqCst) > read,
    )
    .await;
    h.refuses_until_released("/hold-body", &resource).await;
    h.shutdown().await;
}

/// A request that runs on after its client left holds a place under `max_connections`, as a
/// connection does: with a cap of 1, the next client is not served until the request ends
/// (here at the upstream timeout, 30 s of paused time, since nobody releases the upstream);
/// with `finish_when_client_leaves = false` it is served at once.
#[tokio::test(start_paused = true)]
async fn a_request_that_runs_on_holds_a_place_under_the_connection_cap() {
    for run_on in [true, false] {
        let listener = format!("max_connections = 1\nfinish_when_client_leaves = {run_on}");
        let routes = format!("{ROUTES}\n[default]\nresource = \"all\"\nupstream = \"app\"\n");
        let h = start_with(&listener, &routes).await;
        let all = h.spillway.resource("all").unwrap();
        h.send_and_leave(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n", || {
            all.stats().concurrency > 0
        })
        .await;
        let started = tokio::time::Instant::now();
        let (status, _, _) = h.get("/orders").await;
        assert_eq!(status, StatusCode::OK);
        let waited = started.elapsed();
        if run_on {
            assert!(waited >= std::time::Duration::from_secs(30), "{waited:?}");
        } else {
            assert!(waited < std::time::Duration::from_secs(1), "{waited:?}");
        }
        h.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_upstream_is_a_502_and_an_error() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = closed.local_addr().unwrap();
    drop(closed);
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n[[upstream]]\nname = \"dead\"\nurl = \"http://{dead}\"\n[default]\nresource = \"dead\"\nupstream = \"dead\"\n"
    );
    let served = Served::start(&text).await;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let response = client
        .get(format!("http://{}/x", served.proxy).parse().unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let dead = served.spillway.resource("dead").unwrap();
    assert_eq!(dead.stats().total_error, 1);
    served.shutdown().await;
}

/// The drain at shutdown waits for a request that runs on after its client left, as for one
/// in flight: it ends when the upstream answers, counted.
#[tokio::test(start_paused = true)]
async fn shutdown_drains_a_request_that_runs_on() {
    let h = start("[default]\nresource = \"all\"\nupstream = \"app\"\n").await;
    let resource = h.spillway.resource("all").unwrap();
    h.send_and_leave(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n", || {
        resource.stats().concurrency > 0
    })
    .await;
    let (release, handle) = (h.release.clone(), h.handle.clone());
    let shutting_down = tokio::spawn(h.shutdown());
    // A second of paused time: the connections are closed, the request still runs on.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(
        !shutting_down.is_finished(),
        "waits for the request running on"
    );
    assert_eq!(resource.stats().concurrency, 1);
    release.notify_one();
    shutting_down.await.unwrap();
    assert_eq!(resource.stats().concurrency, 0);
    assert_eq!(resource.stats().total_success, 1);
    let metrics = handle.render_metrics().unwrap();
    let success = r#"spillway_requests_total{resource="all",outcome="success",reason=""} 1"#;
    assert!(metrics.lines().any(|line| line == success), "{metrics}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_a_request_in_flight() {
    let h = start("[default]\nresource = \"all\"\nupstream = \"app\"\n").await;
    let in_flight = {
        let (client, uri) = (h.client.clone(), format!("http://{}/hold", h.proxy));
        tokio::spawn(async move {
            let response = client.get(uri.parse().unwrap()).await.unwrap();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, body)
        })
    };
    let resource = h.spillway.resource("all").unwrap();
    while resource.stats().concurrency == 0 {
        tokio::task::yield_now().await;
    }
    let release = h.release.clone();
    let shutting_down = tokio::spawn(h.shutdown());
    tokio::task::yield_now().await;
    assert!(
        !shutting_down.is_finished(),
        "waits for the request in flight"
    );
    release.notify_one();
    let (status, body) = in_flight.await.unwrap();
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"released"[..]));
    shutting_down.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_upstream_slower_than_the_timeout_is_a_504_and_an_error() {
    // Paused time: the 5 s timeout passes as soon as everything waits, with no real wait.
    let h = start("[default]\nresource = \"all\"\nupstream = \"app\"\n").await;
    assert_eq!(h.status("/hold").await, StatusCode::GATEWAY_TIMEOUT);
    let stats = h.stats("all");
    assert_eq!((stats.total_error, stats.concurrency), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn an_upstream_timeout_is_a_drop_to_an_adaptive_rule() {
    let h = start(
        "[default]\nresource = \"all\"\nupstream = \"app\"\n\n[[adaptive]]\nid = \"all-aimd\"\n\
         resource = \"all\"\nalgorithm = { type = \"aimd\", min_limit = 1 }\n",
    )
    .await;
    assert_eq!(h.status("/hold").await, StatusCode::GATEWAY_TIMEOUT);
    let state = h.spillway.adaptive_state("all-aimd").unwrap();
    // AIMD backs off on a drop: (int) (20 x 0.9).
    assert_eq!((state.limit, state.last_change.as_str()), (18, "dropped"));
    assert_eq!(state.in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn the_origin_header_selects_origin_rules() {
    let h = start(
        r#"
[default]
resource = "all"
upstream = "app"

[[flow]]
id = "no-batch"
resource = "all"
count = 0
limit_app = "batch"
"#,
    )
    .await;
    assert_eq!(h.status("/x").await, StatusCode::OK);
    let from = |caller: &str| {
        Request::get(format!("http://{}/x", h.proxy))
            .header("x-caller", caller)
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    let web = h.client.request(from("web")).await.unwrap();
    assert_eq!(web.status(), StatusCode::OK);
    let batch = h.client.request(from("batch")).await.unwrap();
    assert_eq!(batch.status(), StatusCode::TOO_MANY_REQUESTS);
    let all = h.spillway.resource("all").unwrap();
    assert!(all.origin_stats("batch").is_some());
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_system_rule_guards_every_route() {
    let h = start(&format!(
        "{ROUTES}\n[default]\nupstream = \"app\"\n\n[[system]]\nid = \"guard\"\nqps = 2\n"
    ))
    .await;
    assert_eq!(h.status("/orders").await, StatusCode::OK);
    assert_eq!(h.status("/fail").await, StatusCode::INTERNAL_SERVER_ERROR);
    let (status, _, body) = h.get("/echo/users/1").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(body.contains("blocked by system qps rule guard"), "{body}");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_rule_refuses_past_its_limit_and_learns_from_each_response() {
    let h = start(
        r#"
[[route]]
resource = "hold"
path = "/hold"
upstream = "app"

[[adaptive]]
id = "hold-adaptive"
resource = "hold"
algorithm = { type = "aimd", initial_limit = 1, min_limit = 1 }
"#,
    )
    .await;
    let held = h.hold("hold").await;
    let (status, _, body) = h.get("/hold").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        body.contains("blocked by adaptive rule hold-adaptive"),
        "{body}"
    );
    h.release.notify_one(); // stored if the upstream is not waiting yet
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    // The response was a sample: in time, with the limit in use, AIMD grows.
    let state = h.spillway.adaptive_state("hold-adaptive").unwrap();
    assert_eq!((state.samples, state.limit, state.in_flight), (1, 2, 0));
    assert_eq!(state.refusals, 1);
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_configured_blocked_response_replaces_the_429() {
    let h = start(&format!(
        "{ROUTES}\n[blocked]\nstatus = 503\nbody = \"busy, try later\\n\"\n\n[[flow]]\nid = \"none\"\nresource = \"orders\"\ncount = 0\n"
    ))
    .await;
    let (status, headers, body) = h.get("/orders").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "busy, try later\n")
    );
    assert!(headers.contains_key("retry-after"), "Retry-After is kept");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn actives_wait_for_a_place_then_refuse_with_the_time_waited() {
    // Paused time: the 200 ms wait passes as soon as everything waits.
    let h = start(
        r#"
[[route]]
resource = "hold"
path = "/hold"
upstream = "app"
actives = { max = 1, timeout = "200ms" }
"#,
    )
    .await;
    let held = h.hold("hold").await;
    let (status, _, body) = h.get("/hold").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        body.contains("blocked by actives") && body.contains("after waiting 200ms"),
        "{body}"
    );
    h.release.notify_one();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn the_connection_cap_closes_connections_past_it() {
    let release = Arc::new(Notify::new());
    let upstream = upstream(release.clone()).await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\nmax_connections = 1\nat_capacity = \"close\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n[default]\nresource = \"all\"\nupstream = \"app\"\n"
    );
    let served = Served::start(&text).await;
    let (proxy, spillway) = (served.proxy, served.spillway.clone());
    // One connection holds the only place (its request waits at the upstream).
    let first: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let held = tokio::spawn(async move {
        first
            .get(format!("http://{proxy}/hold").parse().unwrap())
            .await
            .map(|r| r.status())
    });
    let all = spillway.resource("all").unwrap();
    while all.stats().concurrency == 0 {
        tokio::task::yield_now().await;
    }
    // A second connection is accepted and closed at once: the request fails.
    let second: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let refused = second
        .get(format!("http://{proxy}/x").parse().unwrap())
        .await;
    assert!(refused.is_err(), "closed at the cap");
    release.notify_one();
    assert_eq!(held.await.unwrap().unwrap(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn shadow_mode_counts_what_would_block_and_forwards_it() {
    let h = start_with(
        "shadow = true",
        &format!("{ROUTES}\n[[flow]]\nid = \"none\"\nresource = \"orders\"\ncount = 0\n"),
    )
    .await;
    assert_eq!(h.status("/orders").await, StatusCode::OK);
    assert_eq!(h.status("/orders").await, StatusCode::OK);
    let orders = h.stats("orders");
    assert_eq!(
        (orders.total_pass, orders.total_block),
        (0, 2),
        "spillway saw two blocks"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_rule_in_shadow_mode_forwards_what_it_would_block_and_the_others_still_block() {
    let h = start(&format!(
        "{ROUTES}\n[[flow]]\nid = \"try-0\"\nresource = \"orders\"\ncount = 0\nshadow = true\n\n[[flow]]\nid = \"limit-2\"\nresource = \"orders\"\ncount = 2\n"
    ))
    .await;
    assert_eq!(h.status("/orders").await, StatusCode::OK);
    assert_eq!(h.status("/orders").await, StatusCode::OK);
    let (status, headers, _) = h.get("/orders").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["ratelimit-policy"], r#""limit-2";q=2;w=1"#);
    let orders = h.stats("orders");
    assert_eq!((orders.total_pass, orders.total_block), (2, 1));
    let try_0 = h.spillway.flow_rule_stats("try-0").unwrap();
    assert_eq!(try_0.shadow_refusals, 3, "it would have refused all three");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shadow_mode_lets_dubbo_limits_through_too() {
    let h = start_with(
        "shadow = true",
        r#"
[[route]]
resource = "orders"
path = "/orders"
upstream = "app"
tps = { rate = 1, interval = "1h" }
"#,
    )
    .await;
    assert_eq!(h.status("/orders").await, StatusCode::OK);
    assert_eq!(
        h.status("/orders").await,
        StatusCode::OK,
        "over the TPS limit, forwarded"
    );
    let orders = h.stats("orders");
    assert_eq!((orders.total_pass, orders.total_block), (2, 1));
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn every_spelling_of_a_path_meets_its_route_and_is_forwarded_in_normal_form() {
    let h = start(&format!("{ROUTES}\n[default]\nupstream = \"app\"\n")).await;
    for path in [
        "//echo/users/7",
        "/echo//users/7",
        "/x/../echo/users/7",
        "/echo/./users/7",
        "/%65cho/users/%37",
        "/%2e%2e/echo/users/7?q=%2F",
    ] {
        let (status, _, body) = h.get(path).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, "/echo/users/7 127.0.0.1"),
            "{path}"
        );
    }
    assert_eq!(h.stats("user").total_pass, 6, "each met the route's rules");
    assert_eq!(h.stats("unmatched").total_pass, 0, "none went unmatched");
    // What cannot be routed safely is refused.
    for path in [
        "/echo%2Fusers/7",
        "/echo/users/7%5C",
        "/echo/users/%00",
        "/echo/%zz",
    ] {
        let (status, _, body) = h.get(path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert!(body.starts_with("bad path: "), "{body}");
    }
    h.shutdown().await;
}

/// Connects to the proxy and writes `bytes`, then reads until the proxy closes the
/// connection (or an hour of paused time passes): what it read.
async fn raw_exchange(proxy: SocketAddr, bytes: &[u8]) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut read = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(3600),
        stream.read_to_end(&mut read),
    )
    .await;
    closed
        .ok()
        .map(|_| String::from_utf8_lossy(&read).into_owned())
}

#[tokio::test(start_paused = true)]
async fn a_slow_request_head_and_an_idle_kept_alive_connection_are_closed() {
    let h = start_with("header_timeout = \"5s\"", ROUTES).await;
    let start = tokio::time::Instant::now();
    // Half a head, then nothing (slowloris).
    let read = raw_exchange(h.proxy, b"GET /orders HTTP/1.1\r\nHost: x\r\n").await;
    assert!(read.is_some(), "the connection stayed open");
    assert!(start.elapsed() >= std::time::Duration::from_secs(5));
    assert!(start.elapsed() < std::time::Duration::from_secs(3600));
    // A whole request, answered, then an idle keep-alive: closed after the same timeout.
    let start = tokio::time::Instant::now();
    let read = raw_exchange(h.proxy, b"GET /orders HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("closed once idle");
    assert!(read.starts_with("HTTP/1.1 200"), "{read}");
    assert!(start.elapsed() >= std::time::Duration::from_secs(5));
    let metrics = h.metrics();
    assert!(
        metrics.contains(r#"spillway_header_timeouts_total{listener="proxy"} 2"#),
        "{metrics}"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_body_that_stalls_gets_408_and_frees_its_place() {
    let h = start_with(
        "body_timeout = \"2s\"",
        &format!(
            "{ROUTES}\n[[route]]\nresource = \"upload\"\npath = \"/upload\"\nupstream = \"app\"\n"
        ),
    )
    .await;
    // 10 of the 100 bytes promised, then nothing.
    let read = raw_exchange(
        h.proxy,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
    )
    .await
    .expect("answered");
    assert!(read.starts_with("HTTP/1.1 408"), "{read}");
    assert_eq!(h.stats("upload").concurrency, 0, "the place was freed");
    let metrics = h.metrics();
    assert!(
        metrics.contains(r#"spillway_body_timeouts_total{listener="proxy"} 1"#),
        "{metrics}"
    );
    // A body that arrives in time goes through.
    let read = raw_exchange(
        h.proxy,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    )
    .await
    .expect("answered and closed");
    assert!(
        read.starts_with("HTTP/1.1 200") && read.ends_with("got 5"),
        "{read}"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_body_sent_byte_by_byte_past_the_upstream_s_time_is_the_client_s_fault() {
    // A breaker that opens at the first error, and routes with a deadline of their own (one
    // whose upstream reads the body, then holds the call).
    let h = start_with(
        "upstream_timeout = \"5s\"\nbody_timeout = \"2s\"",
        "[[route]]\nresource = \"upload\"\npath = \"/upload\"\nupstream = \"app\"\ndeadline = \"1s\"\n\n\
         [[route]]\nresource = \"upload\"\npath = \"/hold-body\"\nupstream = \"app\"\ndeadline = \"1s\"\n\n\
         [[breaker]]\nid = \"upload-errors\"\nresource = \"upload\"\nretry_timeout = \"60s\"\n\
         min_request_amount = 1\nstrategy = { type = \"error_count\", threshold = 1 }\n",
    )
    .await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // 12 bytes, one every `gap` ms; what the client reads back.
    let drip = |path: &'static str, gap: u64| async move {
        let mut stream = tokio::net::TcpStream::connect(h.proxy).await.unwrap();
        let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        for _ in 0..12 {
            tokio::time::sleep(std::time::Duration::from_millis(gap)).await;
            if stream.write_all(b"x").await.is_err() {
                break;
            }
        }
        let mut read = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            stream.read_to_end(&mut read),
        )
        .await;
        String::from_utf8_lossy(&read).into_owned()
    };
    // Never a stall, but 1.2 s in all, past the deadline; then a body that ends at 960 ms,
    // leaving the upstream 40 ms of the second; then one that ends at 480 ms, leaving it more
    // than half (a call its client paced: more than a quarter of it waiting on the body).
    for (path, gap) in [
        ("/upload", 100),
        ("/upload", 100),
        ("/hold-body", 80),
        ("/hold-body", 40),
    ] {
        let read = drip(path, gap).await;
        assert!(read.starts_with("HTTP/1.1 408"), "{path}: {read}");
        assert!(read.contains("request body too slow"), "{read}");
    }
    // The client's fault, each time: no error, the breaker still closed (before, each was the
    // upstream's 504, and the first opened the breaker for everyone; found by an attack, the
    // third by a second one, the last by a third).
    let metrics = h.metrics();
    for line in [
        r#"spillway_requests_total{resource="upload",outcome="client_error",reason="body_too_slow"} 4"#,
        r#"spillway_requests_total{resource="upload",outcome="error",reason=""} 0"#,
        r#"spillway_breaker_state{rule="upload-errors",resource="upload"} 0"#,
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    // A body sent at once, and an upstream that holds the call past the deadline: the
    // upstream's failure, as before.
    let read = drip("/hold-body", 0).await;
    assert!(read.starts_with("HTTP/1.1 504"), "{read}");
    let metrics = h.metrics();
    let line = r#"spillway_requests_total{resource="upload",outcome="error",reason=""} 1"#;
    assert!(metrics.contains(line), "{line} not in\n{metrics}");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn hop_by_hop_headers_stop_here_and_the_peer_is_appended_to_the_forwarding_lists() {
    let h = start(&format!(
        "{ROUTES}\n[[route]]\nresource = \"misc\"\npath = \"/headers\"\nupstream = \"app\"\n\
         [[route]]\nresource = \"hop\"\npath = \"/hop\"\nupstream = \"app\"\n"
    ))
    .await;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let request = Request::builder()
        .uri(format!("http://{}/headers", h.proxy))
        .header("connection", "x-client-secret")
        .header("x-client-secret", "1")
        .header("proxy-connection", "keep-alive")
        .header("x-forwarded-for", "10.1.1.1")
        .header("x-forwarded-for", "10.2.2.2")
        .header("forwarded", "for=10.1.1.1")
        .header("x-kept", "yes")
        .body(Empty::new())
        .unwrap();
    let response = client.request(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let seen = String::from_utf8_lossy(&body).into_owned();
    assert!(!seen.contains("x-client-secret"), "{seen}");
    assert!(!seen.contains("proxy-connection"), "{seen}");
    assert!(seen.contains("x-kept: yes"), "{seen}");
    assert!(
        seen.contains("x-forwarded-for: 10.1.1.1, 10.2.2.2, 127.0.0.1"),
        "{seen}"
    );
    assert!(
        seen.contains("forwarded: for=10.1.1.1, for=127.0.0.1"),
        "{seen}"
    );
    // And on the way back.
    let (status, headers, _) = h.get("/hop").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!headers.contains_key("x-upstream-secret"), "{headers:?}");
    assert_eq!(headers["x-kept"], "2");
    h.shutdown().await;
}

/// Sends `bytes` and closes the write side (a client that gave up), then reads what comes
/// back until the proxy closes.
async fn send_and_leave(proxy: SocketAddr, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut read = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(3600),
        stream.read_to_end(&mut read),
    )
    .await;
    String::from_utf8_lossy(&read).into_owned()
}

const UPLOADS: &str = "\n[[route]]\nresource = \"upload\"\npath = \"/upload\"\nupstream = \"app\"\n\n[[breaker]]\nid = \"upload-errors\"\nresource = \"upload\"\nretry_timeout = \"60s\"\nmin_request_amount = 1\nstrategy = { type = \"error_count\", threshold = 5 }\n";

#[tokio::test(start_paused = true)]
async fn a_client_s_bad_or_cut_short_body_is_its_fault_and_never_opens_a_breaker() {
    let h = start(&format!("{ROUTES}{UPLOADS}")).await;
    // Six chunked bodies whose chunk size does not parse: 400 each, the client's fault.
    for _ in 0..6 {
        let read = raw_exchange(
            h.proxy,
            b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
        )
        .await
        .expect("answered");
        assert!(read.starts_with("HTTP/1.1 400"), "{read}");
        assert!(read.ends_with("malformed request body\n"), "{read}");
    }
    // Six uploads cut short: 10 of 1,000 bytes, then the client leaves.
    for _ in 0..6 {
        send_and_leave(
            h.proxy,
            b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789",
        )
        .await;
    }
    // A chunk size of 2^64 - 1 (which nginx refuses as too large): streamed, never buffered,
    // then cut short, as any body that ends early; the client's fault too.
    send_and_leave(
        h.proxy,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nhello",
    )
    .await;
    // The breaker (5 errors) is still closed, and no error was counted anywhere.
    let stats = h.stats("upload");
    assert_eq!((stats.total_error, stats.total_success), (0, 0));
    assert_eq!(stats.concurrency, 0, "every place was given back");
    assert_eq!(
        h.spillway.breaker_state("upload-errors"),
        Some(spillway::breaker::BreakerState::Closed)
    );
    let metrics = h.metrics();
    for series in [
        r#"spillway_requests_total{resource="upload",outcome="client_error",reason="bad_body"} 6"#,
        r#"spillway_requests_total{resource="upload",outcome="client_error",reason="client_gone"} 7"#,
        r#"spillway_requests_total{resource="upload",outcome="error",reason=""} 0"#,
    ] {
        assert!(metrics.contains(series), "{series} in {metrics}");
    }
    // A good upload goes through.
    let read = raw_exchange(
        h.proxy,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    )
    .await
    .expect("answered");
    assert!(
        read.starts_with("HTTP/1.1 200") && read.ends_with("got 5"),
        "{read}"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_body_past_the_cap_gets_413_announced_or_not() {
    let h = start_with("max_body_size = 100", &format!("{ROUTES}{UPLOADS}")).await;
    // Announced larger: refused before it takes any place.
    let read = raw_exchange(
        h.proxy,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\nConnection: close\r\n\r\n",
    )
    .await
    .expect("answered");
    assert!(read.starts_with("HTTP/1.1 413"), "{read}");
    assert_eq!(h.stats("upload").total_pass, 0);
    // Chunked, running past it: cut there.
    let mut chunked =
        b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            .to_vec();
    for _ in 0..3 {
        chunked.extend_from_slice(b"3c\r\n");
        chunked.extend_from_slice(&[b'a'; 60]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let read = raw_exchange(h.proxy, &chunked).await.expect("answered");
    assert!(read.starts_with("HTTP/1.1 413"), "{read}");
    assert_eq!(h.stats("upload").total_error, 0);
    // At the cap, it passes.
    let mut body =
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"
            .to_vec();
    body.extend_from_slice(&[b'b'; 100]);
    let read = raw_exchange(h.proxy, &body).await.expect("answered");
    assert!(read.ends_with("got 100"), "{read}");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_head_past_max_header_size_gets_431_and_one_within_it_passes() {
    let h = start_with("max_header_size = 16384", ROUTES).await;
    let head = |size: usize| {
        let mut head = b"GET /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', size));
        head.extend_from_slice(b"\r\n\r\n");
        head
    };
    let read = raw_exchange(h.proxy, &head(12_000))
        .await
        .expect("answered");
    assert!(read.starts_with("HTTP/1.1 200"), "{read}");
    let read = raw_exchange(h.proxy, &head(20_000))
        .await
        .expect("answered");
    assert!(read.starts_with("HTTP/1.1 431"), "{read}");
    // With no end of line at all: refused as soon as the cap is passed, not at the timeout.
    let start = tokio::time::Instant::now();
    let mut unfinished = b"GET /orders HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    unfinished.extend(std::iter::repeat_n(b'a', 300_000));
    let read = send_and_leave(h.proxy, &unfinished).await;
    assert!(read.starts_with("HTTP/1.1 431"), "{read}");
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
    h.shutdown().await;
}

/// An upstream that answers its first connection's request with a body without end, and
/// says when that connection is closed; and a proxy in front of it with a send timeout of 2 s.
async fn endless_behind_proxy() -> (SocketAddr, oneshot::Receiver<()>, Served) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let (closed_tx, closed) = oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 1024];
        let _ = stream.read(&mut head).await.unwrap();
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await
            .unwrap();
        let mut chunk = b"4000\r\n".to_vec();
        chunk.extend_from_slice(&[b'x'; 0x4000]);
        chunk.extend_from_slice(b"\r\n");
        while stream.write_all(&chunk).await.is_ok() {}
        let _ = closed_tx.send(());
    });
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\nsend_timeout = \"300ms\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n[default]\nupstream = \"app\"\n"
    );
    let served = Served::start(&text).await;
    (served.proxy, closed, served)
}

/// Waits for the upstream connection to close, and says how long that took.
///
/// The two send-timeout tests run on real time: on tokio's paused clock, a moment when the
/// kernel still holds loopback bytes in flight looks idle, and the clock jumps to whatever timer
/// is next (the 30 s header timeout once, in CI). The send timeout is 300 ms; every other timeout
/// is 30 s or more, so a close before 20 s can only be the send timeout's.
async fn upstream_closed(closed: oneshot::Receiver<()>) -> std::time::Duration {
    let start = tokio::time::Instant::now();
    tokio::time::timeout(std::time::Duration::from_secs(25), closed)
        .await
        .expect("the upstream connection was closed")
        .unwrap();
    start.elapsed()
}

#[tokio::test]
async fn a_client_that_stops_reading_is_closed_at_the_send_timeout_with_its_upstream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (proxy, closed, _served) = endless_behind_proxy().await;
    // The client asks, then reads nothing.
    let mut client = tokio::net::TcpStream::connect(proxy).await.unwrap();
    client
        .write_all(b"GET /download HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let waited = upstream_closed(closed).await;
    assert!(
        waited >= std::time::Duration::from_millis(300)
            && waited < std::time::Duration::from_secs(20),
        "{waited:?}"
    );
    // And the client's connection is reset (`SO_LINGER` 0: what it did not read is dropped,
    // not left in the kernel's send queue): what had come, then the reset, at once.
    let mut sink = Vec::new();
    let ended = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.read_to_end(&mut sink),
    )
    .await
    .expect("reset within 10 s");
    assert_eq!(
        ended.unwrap_err().kind(),
        std::io::ErrorKind::ConnectionReset,
        "reset, not closed gracefully"
    );
}

#[tokio::test]
async fn an_http2_stream_given_no_window_frees_its_upstream_at_the_send_timeout() {
    let (proxy, closed, _served) = endless_behind_proxy().await;
    // HTTP/2 with prior knowledge; the response's body is never read, so the client grants
    // no window past the first 64 KiB: the socket never fills, no write ever waits.
    let stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let request = Request::get(format!("http://{proxy}/download"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let waited = upstream_closed(closed).await;
    assert!(
        waited >= std::time::Duration::from_millis(300)
            && waited < std::time::Duration::from_secs(20),
        "{waited:?}"
    );
    // The stream fails when the client next reads it.
    let mut body = response.into_body();
    let mut failed = false;
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "the stream was failed, not ended as if complete");
}

#[tokio::test(start_paused = true)]
async fn a_request_with_no_host_or_two_is_refused_and_a_chunked_body_loses_its_stale_length() {
    let h = start(&format!("{ROUTES}\n[[route]]\nresource = \"headers\"\npath = \"/headers\"\nupstream = \"app\"\n{UPLOADS}")).await;
    for (request, why) in [
        (
            &b"GET /orders HTTP/1.1\r\nConnection: close\r\n\r\n"[..],
            "needs a Host",
        ),
        (
            &b"GET /orders HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n"[..],
            "more than one Host",
        ),
    ] {
        let read = raw_exchange(h.proxy, request).await.expect("answered");
        assert!(
            read.starts_with("HTTP/1.1 400") && read.contains(why),
            "{read}"
        );
    }
    // HTTP/1.0 needs none.
    let read = raw_exchange(h.proxy, b"GET /orders HTTP/1.0\r\n\r\n")
        .await
        .expect("answered");
    assert!(read.starts_with("HTTP/1.0 200"), "{read}");
    // `Transfer-Encoding` beside a `Content-Length` that disagrees: framed as chunked, and
    // forwarded without the stale length (the upstream reads all 10 bytes).
    let read = raw_exchange(
        h.proxy,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\na\r\n0123456789\r\n0\r\n\r\n",
    )
    .await
    .expect("answered");
    assert!(
        read.starts_with("HTTP/1.1 200") && read.ends_with("got 10"),
        "{read}"
    );
    assert_eq!(h.stats("upload").total_error, 0);
    h.shutdown().await;
}
