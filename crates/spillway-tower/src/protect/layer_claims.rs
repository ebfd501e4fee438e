//! The layer's settings for what a request claims in an adaptive limit's queue: how its
//! criticality, tenant and deadline are read.

use super::claims::{header, parse_millis};
use super::SpillwayLayer;
use http::request;
use spillway::Criticality;
use std::sync::Arc;
use std::time::Duration;

impl SpillwayLayer {
    /// Each request's [`Criticality`], read from its head (`None`: the default, `Critical`):
    /// an adaptive limit's queue hands places to the most critical first, and a full queue
    /// sheds its least critical waiter for a more critical newcomer.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::Criticality;
    /// use spillway_tower::SpillwayLayer;
    ///
    /// // Prefetches may be shed; everything else keeps the default.
    /// let layer = SpillwayLayer::new(spillway::Spillway::new()).criticality(|parts| {
    ///     (parts.uri.path() == "/prefetch").then_some(Criticality::Sheddable)
    /// });
    /// # let _ = layer;
    /// ```
    pub fn criticality(
        self,
        read: impl Fn(&request::Parts) -> Option<Criticality> + Send + Sync + 'static,
    ) -> Self {
        self.with(|config| config.claims.criticality = Some(Arc::new(read)))
    }

    /// Each request's criticality is the value of header `name` (`sheddable`,
    /// `sheddable_plus`, `critical` or `critical_plus`, in any case, with `-` or `_`): a
    /// request without it, or whose value is no criticality, is `Critical`, the default; of
    /// several values, on lines of their own or joined by commas, the lowest counts (a client
    /// cannot raise a value a gateway appended: [`lowest_criticality`](super::lowest_criticality)). A
    /// client can raise its own requests this way: read it only from callers you trust (a
    /// header your gateway sets), or map it with [`criticality`](Self::criticality).
    pub fn criticality_header(self, name: &'static str) -> Self {
        self.criticality(move |parts| super::lowest_criticality(parts.headers.get_all(name)))
    }

    /// Each request's tenant (an API key, an account), read from its head: within a
    /// criticality, an adaptive limit's queue gives its places to tenants in turn, so that one
    /// that floods does not take the others' turns. Requests without one share one bucket
    /// (with the tenants that hash to it): together they are served as one tenant. A client
    /// that makes up a new tenant for each request spreads over every bucket and defeats the
    /// turns: read the tenant from something it cannot choose freely (an authenticated key).
    pub fn tenant(
        self,
        read: impl Fn(&request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.with(|config| config.claims.tenant = Some(Arc::new(read)))
    }

    /// Each request's tenant is the value of header `name` (present once, valid UTF-8).
    pub fn tenant_header(self, name: &'static str) -> Self {
        self.tenant(move |parts| header(parts, name).map(str::to_owned))
    }

    /// Reads each request's deadline (the time it has left) with `read`, before the sources
    /// given after it: the first that gives one wins, else
    /// [`default_deadline`](Self::default_deadline). A waiting request whose deadline comes,
    /// or that could not be done by it at the current latency, is refused before it runs.
    pub fn deadline(
        self,
        read: impl Fn(&request::Parts) -> Option<Duration> + Send + Sync + 'static,
    ) -> Self {
        self.with(|config| config.claims.deadlines.push(Arc::new(read)))
    }

    /// Reads each gRPC request's deadline from its `grpc-timeout` (a malformed or repeated
    /// one is ignored, as if absent: see [`crate::grpc::grpc_timeout`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway_tower::SpillwayLayer;
    /// use std::time::Duration;
    ///
    /// let layer = SpillwayLayer::new(spillway::Spillway::new())
    ///     .grpc_deadline()
    ///     .deadline_header("x-deadline-ms")
    ///     .default_deadline(Duration::from_secs(2));
    /// # let _ = layer;
    /// ```
    pub fn grpc_deadline(self) -> Self {
        self.deadline(|parts| crate::grpc::grpc_timeout(&parts.headers))
    }

    /// Reads each request's deadline from header `name`: the milliseconds it has left, as 1 to
    /// 12 ASCII digits (anything else, or the header twice, is ignored, as if absent).
    pub fn deadline_header(self, name: &'static str) -> Self {
        self.deadline(move |parts| parse_millis(header(parts, name)?))
    }

    /// The deadline of a request for which no source gives one (none by default: such a
    /// request waits the queue's timeout).
    pub fn default_deadline(self, left: Duration) -> Self {
        self.with(|config| config.claims.default_deadline = Some(left))
    }
}
