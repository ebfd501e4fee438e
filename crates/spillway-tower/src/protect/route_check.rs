//! What a layer that names resources by route ([`by_route`](super::SpillwayLayer::by_route))
//! says of rules that cannot apply. axum does not list a router's routes, so the layer learns
//! them from the requests: at its first request it warns of rules on a `HEAD` route (a `HEAD`
//! request enters its `GET` route) or on a method not in capitals; at its first request a
//! minute or more after that, of the route-shaped rules (`METHOD /path`) that no request has
//! entered. No timer: the requests themselves, on the spillway's clock, run the checks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Once;
use std::time::Duration;

/// How long after its first request the layer looks for rules no request entered.
pub(crate) const ROUTE_CHECK_AFTER: Duration = Duration::from_secs(60);

/// The warnings listed at most, each time (then a count of the rest).
const MAX_WARNINGS: usize = 20;

/// A `by_route` layer's checks, shared by its services.
#[derive(Debug)]
pub(super) struct RouteCheck {
    first: Once,
    /// When the first request came (spillway clock nanoseconds).
    started: AtomicU64,
    /// Whether the later check ran: then a request pays one relaxed load.
    done: AtomicBool,
}

impl Default for RouteCheck {
    fn default() -> Self {
        Self {
            first: Once::new(),
            started: AtomicU64::new(0),
            done: AtomicBool::new(false),
        }
    }
}

impl RouteCheck {
    /// Notes a request: the first runs the first check, the first a minute or more later the
    /// second.
    #[inline]
    pub(super) fn on_request(&self, spillway: &spillway::Spillway) {
        if self.done.load(Ordering::Relaxed) {
            return;
        }
        self.later(spillway);
    }

    #[inline(never)]
    fn later(&self, spillway: &spillway::Spillway) {
        let now = spillway.clock().now_nanos();
        self.first.call_once(|| {
            self.started.store(now, Ordering::Relaxed);
            warn_never_applies(spillway);
        });
        let after = u64::try_from(ROUTE_CHECK_AFTER.as_nanos()).unwrap_or(u64::MAX);
        let started = self.started.load(Ordering::Relaxed);
        if now.saturating_sub(started) >= after && !self.done.swap(true, Ordering::Relaxed) {
            warn_unentered(spillway);
        }
    }
}

/// A resource named as `by_route` names one, `METHOD /path`: its method and path.
fn route_shaped(resource: &str) -> Option<(&str, &str)> {
    let (method, path) = resource.split_once(' ')?;
    let is_method = !method.is_empty() && method.bytes().all(|b| b.is_ascii_alphabetic());
    (is_method && path.starts_with('/')).then_some((method, path))
}

/// Why a route-shaped rule can never apply whatever the traffic, if it cannot.
fn never_applies(method: &str, path: &str) -> Option<String> {
    if method == "HEAD" {
        return Some(format!(
            "a HEAD request enters its route's GET resource: name `GET {path}`"
        ));
    }
    if method.bytes().any(|b| b.is_ascii_lowercase()) {
        let upper = method.to_ascii_uppercase();
        return Some(format!(
            "methods are case-sensitive and axum's are in capitals: `{upper} {path}`"
        ));
    }
    None
}

/// The first request's check: rules that can never apply, whatever the traffic.
fn warn_never_applies(spillway: &spillway::Spillway) {
    let mut warned = 0;
    for rule in spillway.unentered_rules() {
        let Some((method, path)) = route_shaped(&rule.resource) else {
            continue;
        };
        if let Some(why) = never_applies(method, path) {
            warned += 1;
            if warned <= MAX_WARNINGS {
                tracing::warn!(
                    kind = rule.kind,
                    id = %rule.id,
                    resource = %rule.resource,
                    "this rule never applies: {why}"
                );
            }
        }
    }
    if warned > MAX_WARNINGS {
        tracing::warn!("and {} more rules that never apply", warned - MAX_WARNINGS);
    }
}

/// Warns of each route-shaped rule no request has entered (those that never apply were named
/// at the first request).
fn warn_unentered(spillway: &spillway::Spillway) {
    let unentered: Vec<_> = spillway
        .unentered_rules()
        .into_iter()
        .filter(|rule| {
            route_shaped(&rule.resource)
                .is_some_and(|(method, path)| never_applies(method, path).is_none())
        })
        .collect();
    for rule in unentered.iter().take(MAX_WARNINGS) {
        tracing::warn!(
            kind = rule.kind,
            id = %rule.id,
            resource = %rule.resource,
            "no request has entered this rule's resource yet, a minute after the layer's first \
             request: if it is meant for a route, check the method and the path against the \
             route's template as axum writes it (`/users/{{id}}`)"
        );
    }
    if unentered.len() > MAX_WARNINGS {
        tracing::warn!(
            "and {} more rules whose resource no request has entered",
            unentered.len() - MAX_WARNINGS
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_shaped_resources_and_the_rules_that_never_apply() {
        assert_eq!(route_shaped("GET /search"), Some(("GET", "/search")));
        assert_eq!(route_shaped("GET unmatched"), None);
        assert_eq!(route_shaped("db.query"), None);
        assert_eq!(route_shaped("GET/search"), None);
        assert!(never_applies("GET", "/search").is_none());
        assert!(never_applies("HEAD", "/search")
            .unwrap()
            .contains("`GET /search`"));
        assert!(never_applies("Post", "/login")
            .unwrap()
            .contains("`POST /login`"));
    }
}
