//! A call whose response future is dropped before the service answers (an outer timeout fired,
//! a client left): what its end counts, as `SpillwayLayer::on_dropped` says. On tokio's paused
//! clock.

use http::{Request, Response};
use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
use spillway_tower::protect::OnDropped;
use spillway_tower::{SpillwayLayer, TokioClock};
use std::time::Duration;
use tower::{service_fn, ServiceBuilder, ServiceExt};

/// What one call that takes 5 s, cut at 1 s by an outer timeout, leaves: the resource's
/// completions, errors and calls in flight, and the adaptive limit's state.
async fn cut_short(
    on_dropped: Option<OnDropped>,
) -> (u64, u64, i64, spillway::adaptive::AdaptiveState) {
    let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "aimd",
            "api",
            AdaptiveAlgorithm::Aimd(aimd()),
        )])
        .unwrap();
    let mut layer = SpillwayLayer::new(spillway.clone()).fixed_resource("api");
    if let Some(on_dropped) = on_dropped {
        layer = layer.on_dropped(on_dropped);
    }
    let service = ServiceBuilder::new()
        .timeout(Duration::from_secs(1))
        .layer(layer)
        .service(service_fn(|_request: Request<String>| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }));
    let outcome = service.oneshot(Request::new(String::new())).await;
    assert!(outcome.is_err(), "the timeout cut it short");
    let stats = spillway.resource("api").unwrap().stats();
    let state = spillway.adaptive_state("aimd").unwrap();
    (
        stats.total_success,
        stats.total_error,
        stats.concurrency,
        state,
    )
}

/// AIMD from 20, free to back off.
fn aimd() -> AimdConfig {
    AimdConfig {
        min_limit: 1,
        ..AimdConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_call_completes_fails_or_is_abandoned_as_told() {
    let initial = aimd().initial_limit;
    // By default, and told so: a success timed to the drop, a latency sample.
    for told in [None, Some(OnDropped::Complete)] {
        let (success, error, in_flight, state) = cut_short(told).await;
        assert_eq!((success, error, in_flight), (1, 0, 0), "{told:?}");
        assert_eq!((state.in_flight, state.limit), (0, initial), "{told:?}");
    }
    // A failure: an error, and a drop that shrinks AIMD's limit.
    let (success, error, in_flight, state) = cut_short(Some(OnDropped::Fail)).await;
    assert_eq!((success, error, in_flight), (1, 1, 0));
    assert_eq!(state.in_flight, 0);
    assert!(state.limit < initial, "{state:?}");
    // Abandoned: its place back, nothing else counted.
    let (success, error, in_flight, state) = cut_short(Some(OnDropped::Abandon)).await;
    assert_eq!((success, error, in_flight), (0, 0, 0));
    assert_eq!(
        (state.in_flight, state.limit, state.samples),
        (0, initial, 0)
    );
}
