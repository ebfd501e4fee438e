//! What the layer tells the services around it, and what they tell it: the refusal on a
//! blocked response, shadow mode's refusal on a request let through, a request without its
//! key, and the inner service's own verdict on a call. On tokio's paused clock.

use http::{Request, Response, StatusCode};
use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
use spillway::flow::FlowRule;
use spillway::keyed::KeyedRule;
use spillway::BlockKind;
use spillway_tower::protect::{
    Blocked, MissingKey, OnMissingKey, ShadowBlock, ShadowRefusal, Verdict,
};
use spillway_tower::{SpillwayLayer, TokioClock};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tower::{service_fn, Layer, Service, ServiceExt};

fn spillway() -> spillway::Spillway {
    spillway::Spillway::new_with_clock(TokioClock::new())
}

/// A service that answers `status` with the `verdict` given, and keeps what each request
/// carried of the layer's marks.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Option<String>>>>);

fn service(
    seen: Seen,
    status: StatusCode,
    verdict: Option<Verdict>,
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future = impl Send>
       + Clone {
    service_fn(move |request: Request<String>| {
        let mark = request
            .extensions()
            .get::<ShadowBlock>()
            .map(|ShadowBlock(err)| format!("{:?}", err.kind()));
        seen.0.lock().unwrap().push(mark);
        async move {
            let mut response = Response::new(String::from("done"));
            *response.status_mut() = status;
            if let Some(verdict) = verdict {
                response.extensions_mut().insert(verdict);
            }
            Ok(response)
        }
    })
}

fn get(headers: &[(&str, &str)]) -> Request<String> {
    let mut request = Request::get("/api");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(String::new()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_blocked_response_carries_its_refusal_whatever_answers_it() {
    let spillway = spillway();
    spillway
        .load_flow_rules(vec![FlowRule::qps("one", "api", 1.0)])
        .unwrap();
    let layer = SpillwayLayer::new(spillway.clone())
        .fixed_resource("api")
        .on_blocked(|_err, _parts, _| {
            let mut response = Response::new(bytes::Bytes::from_static(b"busy"));
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            response
        });
    let app = layer.layer(service(Seen::default(), StatusCode::OK, None));
    let first = app.clone().oneshot(get(&[])).await.unwrap();
    assert!(first.extensions().get::<Blocked>().is_none());
    let second = app.clone().oneshot(get(&[])).await.unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    let Blocked(err) = second.extensions().get::<Blocked>().expect("marked");
    assert_eq!((err.kind(), err.rule_id()), (BlockKind::Flow, Some("one")));
}

#[tokio::test(start_paused = true)]
async fn shadow_mode_lets_every_refusal_through_marked_and_holds_no_place() {
    let spillway = spillway();
    spillway
        .load_flow_rules(vec![FlowRule::in_flight("api", 2).with_id("two")])
        .unwrap();
    let seen = Seen::default();
    let app = SpillwayLayer::new(spillway.clone())
        .fixed_resource("api")
        .shadow(true)
        .layer(service(seen.clone(), StatusCode::OK, None));
    // Three held at once: the third would be refused, and goes on without a place.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(app.clone().oneshot(get(&[])).await.unwrap());
    }
    assert_eq!(spillway.resource("api").unwrap().stats().concurrency, 2);
    let marks: Vec<_> = held
        .iter()
        .map(|response| {
            assert_eq!(response.status(), StatusCode::OK);
            response
                .extensions()
                .get::<ShadowBlock>()
                .map(|ShadowBlock(err)| err.rule_id().map(str::to_owned))
        })
        .collect();
    assert_eq!(marks, [None, None, Some(Some("two".to_owned()))]);
    assert_eq!(
        *seen.0.lock().unwrap(),
        [None, None, Some("Flow".to_owned())]
    );
    drop(held);
    assert_eq!(spillway.resource("api").unwrap().stats().concurrency, 0);
    // A rule's own shadow still marks its own way.
    spillway
        .load_flow_rules(vec![FlowRule::qps("zero", "api", 0.0).with_shadow(true)])
        .unwrap();
    let response = app.clone().oneshot(get(&[])).await.unwrap();
    assert_eq!(
        response.extensions().get::<ShadowRefusal>(),
        Some(&ShadowRefusal { rule: "zero" })
    );
    assert!(response.extensions().get::<ShadowBlock>().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_request_without_its_key_passes_shares_or_is_refused_as_configured() {
    let spillway = spillway();
    spillway
        .load_keyed_rules(vec![
            KeyedRule::qps("per-user", "api", 1.0),
            KeyedRule::qps("per-tenant", "api", 1.0).with_param(1),
        ])
        .unwrap();
    let layer = |missing: OnMissingKey| {
        SpillwayLayer::new(spillway.clone())
            .fixed_resource("api")
            .on_missing_key(1, OnMissingKey::Refuse) // said before its key, then overruled
            .key_header(0, "x-user")
            .key_query(1, "tenant")
            .on_missing_key(1, OnMissingKey::Pass)
            .on_missing_key(0, missing)
            .layer(service(Seen::default(), StatusCode::OK, None))
    };
    // No key: not limited, shared (one key's limit between them), refused.
    assert_eq!(statuses(layer(OnMissingKey::Pass)).await, [200, 200, 200]);
    assert_eq!(statuses(layer(OnMissingKey::Shared)).await, [200, 429, 429]);
    let app = layer(OnMissingKey::Refuse);
    let refused = app.clone().oneshot(get(&[])).await.unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        refused.extensions().get::<MissingKey>(),
        Some(&MissingKey {
            position: 0,
            source: Arc::from("header:x-user")
        })
    );
    // Said before its key, it holds all the same.
    let before = SpillwayLayer::new(spillway.clone())
        .fixed_resource("api")
        .on_missing_key(0, OnMissingKey::Refuse)
        .key_header(0, "x-user")
        .layer(service(Seen::default(), StatusCode::OK, None));
    let refused_before = before.oneshot(get(&[])).await.unwrap();
    assert_eq!(refused_before.status(), StatusCode::BAD_REQUEST);
    // A request with the key is limited by it. The rule checked the three that shared a key
    // and these two; the one refused for want of its key, never.
    let with_key = || get(&[("x-user", "ann")]);
    assert_eq!(app.clone().oneshot(with_key()).await.unwrap().status(), 200);
    assert_eq!(app.clone().oneshot(with_key()).await.unwrap().status(), 429);
    let (stats, _) = spillway.keyed_stats("per-user").unwrap();
    assert_eq!((stats.checks, stats.refused), (3 + 2, 2 + 1), "{stats:?}");
}

/// The statuses of three requests without keys.
async fn statuses<S>(app: S) -> Vec<u16>
where
    S: Service<Request<String>, Response = Response<spillway_tower::ResponseBody<String>>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = app.clone().oneshot(get(&[])).await.unwrap();
        statuses.push(response.status().as_u16());
    }
    statuses
}

/// The completions and errors `api` recorded, and its calls in flight.
fn recorded(spillway: &spillway::Spillway) -> (f64, f64, i64) {
    let stats = spillway.resource("api").unwrap().stats();
    (stats.success_qps, stats.error_qps, stats.concurrency)
}

#[tokio::test(start_paused = true)]
async fn the_inner_services_verdict_decides_over_the_status() {
    for (status, verdict, success, error) in [
        (StatusCode::OK, None, 1.0, 0.0),
        (StatusCode::BAD_GATEWAY, None, 1.0, 1.0),
        (StatusCode::BAD_GATEWAY, Some(Verdict::Success), 1.0, 0.0),
        (StatusCode::OK, Some(Verdict::Error), 1.0, 1.0),
        (
            StatusCode::GATEWAY_TIMEOUT,
            Some(Verdict::Dropped),
            1.0,
            1.0,
        ),
        (StatusCode::BAD_REQUEST, Some(Verdict::Abandoned), 0.0, 0.0),
    ] {
        let spillway = spillway();
        let app = SpillwayLayer::new(spillway.clone())
            .fixed_resource("api")
            .layer(service(Seen::default(), status, verdict));
        drop(app.oneshot(get(&[])).await.unwrap());
        assert_eq!(
            recorded(&spillway),
            (success, error, 0),
            "{status} with {verdict:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_verdict_shrinks_an_adaptive_limit_where_an_error_status_does_not() {
    // AIMD halves its limit on a drop, and only on a drop.
    let limit_after = |verdict: Option<Verdict>| async move {
        let spillway = spillway();
        spillway
            .load_adaptive_rules(vec![AdaptiveRule::resource(
                "aimd",
                "api",
                AdaptiveAlgorithm::Aimd(AimdConfig {
                    initial_limit: 4,
                    min_limit: 1,
                    ..AimdConfig::default()
                }),
            )])
            .unwrap();
        let app = SpillwayLayer::new(spillway.clone())
            .fixed_resource("api")
            .layer(service(
                Seen::default(),
                StatusCode::GATEWAY_TIMEOUT,
                verdict,
            ));
        let before = spillway.adaptive_state("aimd").unwrap().limit;
        drop(app.oneshot(get(&[])).await.unwrap());
        (before, spillway.adaptive_state("aimd").unwrap().limit)
    };
    let (before, after) = limit_after(Some(Verdict::Dropped)).await;
    assert!(after < before, "{before} -> {after}");
    let (before, after) = limit_after(None).await;
    assert!(after >= before, "{before} -> {after}");
}

#[tokio::test(start_paused = true)]
async fn a_grpc_call_is_an_error_unless_a_status_says_ok() {
    use http_body_util::BodyExt;
    // Each case: the content type, the trailers the body ends with (none: it ends after its
    // data), and whether the call counts as an error. gRPC-Web's status is in its body.
    let cases: [(&str, Option<&str>, f64); 4] = [
        ("application/grpc", Some("0"), 0.0),
        ("application/grpc+proto", Some("14"), 1.0),
        ("application/grpc", None, 1.0),
        ("application/grpc-web+proto", None, 0.0),
    ];
    for (content_type, status, errors) in cases {
        let spillway = spillway();
        let app = SpillwayLayer::new(spillway.clone())
            .fixed_resource("api")
            .layer(service_fn(move |_request: Request<String>| async move {
                let mut frames = std::collections::VecDeque::from([http_body::Frame::data(
                    bytes::Bytes::from_static(b"\0\0\0\0\0"),
                )]);
                if let Some(status) = status {
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", status.parse().unwrap());
                    frames.push_back(http_body::Frame::trailers(trailers));
                }
                let body = Frames(frames);
                let mut response = Response::new(body);
                response
                    .headers_mut()
                    .insert("content-type", content_type.parse().unwrap());
                Ok::<_, Infallible>(response)
            }));
        let response = app.oneshot(get(&[])).await.unwrap();
        response.into_body().collect().await.unwrap();
        let stats = spillway.resource("api").unwrap().stats();
        assert_eq!(
            (stats.success_qps, stats.error_qps),
            (1.0, errors),
            "{content_type} with trailers {status:?}"
        );
    }
}

// A gRPC call whose status is to come in its trailers, whose client leaves after the head
// (the body dropped unread): no verdict, neither a success nor an error, so that a client
// cannot make a failing service's calls count as successes (found by an attack: a breaker
// stayed closed, and closed from half-open, while the service failed every call). A
// half-open breaker's probe so left gives its place to the next call.
#[tokio::test(start_paused = true)]
async fn a_grpc_call_left_before_its_trailers_gets_no_verdict() {
    use spillway::breaker::{BreakerRule, BreakerState, BreakerStrategy};
    let spillway = spillway();
    let strategy = BreakerStrategy::ErrorCount { threshold: 1 };
    let rule = BreakerRule::new("b", "api", strategy, std::time::Duration::from_secs(1));
    let rule = rule.with_min_request_amount(2);
    spillway.load_breaker_rules(vec![rule]).unwrap();
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let app = SpillwayLayer::new(spillway.clone())
        .fixed_resource("api")
        .layer(service_fn({
            let failing = failing.clone();
            move |_request: Request<String>| {
                let failing = failing.load(std::sync::atomic::Ordering::SeqCst);
                async move {
                    let mut trailers = http::HeaderMap::new();
                    let status = if failing { "14" } else { "0" };
                    trailers.insert("grpc-status", status.parse().unwrap());
                    let body = Frames(std::collections::VecDeque::from([
                        http_body::Frame::data(bytes::Bytes::from_static(b"\0\0\0\0\0")),
                        http_body::Frame::trailers(trailers),
                    ]));
                    let mut response = Response::new(body);
                    response
                        .headers_mut()
                        .insert("content-type", "application/grpc".parse().unwrap());
                    Ok::<_, Infallible>(response)
                }
            }
        }));
    let grpc = || get(&[("content-type", "application/grpc")]);
    // Left after the head, a failing service's calls count neither way.
    for _ in 0..3 {
        drop(app.clone().oneshot(grpc()).await.unwrap());
    }
    let stats = spillway.resource("api").unwrap().stats();
    assert_eq!((stats.success_qps, stats.error_qps), (0.0, 0.0));
    assert_eq!(stats.concurrency, 0, "their places are given back");
    // Read to their trailers, they are errors: the breaker opens.
    for _ in 0..2 {
        let response = app.clone().oneshot(grpc()).await.unwrap();
        http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap();
    }
    let state = || spillway.breaker_state("b").unwrap();
    assert_eq!(state(), BreakerState::Open);
    // Half-open: a probe left after its head decides nothing, and the next call probes.
    tokio::time::advance(std::time::Duration::from_millis(1_000)).await;
    let left = app.clone().oneshot(grpc()).await.unwrap();
    assert_eq!(state(), BreakerState::HalfOpen);
    drop(left);
    assert_eq!(state(), BreakerState::HalfOpen);
    let probe = app.clone().oneshot(grpc()).await.unwrap();
    assert!(probe
        .extensions()
        .get::<spillway_tower::protect::Blocked>()
        .is_none());
    http_body_util::BodyExt::collect(probe.into_body())
        .await
        .unwrap();
    assert_eq!(
        state(),
        BreakerState::Open,
        "the read probe's failure decides"
    );
}

// A gRPC body whose last data frame ends it without trailers, read to that frame and dropped
// (as hyper's server drops a body whose last frame ended it): an error, as a gRPC client sees
// it (it counted as a success). And a call whose head already failed (a 503, its gRPC status
// still to come), left after its head: the error its head said.
#[tokio::test(start_paused = true)]
async fn a_grpc_call_ended_without_trailers_is_an_error_and_a_failed_head_stays_one() {
    use http_body_util::BodyExt;
    for (status, read) in [
        (StatusCode::OK, true),
        (StatusCode::SERVICE_UNAVAILABLE, false),
    ] {
        let spillway = spillway();
        let app = SpillwayLayer::new(spillway.clone())
            .fixed_resource("api")
            .layer(service_fn(move |_request: Request<String>| async move {
                let body = Frames(std::collections::VecDeque::from([http_body::Frame::data(
                    bytes::Bytes::from_static(b"\0\0\0\0\0"),
                )]));
                let mut response = Response::new(body);
                *response.status_mut() = status;
                response
                    .headers_mut()
                    .insert("content-type", "application/grpc".parse().unwrap());
                Ok::<_, Infallible>(response)
            }));
        let grpc = get(&[("content-type", "application/grpc")]);
        let mut body = app.oneshot(grpc).await.unwrap().into_body();
        if read {
            body.frame().await.unwrap().unwrap();
            assert!(http_body::Body::is_end_stream(&body));
        }
        drop(body);
        let stats = spillway.resource("api").unwrap().stats();
        assert_eq!((stats.success_qps, stats.error_qps), (1.0, 1.0), "{status}");
    }
}

/// A body of the frames given, each ready at once; it has ended once they are all out.
struct Frames(std::collections::VecDeque<http_body::Frame<bytes::Bytes>>);

impl http_body::Body for Frames {
    type Data = bytes::Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }
}

#[tokio::test(start_paused = true)]
async fn a_layer_given_its_resource_never_registers_the_default_one() {
    let spillway = spillway();
    let named = SpillwayLayer::new(spillway.clone())
        .fixed_resource("api")
        .layer(service(Seen::default(), StatusCode::OK, None));
    named.oneshot(get(&[])).await.unwrap();
    assert_eq!(spillway.resource_count(), 1, "only `api`");
    // The default is registered when a request first enters it.
    let default =
        SpillwayLayer::new(spillway.clone()).layer(service(Seen::default(), StatusCode::OK, None));
    assert_eq!(spillway.resource_count(), 1);
    default.oneshot(get(&[])).await.unwrap();
    assert_eq!(spillway.resource("http").unwrap().stats().pass_qps, 1.0);
    assert_eq!(spillway.resource_count(), 2);
}
