//! What each request claims, read once when it arrives (from `[criticality]`, `[tenant]`,
//! `[deadline]` and its route): how critical it is, whose it is, and until when it may be
//! served. The claim rides in the request's extensions: spillway's layer reads it into the
//! entry (an adaptive limit's queue orders and refuses by it), and the forwarder tells the
//! upstream what time is left and stops waiting for it when none is.

use crate::config::Config;
use crate::keyed::{RouteSource, Source};
use http::request::Parts;
use http::{HeaderName, HeaderValue, Method};
use spillway::Criticality;
use spillway_tower::keys::TrustedProxies;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What a request claims: an extension of the request, put there as it arrives.
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub(crate) criticality: Criticality,
    pub(crate) tenant: Option<String>,
    /// When its time is up, if it has a deadline.
    pub(crate) deadline: Option<Instant>,
    /// When it arrived.
    pub(crate) arrived: Instant,
    /// The header the proxy writes the milliseconds left in, when forwarding it.
    pub(crate) deadline_header: Option<HeaderName>,
    /// Whether the proxy reads, and so rewrites, a gRPC call's `grpc-timeout`.
    pub(crate) grpc: bool,
    /// Whether the deadline is the configuration's (the route's, `[deadline] default`, or
    /// `max` where it cut the client's), not one the client gave: only then does the proxy wait
    /// for the upstream no longer than it, and a deadline that runs out there is the
    /// upstream's failure (a client could otherwise make a healthy upstream fail, or free its
    /// places while the upstream works, with tiny deadlines).
    pub(crate) configured: bool,
}

impl Claim {
    /// The time it has left at `now` (`None`: no deadline).
    pub(crate) fn left(&self, now: Instant) -> Option<Duration> {
        self.deadline.map(|at| at.saturating_duration_since(now))
    }
}

/// How the requests of one route are classified.
#[derive(Debug)]
pub(crate) struct RouteClaims {
    header: Option<HeaderName>,
    /// The `[[criticality.rule]]`s that can match the route's resource, in file order.
    rules: Vec<ClassRule>,
    /// The route's criticality, else `[criticality] default`.
    fallback: Criticality,
    tenant: Option<RouteSource>,
    grpc: bool,
    deadline_header: Option<HeaderName>,
    /// The route's deadline, else `[deadline] default`.
    default_deadline: Option<Duration>,
    max_deadline: Option<Duration>,
}

#[derive(Debug)]
struct ClassRule {
    class: Criticality,
    methods: Vec<Method>,
    key: Option<(RouteSource, Vec<String>)>,
}

