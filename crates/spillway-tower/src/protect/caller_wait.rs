//! Time a call waited on its caller before its response: the inner service's word on it.

use std::time::Duration;

/// The time a call waited on its caller before its response head, as the inner service (or a
/// layer inside) knows it: inserted into a response's extensions, it is left out of the
/// call's response time (see [`OwnedEntry::leave_out`](spillway::OwnedEntry::leave_out)), so
/// that a client that sends its request body slowly does not make the service look slow to
/// the statistics, the breakers' slow-call test or an adaptive limit.
///
/// A proxy knows it: the time it waited for the client's body bytes while the upstream
/// waited for them too (`spillway serve` inserts it when the body ended before the upstream's
/// head). The time after the head, while a slow client reads the body, is left out by the
/// layer's [`ResponseBody`](super::ResponseBody) itself.
///
/// # Examples
///
/// ```
/// use spillway_tower::protect::CallerWait;
/// use spillway_tower::{SpillwayLayer, TokioClock};
/// use std::time::Duration;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
/// let service = SpillwayLayer::new(spillway.clone()).fixed_resource("upload").layer(
///     service_fn(|_request: http::Request<String>| async {
///         // 900 ms reading the client's slow body, then 40 ms of work.
///         tokio::time::sleep(Duration::from_millis(940)).await;
///         let mut response = http::Response::new(String::new());
///         response.extensions_mut().insert(CallerWait(Duration::from_millis(900)));
///         Ok::<_, std::convert::Infallible>(response)
///     }),
/// );
/// drop(service.oneshot(http::Request::new(String::new())).await?);
/// let stats = spillway.resource("upload")?.stats();
/// assert!((40_000.0..41_000.0).contains(&stats.avg_rt_micros));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerWait(pub Duration);
