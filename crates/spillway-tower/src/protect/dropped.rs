//! A call whose response future is dropped before the service answers: what its end counts.

/// What the layer counts when a request's response future is dropped while the inner service
/// still works on it (see [`SpillwayLayer::on_dropped`](super::SpillwayLayer::on_dropped)):
/// its caller gave up before the response head. Who drops the future says which fits: an
/// outer timeout (`tower::timeout`, `tower_http::timeout`) fired, or the server dropped the
/// request because its client closed the connection or reset the stream.
///
/// A future dropped while it waits for a place (a pacing rule, an adaptive limit's queue)
/// held no entry yet: it leaves the queue, whatever this says. A response body dropped before
/// its end completes the call as its response head said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnDropped {
    /// The call completes at the drop as a success timed to it (the default): its response
    /// time is how long the caller waited, a slow-call breaker sees it, and an adaptive limit
    /// takes it as a latency sample.
    #[default]
    Complete,
    /// The call ends as a failure: an error for the statistics and the breakers, and a drop
    /// for an adaptive limit (AIMD and Vegas shrink on one) rather than a latency sample. For
    /// a layer under an outer timeout, whose drop means the call took too long.
    Fail,
    /// The call gives back its places and counts nothing else: no completion, no response
    /// time, no error, no sample for the breakers or the adaptive limits (its pass stays
    /// counted). For a caller that left for reasons of its own, whose call reached no
    /// verdict on the service, as Envoy's adaptive concurrency filter takes a reset stream.
    Abandon,
}

impl OnDropped {
    /// Marks `entry`, dropped with its future, as this says.
    pub(super) fn mark(self, entry: &mut spillway::OwnedEntry) {
        match self {
            OnDropped::Complete => {}
            OnDropped::Fail => {
                entry.mark_dropped();
                entry.mark_error();
            }
            OnDropped::Abandon => entry.mark_abandoned(),
        }
    }
}
