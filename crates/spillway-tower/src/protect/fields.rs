//! The rate-limit fields a response carries: the IETF `RateLimit-Policy` and `RateLimit`
//! (draft-ietf-httpapi-ratelimit-headers-10), the older `X-RateLimit-*`, both or none; written
//! for one refused quota, or for the quotas an admitted request met.

use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, HeaderName};
use spillway::{Quota, QuotaUnit};

pub(super) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub(super) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
pub(super) const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
pub(super) const X_RATELIMIT_REMAINING: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining");
pub(super) const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The largest Structured Field Integer (RFC 9651: at most 15 digits).
pub(super) const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// Which rate-limit fields a response carries besides `Retry-After` (see
/// [`SpillwayLayer::ratelimit_fields`](super::SpillwayLayer::ratelimit_fields) for refusals and
/// [`SpillwayLayer::ratelimit_on_admitted`](super::SpillwayLayer::ratelimit_on_admitted) for
/// admitted responses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RateLimitFields {
    /// `RateLimit-Policy` and `RateLimit`, as draft-ietf-httpapi-ratelimit-headers-10 defines
    /// them (the default).
    #[default]
    Ietf,
    /// The older, unstandardised fields many clients still read: `X-RateLimit-Limit` (the
    /// quota), `X-RateLimit-Remaining` (0 on a refusal) and, when `Retry-After` is sent,
    /// `X-RateLimit-Reset` with the same number of seconds to wait (as the IETF drafts'
    /// early `RateLimit-Reset`; not a Unix time, as GitHub's is). Sent for quotas of requests
    /// only: these fields cannot say that a limit counts calls in flight.
    Legacy,
    /// Both sets.
    Both,
    /// Neither: only `Retry-After`.
    None,
}

impl RateLimitFields {
    pub(super) fn ietf(self) -> bool {
        matches!(self, RateLimitFields::Ietf | RateLimitFields::Both)
    }

    pub(super) fn legacy(self) -> bool {
        matches!(self, RateLimitFields::Legacy | RateLimitFields::Both)
    }
}

/// Appends `;key=value` with `value` as a Structured Field Integer.
fn push_integer(out: &mut String, key: &str, value: u64) {
    out.push_str(key);
    out.push_str(itoa::Buffer::new().format(value.min(SF_INTEGER_MAX)));
}

/// Appends `quota`'s `RateLimit-Policy` item (named `name`) to `policy` and its `RateLimit`
/// item to `state`, with `t` when a retry time is known.
fn push_items(
    policy: &mut String,
    state: &mut String,
    name: &str,
    quota: &Quota,
    retry_secs: Option<u64>,
) {
    push_sf_string(policy, name);
    push_sf_string(state, name);
    push_integer(policy, ";q=", quota.quota);
    if let Some(unit) = quota.unit.as_qu() {
        policy.push_str(";qu=");
        push_sf_string(policy, unit);
    }
    if let Some(window) = quota.window {
        push_integer(policy, ";w=", window.as_secs());
    }
    push_integer(state, ";r=", quota.remaining);
    if let Some(secs) = retry_secs {
        push_integer(state, ";t=", secs);
    }
}

/// The `RateLimit-Policy` and `RateLimit` values of a refusal's `quota`, with `t` when a retry
/// time is known. Each is written into one buffer that becomes the header value as it is: a
/// refusal under overload is the common response.
pub(super) fn ratelimit_fields(quota: &Quota, retry_secs: Option<u64>) -> (String, String) {
    let mut policy = String::with_capacity(quota.policy.len() + 48);
    let mut state = String::with_capacity(quota.policy.len() + 24);
    push_items(&mut policy, &mut state, &quota.policy, quota, retry_secs);
    (policy, state)
}