impl RouteClaims {
    /// How the route to `resource` with path `path` (`None`: the default route), with its
    /// own `criticality` and `deadline`, classifies its requests; `None` when `config` and the
    /// route set nothing to classify by (its requests carry no claim).
    pub(crate) fn new(
        config: &Config,
        resource: &str,
        path: Option<crate::keyed::RoutePath<'_>>,
        criticality: Option<Criticality>,
        deadline: Option<Duration>,
    ) -> Option<Arc<Self>> {
        let classes = config.criticality.as_ref().map(|c| c.get_ref());
        let tenant = config.tenant.as_ref().map(|t| t.get_ref());
        let deadlines = config.deadline.as_ref().map(|d| d.get_ref());
        if classes.is_none()
            && tenant.is_none()
            && deadlines.is_none()
            && criticality.is_none()
            && deadline.is_none()
        {
            return None;
        }
        let header_name = |name: &Option<String>| {
            name.as_deref()
                .and_then(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        };
        let source = |text: &str| Source::parse(text).ok().map(|s| RouteSource::of(&s, path));
        let rules = classes
            .map(|classes| classes.rules.as_slice())
            .unwrap_or_default()
            .iter()
            .map(toml::Spanned::get_ref)
            .filter(|rule| rule.resource.as_deref().is_none_or(|r| r == resource))
            .map(|rule| ClassRule {
                class: rule.class,
                methods: (rule.methods.iter())
                    .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
                    .collect(),
                key: (rule.key.as_deref()).and_then(source).map(|key| {
                    let values = rule.values.iter().map(|v| key.as_read(v)).collect();
                    (key, values)
                }),
            })
            .collect();
        Some(Arc::new(Self {
            header: classes.and_then(|classes| header_name(&classes.header)),
            rules,
            fallback: criticality
                .or(classes.map(|classes| classes.default))
                .unwrap_or_default(),
            tenant: tenant.and_then(|tenant| source(&tenant.key)),
            // gRPC deadlines are read where deadlines are configured: a `[deadline]` section
            // (unless it says `grpc = false`), or the route's own.
            grpc: deadlines.map_or(deadline.is_some(), |d| d.grpc),
            deadline_header: deadlines.and_then(|d| header_name(&d.header)),
            default_deadline: deadline.or(deadlines.and_then(|d| d.default)),
            max_deadline: deadlines.and_then(|d| d.max),
        }))
    }

    /// Whether reading a claim needs the client's address.
    pub(crate) fn reads_peer(&self) -> bool {
        let rule_reads =
            |rule: &ClassRule| rule.key.as_ref().is_some_and(|(key, _)| key.reads_peer());
        self.tenant.as_ref().is_some_and(RouteSource::reads_peer)
            || self.rules.iter().any(rule_reads)
    }

    /// A key its tenant or its criticality rules read that the request with `headers` and
    /// `uri` states more than once ([`RouteSource::repeated`]).
    pub(crate) fn repeated(&self, headers: &http::HeaderMap, uri: &http::Uri) -> Option<String> {
        let rules = self.rules.iter().filter_map(|rule| rule.key.as_ref());
        (self.tenant.iter())
            .chain(rules.map(|(source, _)| source))
            .find_map(|source| source.repeated(headers, uri))
    }

    /// What the request with head `parts`, arrived at `arrived`, claims.
    pub(crate) fn read(&self, parts: &Parts, trusted: &TrustedProxies, arrived: Instant) -> Claim {
        let left = self.left(parts);
        Claim {
            criticality: self.criticality(parts, trusted),
            tenant: self
                .tenant
                .as_ref()
                .and_then(|key| key.value(parts, trusted)),
            // A deadline past what the clock can say is none.
            deadline: left.and_then(|(left, _)| arrived.checked_add(left)),
            arrived,
            deadline_header: self.deadline_header.clone(),
            grpc: self.grpc,
            configured: left.is_some_and(|(_, configured)| configured),
        }
    }

    fn criticality(&self, parts: &Parts, trusted: &TrustedProxies) -> Criticality {
        let named = self.header.as_ref().and_then(|name| {
            spillway_tower::protect::lowest_criticality(parts.headers.get_all(name))
        });
        let matching = || {
            self.rules.iter().find(|rule| {
                crate::router::method_matches(&rule.methods, &parts.method)
                    && rule.key.as_ref().is_none_or(|(key, values)| {
                        key.value(parts, trusted)
                            .is_some_and(|value| values.contains(&value))
                    })
            })
        };
        named
            .or_else(|| matching().map(|rule| rule.class))
            .unwrap_or(self.fallback)
    }

    /// The time the request has left as it arrives: what it says (its `grpc-timeout`, the
    /// deadline header), else the route's default, at most the cap; and whether it is the
    /// configuration's.
    fn left(&self, parts: &Parts) -> Option<(Duration, bool)> {
        let headers = &parts.headers;
        let grpc = (self.grpc && spillway_tower::grpc::is_grpc(headers))
            .then(|| spillway_tower::grpc::grpc_timeout(headers))
            .flatten();
        let header = || {
            let name = self.deadline_header.as_ref()?;
            let mut values = headers.get_all(name).iter();
            let (value, None) = (values.next()?, values.next()) else {
                return None;
            };
            spillway_tower::protect::parse_millis(value.to_str().ok()?)
        };
        let (left, configured) = match grpc.or_else(header) {
            Some(given) => (given, false),
            None => (self.default_deadline?, true),
        };
        // A client's deadline cut by `max` is the configuration's.
        match self.max_deadline {
            Some(max) if max < left => Some((max, true)),
            _ => Some((left, configured)),
        }
    }
}

/// Writes the time `left` into the head of a request being forwarded: gRPC's `grpc-timeout`
/// (rounded down, so the upstream never believes it has more) on a gRPC call, where the proxy
/// reads it (so that `left` is never more than the client gave), and the
/// deadline header (whole milliseconds, rounded down) when one is configured.
pub(crate) fn tell_upstream(headers: &mut http::HeaderMap, claim: &Claim, left: Duration) {
    if claim.grpc && spillway_tower::grpc::is_grpc(headers) {
        let value = spillway_tower::grpc::encode_grpc_timeout(left);
        headers.insert(spillway_tower::grpc::GRPC_TIMEOUT, value);
    }
    if let Some(name) = &claim.deadline_header {
        // At most the 12 digits a deadline header may hold (31 years), so that a proxy behind
        // reads what this one writes.
        let millis = u64::try_from(left.as_millis())
            .map_or(MAX_HEADER_MILLIS, |millis| millis.min(MAX_HEADER_MILLIS));
        headers.insert(name.clone(), HeaderValue::from(millis));
    }
}

/// The most milliseconds a deadline header holds: 12 digits.
const MAX_HEADER_MILLIS: u64 = 999_999_999_999;

/// Removes from the head of a request being forwarded with no deadline the deadline fields the
/// proxy reads and found none in (malformed: a sign, too many digits, a bad unit), so that the
/// upstream does not act on a deadline the proxy ignored.
pub(crate) fn forget_unread(headers: &mut http::HeaderMap, claim: &Claim) {
    if claim.grpc && spillway_tower::grpc::is_grpc(headers) {
        headers.remove(spillway_tower::grpc::GRPC_TIMEOUT);
    }
    if let Some(name) = &claim.deadline_header {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        crate::checked::parse(text, "test.toml").unwrap()
    }

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    const BASE: &str = r#"
[[upstream]]
name = "app"
url = "http://127.0.0.1:1"
"#;

    #[test]
    fn nothing_to_classify_by_makes_no_claim() {
        let config = config(BASE);
        assert!(RouteClaims::new(&config, "r", None, None, None).is_none());
    }

    #[test]
    fn the_header_then_the_rules_then_the_route_then_the_default() {
        let text = format!(
            "{BASE}
[criticality]
header = \"x-criticality\"
default = \"sheddable_plus\"
[[criticality.rule]]
class = \"sheddable\"
methods = [\"GET\"]
key = \"header:user-agent\"
values = [\"crawler\"]
[[criticality.rule]]
class = \"critical_plus\"
resource = \"checkout\"
"
        );
        let config = config(&text);
        let trusted = TrustedProxies::default();
        let now = Instant::now();
        let search = RouteClaims::new(&config, "search", None, None, None).unwrap();
        let class = |route: &RouteClaims, method, headers: &[(&str, &str)]| {
            route
                .read(&parts(method, "/x", headers), &trusted, now)
                .criticality
        };
        assert_eq!(class(&search, "GET", &[]), Criticality::SheddablePlus);
        let crawler = [("user-agent", "crawler")];
        assert_eq!(class(&search, "GET", &crawler), Criticality::Sheddable);
        assert_eq!(class(&search, "POST", &crawler), Criticality::SheddablePlus);
        let named = [
            ("user-agent", "crawler"),
            ("x-criticality", "Critical-Plus"),
        ];
        assert_eq!(class(&search, "GET", &named), Criticality::CriticalPlus);
        let unknown = [("x-criticality", "urgent")];
        assert_eq!(class(&search, "GET", &unknown), Criticality::SheddablePlus);
        let two = [
            ("x-criticality", "critical"),
            ("x-criticality", "sheddable"),
        ];
        assert_eq!(class(&search, "GET", &two), Criticality::Sheddable);
        // Folded into one line by a proxy (found by an attack: the line was read as no value).
        for folded in [
            "critical_plus, sheddable",
            "sheddable,critical_plus",
            "sheddable;q=1",
        ] {
            let headers = [("x-criticality", folded)];
            assert_eq!(
                class(&search, "GET", &headers),
                Criticality::Sheddable,
                "{folded}"
            );
        }
        let checkout = RouteClaims::new(&config, "checkout", None, None, None).unwrap();
        assert_eq!(class(&checkout, "POST", &[]), Criticality::CriticalPlus);
        let own = RouteClaims::new(&config, "feed", None, Some(Criticality::Critical), None);
        assert_eq!(class(&own.unwrap(), "POST", &[]), Criticality::Critical);
    }

    /// A `[deadline]` section with no cap.
    fn config_uncapped() -> Config {
        config(&format!("{BASE}\n[deadline]\n"))
    }

    #[test]
    fn deadlines_come_from_grpc_the_header_or_the_route_and_are_capped() {
        let text = format!(
            "{BASE}
[deadline]
header = \"x-deadline-ms\"
default = \"2s\"
max = \"5s\"
"
        );
        let config = config(&text);
        let trusted = TrustedProxies::default();
        let now = Instant::now();
        let route = RouteClaims::new(&config, "r", None, None, None).unwrap();
        let left = |headers: &[(&str, &str)]| {
            let claim = route.read(&parts("POST", "/x", headers), &trusted, now);
            claim.left(now)
        };
        let ms = Duration::from_millis;
        assert_eq!(left(&[]), Some(ms(2000)));
        assert_eq!(left(&[("x-deadline-ms", "250")]), Some(ms(250)));
        assert_eq!(left(&[("x-deadline-ms", "99999")]), Some(ms(5000)));
        assert_eq!(left(&[("x-deadline-ms", "-3")]), Some(ms(2000)));
        let both = [("x-deadline-ms", "1"), ("x-deadline-ms", "2")];
        assert_eq!(left(&both), Some(ms(2000)));
        let years = [
            ("content-type", "application/grpc"),
            ("grpc-timeout", "99999999H"),
        ];
        let route_uncapped = RouteClaims::new(&config_uncapped(), "r", None, None, None).unwrap();
        let claim = route_uncapped.read(&parts("POST", "/x", &years), &trusted, now);
        assert_eq!(
            claim.left(now),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
        let grpc = [
            ("content-type", "application/grpc"),
            ("grpc-timeout", "100m"),
            ("x-deadline-ms", "300"),
        ];
        assert_eq!(left(&grpc), Some(ms(100)));
        let bad_grpc = [("content-type", "application/grpc"), ("grpc-timeout", "1x")];
        assert_eq!(left(&bad_grpc), Some(ms(2000)));
        let given = route.read(&parts("POST", "/x", &grpc), &trusted, now);
        assert!(!given.configured && given.grpc);
        // A client's deadline that `max` cut is the configuration's.
        let capped = route.read(
            &parts("POST", "/x", &[("x-deadline-ms", "99999")]),
            &trusted,
            now,
        );
        assert!(capped.configured);
        let routed = RouteClaims::new(&config, "r", None, None, Some(ms(700))).unwrap();
        let claim = routed.read(&parts("GET", "/", &[]), &trusted, now);
        assert_eq!(claim.left(now), Some(ms(700)));
        assert!(claim.configured);
        assert_eq!(claim.left(now + ms(900)), Some(Duration::ZERO));
    }

    #[test]
    fn the_upstream_is_told_what_is_left_rounded_down() {
        let text = format!("{BASE}\n[deadline]\nheader = \"x-deadline-ms\"\n");
        let config = config(&text);
        let route = RouteClaims::new(&config, "r", None, None, None).unwrap();
        let now = Instant::now();
        let trusted = TrustedProxies::default();
        let mut head = parts(
            "POST",
            "/x",
            &[("content-type", "application/grpc"), ("grpc-timeout", "1S")],
        );
        let claim = route.read(&head, &trusted, now);
        tell_upstream(&mut head.headers, &claim, Duration::from_micros(2_999_999));
        assert_eq!(head.headers["grpc-timeout"], "2999999u");
        assert_eq!(head.headers["x-deadline-ms"], "2999");
        // Years (no `max`): the header holds the 12 digits a reader takes.
        let years = Duration::from_secs(99_999_999 * 3600);
        tell_upstream(&mut head.headers, &claim, years);
        assert_eq!(head.headers["x-deadline-ms"], "999999999999");
    }

    #[test]
    fn grpc_deadlines_are_read_only_where_deadlines_are_configured() {
        let grpc = [
            ("content-type", "application/grpc"),
            ("grpc-timeout", "100m"),
        ];
        let (trusted, now) = (TrustedProxies::default(), Instant::now());
        let classes_only = config(&format!("{BASE}\n[criticality]\nheader = \"x-c\"\n"));
        let route = RouteClaims::new(&classes_only, "r", None, None, None).unwrap();
        let claim = route.read(&parts("POST", "/x", &grpc), &trusted, now);
        assert_eq!(claim.left(now), None);
        let own = RouteClaims::new(&classes_only, "r", None, None, Some(Duration::from_secs(2)));
        let claim = own
            .unwrap()
            .read(&parts("POST", "/x", &grpc), &trusted, now);
        assert_eq!(claim.left(now), Some(Duration::from_millis(100)));
        let off = config(&format!(
            "{BASE}\n[deadline]\ngrpc = false\ndefault = \"2s\"\n"
        ));
        let route = RouteClaims::new(&off, "r", None, None, None).unwrap();
        let claim = route.read(&parts("POST", "/x", &grpc), &trusted, now);
        assert_eq!(claim.left(now), Some(Duration::from_secs(2)));
        // Not read, not rewritten: the upstream keeps the client's 100 ms.
        let mut head = parts("POST", "/x", &grpc);
        tell_upstream(&mut head.headers, &claim, Duration::from_secs(2));
        assert_eq!(head.headers["grpc-timeout"], "100m");
    }

    #[test]
    fn tenants_are_read_as_keys() {
        let text = format!("{BASE}\n[tenant]\nkey = \"query:account\"\n");
        let config = config(&text);
        let route = RouteClaims::new(&config, "r", None, None, None).unwrap();
        let claim = route.read(
            &parts("GET", "/x?account=acme", &[]),
            &TrustedProxies::default(),
            Instant::now(),
        );
        assert_eq!(claim.tenant.as_deref(), Some("acme"));
        assert_eq!(claim.criticality, Criticality::Critical);
        assert!(!route.reads_peer());
    }
}
