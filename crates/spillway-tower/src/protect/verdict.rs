//! The inner service's own word on how a call ended, over the layer's classification.

/// How a call ended, as the inner service (or a layer inside) knows it: inserted into a
/// response's extensions, it decides what the request's entry records, in place of the
/// layer's classification by status ([`SpillwayLayer::classify`](super::SpillwayLayer::classify)).
///
/// A proxy knows what a status cannot say: a 504 it made itself is a timeout (a drop, to an
/// adaptive limit), and a 400 after the client's body stalled is nobody's error (the place is
/// freed, and no breaker, adaptive limit or error count learns from it).
///
/// # Examples
///
/// ```
/// use spillway::flow::{FlowRule, Grade};
/// use spillway_tower::protect::Verdict;
/// use spillway_tower::{SpillwayLayer, TokioClock};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
/// let service = SpillwayLayer::new(spillway.clone()).fixed_resource("api").layer(service_fn(
///     |_request: http::Request<String>| async {
///         // The client went away mid-body: not the service's error.
///         let mut response = http::Response::new(String::new());
///         *response.status_mut() = http::StatusCode::BAD_REQUEST;
///         response.extensions_mut().insert(Verdict::Abandoned);
///         Ok::<_, std::convert::Infallible>(response)
///     },
/// ));
/// let response = service.oneshot(http::Request::new(String::new())).await?;
/// drop(response);
/// let stats = spillway.resource("api")?.stats();
/// assert_eq!((stats.success_qps, stats.error_qps, stats.concurrency), (0.0, 0.0, 0));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A success, whatever the status.
    Success,
    /// An error, whatever the status.
    Error,
    /// Timed out, or refused downstream for overload: an error, and to an adaptive limit a
    /// drop (see [`OwnedEntry::mark_dropped`](spillway::OwnedEntry::mark_dropped)).
    Dropped,
    /// Neither: the call ended for a reason that says nothing about the service (the client
    /// went away, or sent a bad body). Its place is freed and nothing else is counted (see
    /// [`OwnedEntry::mark_abandoned`](spillway::OwnedEntry::mark_abandoned)).
    Abandoned,
}

impl Verdict {
    /// Records this on `entry`.
    pub(super) fn apply(self, entry: &mut spillway::OwnedEntry) {
        match self {
            Verdict::Success => entry.set_error(false),
            Verdict::Error => entry.set_error(true),
            Verdict::Dropped => {
                entry.set_error(true);
                entry.mark_dropped();
            }
            Verdict::Abandoned => entry.mark_abandoned(),
        }
    }
}