/// The rate-limit fields of an admitted response, from the quotas its request met (see
/// [`spillway::EntryBuilder::quotas`]): with [`RateLimitFields::Ietf`], a `RateLimit-Policy`
/// and a `RateLimit` list with an item per quota, in the same order, `r` the units left and no
/// `t` (optional in the draft; a refusal carries it, with `Retry-After`); with
/// [`RateLimitFields::Legacy`], `X-RateLimit-Limit` and `X-RateLimit-Remaining` of the quota
/// of requests with the least left (none when no quota counts requests). Policies are named
/// as refusals name them (after their rules; a per-key rule sharing its id with a flow rule on
/// the resource is `"<id> per key"`); a name met again all the same (an adaptive rule with a
/// flow rule's id) is written `id#2`, `id#3` and so on. Empty when there are no quotas.
///
/// # Examples
///
/// ```
/// use spillway::flow::FlowRule;
/// use spillway::{ManualClock, Spillway};
/// use spillway_tower::protect::{admitted_fields, RateLimitFields};
///
/// let spillway = Spillway::new_with_clock(ManualClock::new());
/// spillway.load_flow_rules(vec![
///     FlowRule::per_second("GET /search", 10),
///     FlowRule::in_flight("GET /search", 4).with_id("four-at-once"),
/// ])?;
/// let _entry = spillway.entry("GET /search").enter()?;
/// let quotas = spillway.entry("GET /search").quotas();
/// let fields = admitted_fields(&quotas, RateLimitFields::Both);
/// assert_eq!(
///     fields["ratelimit-policy"],
///     r#""GET /search";q=10;w=1, "four-at-once";q=4;qu="concurrent-requests""#
/// );
/// assert_eq!(fields["ratelimit"], r#""GET /search";r=9, "four-at-once";r=3"#);
/// assert_eq!(fields["x-ratelimit-limit"], "10");
/// assert_eq!(fields["x-ratelimit-remaining"], "9");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn admitted_fields(quotas: &[Quota], fields: RateLimitFields) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if quotas.is_empty() {
        return headers;
    }
    if fields.ietf() {
        let mut policy = String::with_capacity(quotas.len() * 48);
        let mut state = String::with_capacity(quotas.len() * 24);
        for (index, quota) in quotas.iter().enumerate() {
            if index > 0 {
                policy.push_str(", ");
                state.push_str(", ");
            }
            let earlier = quotas[..index]
                .iter()
                .filter(|other| other.policy == quota.policy)
                .count();
            let name = match earlier {
                0 => std::borrow::Cow::Borrowed(quota.policy.as_str()),
                n => std::borrow::Cow::Owned(format!("{}#{}", quota.policy, n + 1)),
            };
            push_items(&mut policy, &mut state, &name, quota, None);
        }
        if let (Ok(policy), Ok(state)) = (
            HeaderValue::from_maybe_shared(Bytes::from(policy)),
            HeaderValue::from_maybe_shared(Bytes::from(state)),
        ) {
            headers.insert(RATELIMIT_POLICY, policy);
            headers.insert(RATELIMIT, state);
        }
    }
    if fields.legacy() {
        let tightest = quotas
            .iter()
            .filter(|quota| quota.unit == QuotaUnit::Requests)
            .min_by_key(|quota| quota.remaining);
        if let Some(quota) = tightest {
            let integer = |value: u64| HeaderValue::from(value.min(SF_INTEGER_MAX));
            headers.insert(X_RATELIMIT_LIMIT, integer(quota.quota));
            headers.insert(X_RATELIMIT_REMAINING, integer(quota.remaining));
        }
    }
    headers
}

/// Adds an admitted response's `fields` to its `headers`: the IETF lists after any items the
/// service wrote (a Structured Field List may be split over several lines), the legacy
/// fields only if the service wrote none of them (they are single numbers of one quota).
pub(super) fn add_admitted(headers: &mut HeaderMap, fields: &HeaderMap) {
    // The legacy fields describe one quota together: all the service's, or all the layer's.
    let service_legacy = [X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET]
        .iter()
        .any(|name| headers.contains_key(name));
    for (name, value) in fields {
        if name == RATELIMIT_POLICY || name == RATELIMIT {
            headers.append(name.clone(), value.clone());
        } else if !service_legacy {
            headers.insert(name.clone(), value.clone());
        }
    }
}

/// Appends `value` as a structured-field string (RFC 8941): quoted, with `"` and `\` escaped
/// and characters outside printable ASCII replaced.
fn push_sf_string(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway::flow::FlowRule;
    use spillway::keyed::KeyedRule;
    use spillway::{ManualClock, Spillway};

    #[test]
    fn names_are_the_refusals_and_a_name_met_again_is_numbered() {
        let spillway = Spillway::new_with_clock(ManualClock::new());
        spillway
            .load_flow_rules(vec![FlowRule::per_second("login", 5)])
            .unwrap();
        spillway
            .load_keyed_rules(vec![KeyedRule::per_second("login", 2)])
            .unwrap();
        // A resource never entered has no quotas yet.
        assert!(spillway.entry("login").key("10.0.0.1").quotas().is_empty());
        drop(spillway.entry("login").key("10.0.0.1").enter().unwrap());
        let quotas = spillway.entry("login").key("10.0.0.1").quotas();
        let fields = admitted_fields(&quotas, RateLimitFields::Ietf);
        // The per-key rule is named as its refusals name it.
        assert_eq!(
            fields[RATELIMIT_POLICY],
            r#""login";q=5;w=1, "login per key";q=2;w=1"#
        );
        assert_eq!(fields[RATELIMIT], r#""login";r=4, "login per key";r=1"#);
        drop(spillway.entry("login").key("10.0.0.1").enter().unwrap());
        let err = spillway.entry("login").key("10.0.0.1").enter().unwrap_err();
        assert_eq!(
            spillway.refusal_quota(&err).unwrap().policy,
            "login per key"
        );
        // A name met again all the same is numbered.
        let twice = [quotas[0].clone(), quotas[0].clone()];
        let fields = admitted_fields(&twice, RateLimitFields::Ietf);
        assert_eq!(fields[RATELIMIT], r#""login";r=4, "login#2";r=4"#);
        assert!(fields.get(X_RATELIMIT_LIMIT).is_none());
        assert!(admitted_fields(&[], RateLimitFields::Both).is_empty());
        let none = admitted_fields(&quotas, RateLimitFields::None);
        assert!(none.is_empty());
    }
}
