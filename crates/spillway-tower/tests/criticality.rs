//! The layer reads each request's criticality, tenant and deadline, and an adaptive limit's
//! queue acts on them: the freed place goes to the most critical request, and one whose
//! deadline comes while it waits is answered 504 (gRPC `DEADLINE_EXCEEDED`) without reaching
//! the service. Paused time: the waits pass at once.

use http::{Request, Response, StatusCode};
use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule, AimdConfig, QueueOrder};
use spillway::BlockKind;
use spillway_tower::protect::Blocked;
use spillway_tower::{SpillwayLayer, TokioClock};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{service_fn, Layer, ServiceExt};

fn request(path: &str, headers: &[(&str, &str)]) -> Request<String> {
    let mut builder = Request::get(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(String::new()).unwrap()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_most_critical_request_goes_first_and_deadlines_are_kept() {
    let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
    let one = AimdConfig {
        initial_limit: 1,
        min_limit: 1,
        max_limit: 1,
        ..AimdConfig::default()
    };
    let queue = AdaptiveQueue {
        capacity: 10,
        order: QueueOrder::Fifo,
        timeout: Duration::from_secs(1),
    };
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "one-at-a-time",
            "api",
            AdaptiveAlgorithm::Aimd(one),
        )
        .with_queue(queue)])
        .unwrap();
    // The service takes 100 ms a call and notes the calls it serves, in order.
    let served = Arc::new(Mutex::new(Vec::new()));
    let inner = {
        let served = Arc::clone(&served);
        service_fn(move |request: Request<String>| {
            let served = Arc::clone(&served);
            async move {
                served.lock().unwrap().push(request.uri().path().to_owned());
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, std::convert::Infallible>(Response::new(String::new()))
            }
        })
    };
    let service = SpillwayLayer::new(spillway)
        .fixed_resource("api")
        .criticality_header("x-criticality")
        .tenant_header("x-api-key")
        .deadline_header("x-deadline-ms")
        .grpc_deadline()
        .layer(inner);
    // Each call ends with its response (the entry is held until the body is dropped).
    let call = |request: Request<String>| {
        let service = service.clone();
        async move {
            let response = service.oneshot(request).await.unwrap();
            let blocked = response.extensions().get::<Blocked>().cloned();
            (response.status(), response.headers().clone(), blocked)
        }
    };
    // Each request reaches the limit before the next is sent.
    let first = tokio::spawn(call(request("/first", &[])));
    tokio::task::yield_now().await;
    let prefetch = tokio::spawn(call(request(
        "/prefetch",
        &[("x-criticality", "sheddable")],
    )));
    tokio::task::yield_now().await;
    let hurried = tokio::spawn(call(request("/hurried", &[("x-deadline-ms", "50")])));
    tokio::task::yield_now().await;
    let grpc = tokio::spawn(call(request(
        "/grpc",
        &[
            ("content-type", "application/grpc"),
            ("grpc-timeout", "50m"),
        ],
    )));
    tokio::task::yield_now().await;
    let checkout = tokio::spawn(call(request(
        "/checkout",
        &[("x-criticality", "critical_plus")],
    )));
    tokio::task::yield_now().await;
    // An unknown criticality is the default's: it waits behind the checkout.
    let odd = tokio::spawn(call(request("/odd", &[("x-criticality", "urgent!!")])));
    tokio::task::yield_now().await;

    // Both deadlines come at 50 ms, while the first call runs: answered without the service.
    let (status, _, blocked) = hurried.await.unwrap();
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(blocked.unwrap().0.kind(), BlockKind::Deadline);
    let (status, headers, _) = grpc.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["grpc-status"], "4");
    for (name, call) in [
        ("first", first),
        ("prefetch", prefetch),
        ("checkout", checkout),
        ("odd", odd),
    ] {
        let (status, _, blocked) = call.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{name}: {blocked:?}");
    }
    assert_eq!(
        *served.lock().unwrap(),
        ["/first", "/checkout", "/odd", "/prefetch"]
    );
}
