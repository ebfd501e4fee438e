//! Time a call waited on its caller before its response: the inner service's word on it.

use std::time::Duration;

/// The time a call waited on its caller before its response head, as the inner service (or a
/// layer inside) knows it: inserted into a response's extensions, it counts towards whether the
/// caller paced the call (see
/// [`OwnedEntry::set_waiting_on_caller`](spillway::OwnedEntry::set_waiting_on_caller)). A
/// call that waited on its caller for more than a quarter of its time gives an adaptive limit
/// no latency sample and a slow-call breaker no verdict, so that a client that sends its
/// request body slowly cannot make the service look slow, nor one that times its bytes against
/// the service's work make it look fast.
///
/// A proxy knows it: the time it waited for the client's body bytes (`spillway serve` inserts
/// it). The time after the head, while a slow client reads the body, is counted by the layer's
/// [`ResponseBody`](super::ResponseBody) itself.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
/// use spillway_tower::protect::CallerWait;
/// use spillway_tower::{SpillwayLayer, TokioClock};
/// use std::time::Duration;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
/// let aimd = AdaptiveAlgorithm::Aimd(AimdConfig::default());
/// spillway.load_adaptive_rules(vec![AdaptiveRule::resource("a", "upload", aimd)])?;
/// let service = SpillwayLayer::new(spillway.clone()).fixed_resource("upload").layer(
///     service_fn(|_request: http::Request<String>| async {
///         // 6 s reading the client's slow body (past AIMD's 5 s), then 40 ms of work.
///         tokio::time::sleep(Duration::from_millis(6_040)).await;
///         let mut response = http::Response::new(String::new());
///         response.extensions_mut().insert(CallerWait(Duration::from_secs(6)));
///         Ok::<_, std::convert::Infallible>(response)
///     }),
/// );
/// drop(service.oneshot(http::Request::new(String::new())).await?);
/// // Paced by its client: no sample, so no backoff.
/// let state = spillway.adaptive_state("a").unwrap();
/// assert_eq!((state.samples, state.limit), (0, 20));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerWait(pub Duration);
