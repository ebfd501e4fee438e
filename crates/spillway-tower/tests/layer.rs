//! The layer through a real axum router, on tokio's paused clock: blocks and their headers,
//! queued requests, dropped waiters, shared limits, statistics, breakers and streaming bodies.
#![cfg(feature = "axum")]

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
use spillway::breaker::{BreakerRule, BreakerStrategy};
use spillway::flow::{Behavior, FlowRule, LimitApp};
use spillway_tower::{SpillwayLayer, TokioClock};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tower::ServiceExt;

/// A response body fed through a channel: ends when the sender is dropped.
struct Channel(mpsc::UnboundedReceiver<Frame<Bytes>>);

impl http_body::Body for Channel {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|frame| frame.map(Ok))
    }
}

fn spillway() -> spillway::Spillway {
    spillway::Spillway::new_with_clock(TokioClock::new())
}

fn app(spillway: &spillway::Spillway) -> Router {
    Router::new()
        .route("/hello", get(|| async { "hi" }))
        .route("/fail", get(|| async { StatusCode::INTERNAL_SERVER_ERROR }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                "done"
            }),
        )
        .layer(
            SpillwayLayer::new(spillway.clone())
                .by_route()
                .origin_header("x-caller"),
        )
}

fn get_request(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

async fn status(app: &Router, path: &str) -> StatusCode {
    app.clone()
        .oneshot(get_request(path))
        .await
        .unwrap()
        .status()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers[name].to_str().unwrap()
}

#[tokio::test(start_paused = true)]
async fn at_the_limit_requests_get_429_with_retry_after_and_ratelimit_fields() {
    let spillway = spillway();
    spillway
        .load_flow_rules(vec![FlowRule::qps("hello-qps", "GET /hello", 2.0)])
        .unwrap();
    let app = app(&spillway);
    assert_eq!(status(&app, "/hello").await, StatusCode::OK);
    assert_eq!(status(&app, "/hello").await, StatusCode::OK);
    let blocked = app.clone().oneshot(get_request("/hello")).await.unwrap();
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    let headers = blocked.headers();
    assert_eq!(header(headers, "retry-after"), "1");
    assert_eq!(
        header(headers, "ratelimit-policy"),
        r#""hello-qps";q=2;w=1"#
    );
    assert_eq!(header(headers, "ratelimit"), r#""hello-qps";r=0;t=1"#);
    let body = blocked.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        body,
        "GET /hello blocked by flow rule hello-qps: observed 2 against threshold 2, retry after 500ms\n"
    );
    // Other routes are other resources.
    assert_eq!(
        status(&app, "/fail").await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    let stats = spillway.resource("GET /hello").unwrap().stats();
    assert_eq!((stats.total_pass, stats.block_qps), (2, 1.0));
}

#[tokio::test(start_paused = true)]
async fn throttled_requests_wait_on_the_timer_and_are_served_in_order() {
    let spillway = spillway();
    spillway
        .load_flow_rules(vec![FlowRule::qps("pace", "GET /hello", 10.0)
            .with_behavior(Behavior::throttle(Duration::from_secs(1)))])
        .unwrap();
    let app = app(&spillway);
    let start = Instant::now();
    let requests: Vec<_> = (0..4)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                let response = app.oneshot(get_request("/hello")).await.unwrap();
                (response.status(), start.elapsed())
            })
        })
        .collect();
    let mut served = Vec::new();
    for request in requests {
        served.push(request.await.unwrap());
    }
    let ms = Duration::from_millis;
    assert_eq!(
        served,
        [
            (StatusCode::OK, ms(0)),
            (StatusCode::OK, ms(100)),
            (StatusCode::OK, ms(200)),
            (StatusCode::OK, ms(300)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_gives_its_slot_to_the_next() {
    let spillway = spillway();
    spillway
        .load_flow_rules(vec![FlowRule::qps("pace", "GET /hello", 10.0)
            .with_behavior(Behavior::throttle(Duration::from_secs(1)))])
        .unwrap();
    let app = app(&spillway);
    let start = Instant::now();
    assert_eq!(status(&app, "/hello").await, StatusCode::OK); // t = 0
                                                              // The next slot is t = 100 ms; this caller gives up at t = 10 ms.
    let gave_up = tokio::time::timeout(Duration::from_millis(10), status(&app, "/hello")).await;
    assert!(gave_up.is_err());
    // Its slot comes back: the next caller is served at t = 100 ms, not 200 ms.
    assert_eq!(status(&app, "/hello").await, StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn clones_share_one_limit_across_connections() {
    let spillway = spillway();
    spillway
        .load_flow_rules(vec![FlowRule::in_flight("GET /slow", 1).with_id("one")])
        .unwrap();
    let app = app(&spillway);
    // As axum serves each connection with its own clone of the router.
    let (first_connection, second_connection) = (app.clone(), app.clone());
    let slow = tokio::spawn(async move {
        first_connection
            .oneshot(get_request("/slow"))
            .await
            .unwrap()
            .status()
    });
    tokio::task::yield_now().await;
    let blocked = second_connection
        .oneshot(get_request("/slow"))
        .await
        .unwrap();
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(blocked.headers(), "ratelimit-policy"),
        r#""one";q=1;qu="concurrent-requests""#
    );
    assert_eq!(slow.await.unwrap(), StatusCode::OK);
    assert_eq!(status(&app, "/slow").await, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn response_times_and_errors_reach_the_statistics() {
    let spillway = spillway();
    let app = app(&spillway);
    assert_eq!(status(&app, "/slow").await, StatusCode::OK);
    assert_eq!(
        status(&app, "/fail").await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    let slow = spillway.resource("GET /slow").unwrap().stats();
    assert_eq!((slow.avg_rt_micros, slow.total_error), (100_000.0, 0));
    let fail = spillway.resource("GET /fail").unwrap().stats();
    assert_eq!((fail.total_success, fail.total_error), (1, 1));
    assert_eq!(spillway.inbound_stats().total_pass, 2, "inbound by default");
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opens_on_5xx_and_probes_after_its_timeout() {
    let spillway = spillway();
    spillway
        .load_breaker_rules(vec![BreakerRule::new(
            "fail-errors",
            "GET /fail",
            BreakerStrategy::ErrorCount { threshold: 1 },
            Duration::from_secs(10),
        )
        .with_min_request_amount(2)])
        .unwrap();
    let app = app(&spillway);
    for _ in 0..2 {
        assert_eq!(
            status(&app, "/fail").await,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
    let blocked = app.clone().oneshot(get_request("/fail")).await.unwrap();
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(blocked.headers(), "retry-after"), "10");
    assert!(
        blocked.headers().get("ratelimit").is_none(),
        "a breaker is no quota"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The probe goes through (and fails again).
    assert_eq!(
        status(&app, "/fail").await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(status(&app, "/fail").await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(start_paused = true)]
async fn the_origin_header_selects_origin_rules() {
    let spillway = spillway();
    spillway
        .load_flow_rules(vec![FlowRule::qps("no-batch", "GET /hello", 0.0)
            .with_limit_app(LimitApp::Origin("batch".into()))])
        .unwrap();
    let app = app(&spillway);
    let from = |caller: &str| {
        Request::get("/hello")
            .header("x-caller", caller)
            .body(Body::empty())
            .unwrap()
    };
    let web = app.clone().oneshot(from("web")).await.unwrap();
    assert_eq!(web.status(), StatusCode::OK);
    let batch = app.clone().oneshot(from("batch")).await.unwrap();
    assert_eq!(batch.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// A router whose `/stream` response streams what the test sends.
fn streaming_app(
    spillway: &spillway::Spillway,
) -> (
    Router,
    mpsc::UnboundedReceiver<mpsc::UnboundedSender<Frame<Bytes>>>,
) {
    let (senders_tx, senders_rx) = mpsc::unbounded_channel();
    let app = Router::new()
        .route(
            "/stream",
            get(move || {
                let senders_tx = senders_tx.clone();
                async move {
                    let (tx, rx) = mpsc::unbounded_channel();
                    senders_tx.send(tx).unwrap();
                    Body::new(Channel(rx))
                }
            }),
        )
        .layer(SpillwayLayer::new(spillway.clone()).by_route());
    (app, senders_rx)
}

/// A half-open breaker's probe is decided by its response head: a stream that lasts past the
/// probe timeout neither holds the breaker half-open nor counts as a lost probe.
#[tokio::test(start_paused = true)]
async fn a_streaming_probe_closes_its_breaker_when_its_head_comes() {
    let spillway = spillway();
    spillway
        .load_breaker_rules(vec![BreakerRule::new(
            "stream-errors",
            "GET /stream",
            BreakerStrategy::ErrorCount { threshold: 0 },
            Duration::from_secs(10),
        )
        .with_min_request_amount(1)])
        .unwrap();
    let (app, mut senders) = streaming_app(&spillway);
    let mut failed = spillway.entry("GET /stream").enter_owned().unwrap();
    failed.mark_error();
    drop(failed);
    let state = || spillway.breaker_state("stream-errors").unwrap();
    assert_eq!(state(), spillway::breaker::BreakerState::Open);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let probe = app.clone().oneshot(get_request("/stream")).await.unwrap();
    let sender = senders.recv().await.unwrap();
    assert_eq!(probe.status(), StatusCode::OK);
    assert_eq!(state(), spillway::breaker::BreakerState::Closed);
    // A minute of stream, past the probe timeout (10 s): the others pass all along.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let other = app.clone().oneshot(get_request("/stream")).await.unwrap();
        assert_eq!(other.status(), StatusCode::OK);
        drop(senders.recv().await.unwrap());
        assert!(other.into_body().collect().await.is_ok());
    }
    drop(sender);
    assert!(probe.into_body().collect().await.is_ok());
    assert_eq!(state(), spillway::breaker::BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_streaming_response_holds_its_place_until_its_body_ends() {
    let spillway = spillway();
    let (app, mut senders) = streaming_app(&spillway);
    let resource = spillway.resource("GET /stream").unwrap();
    let response = app.clone().oneshot(get_request("/stream")).await.unwrap();
    let sender = senders.recv().await.unwrap();
    assert_eq!(
        resource.stats().concurrency,
        1,
        "the head is out, the body is not"
    );
    let mut body = response.into_body();
    sender.send(Frame::data(Bytes::from("part"))).unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "part");
    assert_eq!(resource.stats().concurrency, 1);
    // The reader asks for more at once; the stream ends 30 ms later.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        drop(sender);
    });
    assert!(body.frame().await.is_none());
    let stats = resource.stats();
    assert_eq!((stats.concurrency, stats.avg_rt_micros), (0, 30_000.0));
}

#[tokio::test(start_paused = true)]
async fn a_slow_reader_s_call_is_no_adaptive_sample_and_a_prompt_one_s_is() {
    let spillway = spillway();
    let aimd = AdaptiveAlgorithm::Aimd(AimdConfig {
        initial_limit: 10,
        min_limit: 2,
        timeout: Duration::from_secs(1),
        ..AimdConfig::default()
    });
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource("a", "GET /stream", aimd)])
        .unwrap();
    let (app, mut senders) = streaming_app(&spillway);
    let state = || spillway.adaptive_state("a").unwrap();
    // The reader takes 2 s before it asks for the second frame, which the service sends
    // 10 ms after it is asked; then 3 s before it asks for the end, which comes 20 ms later.
    let response = app.clone().oneshot(get_request("/stream")).await.unwrap();
    let sender = senders.recv().await.unwrap();
    let mut body = response.into_body();
    sender.send(Frame::data(Bytes::from("first"))).unwrap();
    assert!(body.frame().await.unwrap().unwrap().is_data());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = sender.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        second.send(Frame::data(Bytes::from("part"))).unwrap();
    });
    assert!(body.frame().await.unwrap().unwrap().is_data());
    tokio::time::sleep(Duration::from_secs(3)).await;
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(sender);
    });
    assert!(body.frame().await.is_none());
    // 5 s in all, past AIMD's timeout: paced by its reader, no sample and no backoff.
    assert_eq!(
        (state().samples, state().limit, state().in_flight),
        (0, 10, 0)
    );

    // A reader that asks at once: its 1.5 s is the service's, a sample, and a backoff.
    let response = app.clone().oneshot(get_request("/stream")).await.unwrap();
    let sender = senders.recv().await.unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        drop(sender);
    });
    assert!(response.into_body().frame().await.is_none());
    assert_eq!((state().samples, state().limit), (1, 9));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_streaming_body_releases_its_place() {
    let spillway = spillway();
    spillway
        .load_flow_rules(vec![FlowRule::in_flight("GET /stream", 1).with_id("one")])
        .unwrap();
    let (app, mut senders) = streaming_app(&spillway);
    let response = app.clone().oneshot(get_request("/stream")).await.unwrap();
    let _sender = senders.recv().await.unwrap();
    assert_eq!(
        app.clone()
            .oneshot(get_request("/stream"))
            .await
            .unwrap()
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    drop(response); // the client went away mid-stream
    assert_eq!(
        spillway
            .resource("GET /stream")
            .unwrap()
            .stats()
            .concurrency,
        0
    );
    assert_eq!(
        app.clone()
            .oneshot(get_request("/stream"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
}

#[tokio::test(start_paused = true)]
async fn grpc_calls_get_resource_exhausted_and_grpc_errors_count() {
    let spillway = spillway();
    let app = Router::new()
        .route(
            "/echo.Echo/Say",
            axum::routing::post(|| async {
                let (tx, rx) = mpsc::unbounded_channel();
                tx.send(Frame::data(Bytes::from_static(b"\0\0\0\0\0")))
                    .unwrap();
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", "13".parse().unwrap());
                tx.send(Frame::trailers(trailers)).unwrap();
                (
                    [(http::header::CONTENT_TYPE, "application/grpc")],
                    Body::new(Channel(rx)),
                )
            }),
        )
        .layer(SpillwayLayer::new(spillway.clone()).by_route());
    let call = || {
        Request::post("/echo.Echo/Say")
            .header("content-type", "application/grpc")
            .body(Body::empty())
            .unwrap()
    };
    let response = app.clone().oneshot(call()).await.unwrap();
    response.into_body().collect().await.unwrap();
    let stats = spillway.resource("POST /echo.Echo/Say").unwrap().stats();
    assert_eq!(
        stats.total_error, 1,
        "grpc-status 13 in the trailers is an error"
    );

    spillway
        .load_flow_rules(vec![FlowRule::qps("none", "POST /echo.Echo/Say", 0.0)])
        .unwrap();
    let blocked = app.clone().oneshot(call()).await.unwrap();
    assert_eq!(blocked.status(), StatusCode::OK);
    assert_eq!(header(blocked.headers(), "grpc-status"), "8");
    assert_eq!(
        header(blocked.headers(), "content-type"),
        "application/grpc"
    );
}

#[tokio::test(start_paused = true)]
async fn a_shadow_rule_admits_and_marks_the_request_and_the_response_queued_or_not() {
    use spillway_tower::protect::ShadowRefusal;
    let spillway = spillway();
    spillway
        .load_flow_rules(vec![
            FlowRule::qps("try-1", "GET /seen", 1.0).with_shadow(true),
            FlowRule::qps("pace", "GET /seen", 10.0)
                .with_behavior(Behavior::throttle(Duration::from_secs(1))),
        ])
        .unwrap();
    // The handler says which shadow rule its request carries.
    let app = Router::new()
        .route(
            "/seen",
            get(|request: Request<Body>| async move {
                match request.extensions().get::<ShadowRefusal>() {
                    Some(refusal) => refusal.rule.to_owned(),
                    None => "none".to_owned(),
                }
            }),
        )
        .layer(SpillwayLayer::new(spillway.clone()).by_route());
    let start = Instant::now();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let response = app.clone().oneshot(get_request("/seen")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let marked = response.extensions().get::<ShadowRefusal>().copied();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        seen.push((String::from_utf8_lossy(&body).into_owned(), marked));
    }
    let marked = Some(ShadowRefusal { rule: "try-1" });
    assert_eq!(
        seen,
        [
            ("none".to_owned(), None),
            ("try-1".to_owned(), marked),
            ("try-1".to_owned(), marked),
        ]
    );
    // The throttle in force paced them; the shadow rule made nobody wait.
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    assert_eq!(
        spillway.flow_rule_stats("try-1").unwrap().shadow_refusals,
        2
    );
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_rule_refuses_past_its_limit_and_learns_from_each_response() {
    use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
    let spillway = spillway();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "slow-adaptive",
            "GET /slow",
            AdaptiveAlgorithm::Aimd(AimdConfig {
                initial_limit: 1,
                min_limit: 1,
                ..AimdConfig::default()
            }),
        )])
        .unwrap();
    let app = app(&spillway);
    // One request in flight for 100 ms holds the only place.
    let first = tokio::spawn({
        let app = app.clone();
        async move { app.oneshot(get_request("/slow")).await.unwrap().status() }
    });
    tokio::task::yield_now().await;
    while spillway.adaptive_state("slow-adaptive").unwrap().in_flight == 0 {
        tokio::task::yield_now().await;
    }
    let refused = app.clone().oneshot(get_request("/slow")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(first.await.unwrap(), StatusCode::OK);
    // Its 100 ms response, with the limit in use, was a sample: AIMD grew the limit.
    let state = spillway.adaptive_state("slow-adaptive").unwrap();
    assert_eq!((state.samples, state.limit, state.refusals), (1, 2, 1));
}

/// An adaptive limit held at one call in flight (AIMD that never moves).
fn one_at_a_time() -> spillway::adaptive::AdaptiveAlgorithm {
    use spillway::adaptive::{AdaptiveAlgorithm, AimdConfig};
    AdaptiveAlgorithm::Aimd(AimdConfig {
        initial_limit: 1,
        min_limit: 1,
        max_limit: 1,
        ..AimdConfig::default()
    })
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_queue_holds_a_request_until_a_place_frees_and_refuses_after_its_timeout() {
    use spillway::adaptive::{AdaptiveQueue, AdaptiveRule};
    let spillway = spillway();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "slow-adaptive",
            "GET /slow",
            one_at_a_time(),
        )
        .with_queue(AdaptiveQueue {
            capacity: 1,
            timeout: Duration::from_millis(150),
            ..AdaptiveQueue::default()
        })])
        .unwrap();
    let app = app(&spillway);
    let start = tokio::time::Instant::now();
    let send = |app: &_| {
        let app: Router = Clone::clone(app);
        tokio::spawn(async move {
            let status = app.oneshot(get_request("/slow")).await.unwrap().status();
            (status, start.elapsed())
        })
    };
    // The first holds the only place for 100 ms; the second waits for it in the queue.
    let first = send(&app);
    while spillway.adaptive_state("slow-adaptive").unwrap().in_flight == 0 {
        tokio::task::yield_now().await;
    }
    let second = send(&app);
    while spillway.adaptive_state("slow-adaptive").unwrap().waiting == 0 {
        tokio::task::yield_now().await;
    }
    // The queue of 1 is full: a third is refused at once.
    let refused = app.clone().oneshot(get_request("/slow")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let ms = Duration::from_millis;
    assert_eq!(first.await.unwrap(), (StatusCode::OK, ms(100)));
    assert_eq!(second.await.unwrap(), (StatusCode::OK, ms(200)));

    // Behind a request of 100 ms, one that may wait only 50 ms is refused when they are up.
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "slow-adaptive",
            "GET /slow",
            one_at_a_time(),
        )
        .with_queue(AdaptiveQueue {
            timeout: ms(50),
            ..AdaptiveQueue::default()
        })])
        .unwrap();
    let start_again = tokio::time::Instant::now();
    let third = send(&app);
    while spillway.adaptive_state("slow-adaptive").unwrap().in_flight == 0 {
        tokio::task::yield_now().await;
    }
    let timed_out = app.clone().oneshot(get_request("/slow")).await.unwrap();
    assert_eq!(timed_out.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(start_again.elapsed(), ms(50));
    assert_eq!(third.await.unwrap().0, StatusCode::OK);
    let state = spillway.adaptive_state("slow-adaptive").unwrap();
    assert_eq!(
        (state.queue_timeouts, state.waiting, state.in_flight),
        (1, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_while_it_waits_in_an_adaptive_queue_leaves_it() {
    use spillway::adaptive::{AdaptiveQueue, AdaptiveRule};
    let spillway = spillway();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "slow-adaptive",
            "GET /slow",
            one_at_a_time(),
        )
        .with_queue(AdaptiveQueue::default())])
        .unwrap();
    let app = app(&spillway);
    let first = tokio::spawn({
        let app = app.clone();
        async move { app.oneshot(get_request("/slow")).await.unwrap().status() }
    });
    while spillway.adaptive_state("slow-adaptive").unwrap().in_flight == 0 {
        tokio::task::yield_now().await;
    }
    // A client that gives up after 20 ms: its request future is dropped in the queue.
    let gone = tokio::time::timeout(
        Duration::from_millis(20),
        app.clone().oneshot(get_request("/slow")),
    )
    .await;
    assert!(gone.is_err());
    let state = spillway.adaptive_state("slow-adaptive").unwrap();
    assert_eq!((state.waiting, state.queue_timeouts), (0, 0));
    assert_eq!(first.await.unwrap(), StatusCode::OK);
    let state = spillway.adaptive_state("slow-adaptive").unwrap();
    assert_eq!(state.in_flight, 0, "the freed place went to no one");
    let stats = spillway.resource("GET /slow").unwrap().stats();
    assert_eq!((stats.total_pass, stats.total_block), (1, 0));
}
