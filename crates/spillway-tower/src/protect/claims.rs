//! What a request claims in an adaptive limit's queue, read from its head: how critical it is,
//! which tenant it is for, and how long it has left (see spillway's
//! [`EntryBuilder::criticality`](spillway::EntryBuilder::criticality),
//! [`tenant`](spillway::EntryBuilder::tenant) and [`deadline`](spillway::EntryBuilder::deadline)).

use super::config::KeyFn;
use super::SpillwayLayer;
use http::request;
use spillway::{Criticality, EntryBuilder};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub(super) type CriticalityFn = dyn Fn(&request::Parts) -> Option<Criticality> + Send + Sync;
pub(super) type DeadlineFn = dyn Fn(&request::Parts) -> Option<Duration> + Send + Sync;

/// How a layer reads a request's claims.
#[derive(Clone, Default)]
pub(super) struct Claims {
    criticality: Option<Arc<CriticalityFn>>,
    tenant: Option<Arc<KeyFn>>,
    /// Where a deadline is read, in order: the first that gives one wins.
    deadlines: Vec<Arc<DeadlineFn>>,
    /// The deadline of a request none of `deadlines` gives one for.
    default_deadline: Option<Duration>,
}

impl Claims {
    /// Whether reading the claims needs the request's head.
    pub(super) fn reads_request(&self) -> bool {
        self.criticality.is_some() || self.tenant.is_some() || !self.deadlines.is_empty()
    }

    /// `builder` with the claims of the request whose head is `parts` (none read without it,
    /// but the default deadline).
    pub(super) fn apply<'a>(
        &self,
        mut builder: EntryBuilder<'a>,
        parts: Option<&request::Parts>,
    ) -> EntryBuilder<'a> {
        if let Some(parts) = parts {
            if let Some(criticality) = self.criticality.as_ref().and_then(|read| read(parts)) {
                builder = builder.criticality(criticality);
            }
            if let Some(tenant) = self.tenant.as_ref().and_then(|read| read(parts)) {
                builder = builder.tenant(tenant.as_str());
            }
        }
        let read = parts.and_then(|parts| self.deadlines.iter().find_map(|read| read(parts)));
        match read.or(self.default_deadline) {
            Some(left) => builder.deadline(left),
            None => builder,
        }
    }
}

impl fmt::Debug for Claims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claims")
            .field("criticality", &self.criticality.is_some())
            .field("tenant", &self.tenant.is_some())
            .field("deadlines", &self.deadlines.len())
            .field("default_deadline", &self.default_deadline)
            .finish()
    }
}

/// A header's value as text, if it is present, once, and valid UTF-8.
fn header<'a>(parts: &'a request::Parts, name: &str) -> Option<&'a str> {
    let mut values = parts.headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

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
    /// request without it, with it twice, or with a value that is no criticality is
    /// `Critical`, the default. A client can raise its own requests this way: read it only
    /// from callers you trust (a header your gateway sets), or map it with
    /// [`criticality`](Self::criticality).
    pub fn criticality_header(self, name: &'static str) -> Self {
        self.criticality(move |parts| header(parts, name)?.parse().ok())
    }

    /// Each request's tenant (an API key, an account), read from its head: within a
    /// criticality, an adaptive limit's queue gives its places to tenants in turn, so that one
    /// that floods does not take the others' turns. A request without one shares the queue's
    /// first bucket with the tenants that hash to it.
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

/// Milliseconds as 1 to 12 ASCII digits (up to about 31 years).
fn parse_millis(text: &str) -> Option<Duration> {
    let digits = text.trim();
    if digits.is_empty() || digits.len() > 12 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_headers_are_digits_of_milliseconds_or_nothing() {
        assert_eq!(parse_millis("250"), Some(Duration::from_millis(250)));
        assert_eq!(parse_millis(" 0 "), Some(Duration::ZERO));
        for bad in ["", "-5", "+5", "1.5", "5ms", "1234567890123", "١٢"] {
            assert_eq!(parse_millis(bad), None, "{bad}");
        }
    }
}
