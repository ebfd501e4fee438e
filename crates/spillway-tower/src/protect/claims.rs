//! What a request claims in an adaptive limit's queue, read from its head: how critical it is,
//! which tenant it is for, and how long it has left (see spillway's
//! [`EntryBuilder::criticality`](spillway::EntryBuilder::criticality),
//! [`tenant`](spillway::EntryBuilder::tenant) and [`deadline`](spillway::EntryBuilder::deadline)).

use http::request;
use spillway::{Criticality, EntryBuilder};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub(super) type CriticalityFn = dyn Fn(&request::Parts) -> Option<Criticality> + Send + Sync;
pub(super) type TenantFn = dyn Fn(&request::Parts) -> Option<String> + Send + Sync;
pub(super) type DeadlineFn = dyn Fn(&request::Parts) -> Option<Duration> + Send + Sync;

/// How a layer reads a request's claims.
#[derive(Clone, Default)]
pub(super) struct Claims {
    pub(super) criticality: Option<Arc<CriticalityFn>>,
    pub(super) tenant: Option<Arc<TenantFn>>,
    /// Where a deadline is read, in order: the first that gives one wins.
    pub(super) deadlines: Vec<Arc<DeadlineFn>>,
    /// The deadline of a request none of `deadlines` gives one for.
    pub(super) default_deadline: Option<Duration>,
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
pub(super) fn header<'a>(parts: &'a request::Parts, name: &str) -> Option<&'a str> {
    let mut values = parts.headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// The lowest criticality the header lines `values` name, or `None` if none names one: how
/// [`SpillwayLayer::criticality_header`](crate::SpillwayLayer::criticality_header) reads its
/// header. A line may hold several values separated by commas (a proxy may fold repeated
/// lines into one, RFC 9110), each with parameters after a `;` that are not read; a value
/// that is no criticality is passed over. The lowest counts, so that a client cannot raise a
/// value a gateway appended, however the gateway joined it.
///
/// ```
/// use http::HeaderValue;
/// use spillway::Criticality;
/// use spillway_tower::protect::lowest_criticality;
///
/// let folded = [HeaderValue::from_static("critical_plus, sheddable")];
/// assert_eq!(lowest_criticality(&folded), Some(Criticality::Sheddable));
/// let lines = [HeaderValue::from_static("critical"), HeaderValue::from_static("urgent")];
/// assert_eq!(lowest_criticality(&lines), Some(Criticality::Critical));
/// ```
pub fn lowest_criticality<'a>(
    values: impl IntoIterator<Item = &'a http::HeaderValue>,
) -> Option<Criticality> {
    values
        .into_iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|line| line.split(','))
        .filter_map(|item| item.split(';').next()?.trim().parse::<Criticality>().ok())
        .min()
}

/// Milliseconds as 1 to 12 ASCII digits (up to about 31 years), surrounding spaces allowed:
/// how [`SpillwayLayer::deadline_header`](crate::SpillwayLayer::deadline_header) reads a
/// deadline header. Anything else is `None`.
///
/// ```
/// use spillway_tower::protect::parse_millis;
/// use std::time::Duration;
///
/// assert_eq!(parse_millis("250"), Some(Duration::from_millis(250)));
/// assert_eq!(parse_millis("-1"), None);
/// assert_eq!(parse_millis("1.5"), None);
/// ```
pub fn parse_millis(text: &str) -> Option<Duration> {
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
