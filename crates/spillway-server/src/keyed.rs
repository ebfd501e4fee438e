//! Per-key rules in the proxy: where each request's key comes from (the client's address, a
//! header, a query parameter, a segment of the route's path), which position of the entry's
//! keys each source fills, and what a request without its key gets.

use crate::config::{Config, KeyedConfig, OnMissing};
use http::header::HeaderName;
use http::request::Parts;
use spillway_tower::keys::{
    header_repeated, header_value, query_repeated, query_value, PeerAddr, TrustedProxies,
};
pub(crate) use spillway_tower::keys::{path_segment, trusted_proxies};
use spillway_tower::protect::OnMissingKey;
use spillway_tower::SpillwayLayer;
use std::borrow::Cow;
use std::collections::HashMap;

/// Where a key comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// The client's address: the peer's, or through trusted proxies, the one they name.
    PeerIp,
    /// A request header (a request giving it twice is refused: see `RouteSource::repeated`).
    Header(HeaderName),
    /// A query parameter, percent-decoded (likewise).
    Query(String),
    /// A `{name}` segment of the route's path.
    Path(String),
}

impl Source {
    /// Parses `peer_ip`, `header:NAME`, `query:NAME` or `path:NAME`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let named = |name: &str| -> Result<String, String> {
            if name.is_empty() {
                Err(format!(
                    "`{text}` names no {}",
                    text.split(':').next().unwrap_or("")
                ))
            } else {
                Ok(name.to_owned())
            }
        };
        match text.split_once(':') {
            None if text == "peer_ip" => Ok(Source::PeerIp),
            Some(("header", name)) => HeaderName::from_bytes(named(name)?.as_bytes())
                .map(Source::Header)
                .map_err(|_| format!("`{name}` is not a header name")),
            Some(("query", name)) => named(name).map(Source::Query),
            Some(("path", name)) => named(name).map(Source::Path),
            _ => Err(format!(
                "`{text}` is not a key source: `peer_ip`, `header:NAME`, `query:NAME` or `path:NAME`"
            )),
        }
    }

    /// As written in the file.
    pub(crate) fn describe(&self) -> String {
        match self {
            Source::PeerIp => "peer_ip".to_owned(),
            Source::Header(name) => format!("header:{name}"),
            Source::Query(name) => format!("query:{name}"),
            Source::Path(name) => format!("path:{name}"),
        }
    }
}

/// Each resource's key sources, in the order their positions were given (at most
/// [`spillway::keyed::KEY_POSITIONS`]), each with what a request without it gets.
pub(crate) type Plan = HashMap<String, Vec<(Source, OnMissing)>>;

/// The plan of `config`'s per-key rules, and each rule with its position: the sources of a
/// resource's rules take positions in file order.
///
/// # Errors
///
/// The index of the rule at fault, the field, and why: an unknown source, more sources on one
/// resource than positions, rules on one source that disagree on `on_missing`.
pub(crate) fn plan(
    rules: &[KeyedConfig],
) -> Result<(Plan, Vec<spillway::keyed::KeyedRule>), (usize, &'static str, String)> {
    let mut plan: Plan = HashMap::new();
    let mut core = Vec::with_capacity(rules.len());
    for (index, rule) in rules.iter().enumerate() {
        let source = Source::parse(&rule.key).map_err(|why| (index, "key", why))?;
        let sources = plan.entry(rule.resource.clone()).or_default();
        let position = match sources.iter().position(|(known, _)| *known == source) {
            Some(position) => {
                if sources[position].1 != rule.on_missing {
                    return Err((
                        index,
                        "on_missing",
                        format!(
                            "must be the same for every rule keyed by `{}` on `{}`",
                            rule.key, rule.resource
                        ),
                    ));
                }
                position
            }
            None if sources.len() == spillway::keyed::KEY_POSITIONS => {
                return Err((
                    index,
                    "key",
                    format!(
                        "`{}` has rules keyed {} ways; at most {} are read",
                        rule.resource,
                        sources.len() + 1,
                        spillway::keyed::KEY_POSITIONS
                    ),
                ))
            }
            None => {
                sources.push((source, rule.on_missing));
                sources.len() - 1
            }
        };
        core.push(rule.rule(position));
    }
    spillway::keyed::validate_keyed_rules(&core)
        .map_err(|e| (e.index(), e.field(), e.problem().to_owned()))?;
    Ok((plan, core))
}

/// The per-key rules of `config`, each with its position (a checked configuration has no
/// fault).
pub(crate) fn rules(config: &Config) -> Vec<spillway::keyed::KeyedRule> {
    let configs: Vec<KeyedConfig> = config.keyed.iter().map(|r| r.get_ref().clone()).collect();
    plan(&configs).map(|(_, rules)| rules).unwrap_or_default()
}

/// One key a route reads.
#[derive(Debug, Clone)]
pub(crate) struct RouteKey {
    position: usize,
    source: RouteSource,
    missing: OnMissing,
    /// As written in the file, for a refusal's message.
    described: String,
}

/// Where a route reads a key (a [`Source`] on the route's path template).
#[derive(Debug, Clone)]
pub(crate) enum RouteSource {
    PeerIp,
    Header(HeaderName),
    Query(String),
    /// The path's segment at this index (after the leading `/`); `None`: the route's path has
    /// no such segment, so every request lacks the key. Read in lower case when `any_case`.
    Segment {
        index: Option<usize>,
        any_case: bool,
    },
}

/// A route's path, as its keys read segments of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoutePath<'a> {
    /// Its template (`/users/{id}`).
    pub(crate) template: &'a str,
    /// Whether it matches a path in any case (`case_sensitive = false`): the segments its keys
    /// read are then read in lower case, so that `/users/ALICE` is `alice`'s call.
    pub(crate) any_case: bool,
}

impl<'a> From<&'a str> for RoutePath<'a> {
    /// A template matched case by case.
    fn from(template: &'a str) -> Self {
        Self {
            template,
            any_case: false,
        }
    }
}

/// The keys the route with path `path` (`None`: the default route) reads for `resource`.
pub(crate) fn route_keys(
    plan: &Plan,
    resource: &str,
    path: Option<RoutePath<'_>>,
) -> Vec<RouteKey> {
    let Some(sources) = plan.get(resource) else {
        return Vec::new();
    };
    sources
        .iter()
        .enumerate()
        .map(|(position, (source, missing))| RouteKey {
            position,
            missing: *missing,
            described: source.describe(),
            source: RouteSource::of(source, path),
        })
        .collect()
}

impl RouteKey {
    /// Its source as the file writes it (`peer_ip`, `header:NAME`, ...).
    pub(crate) fn described(&self) -> &str {
        &self.described
    }

    /// Where the request states it more than once ([`RouteSource::repeated`]).
    pub(crate) fn repeated(&self, headers: &http::HeaderMap, uri: &http::Uri) -> Option<String> {
        self.source.repeated(headers, uri)
    }

    /// Its value in the request with head `parts`, read as the layer reads it.
    pub(crate) fn value(&self, parts: &Parts, trusted: &TrustedProxies) -> Option<String> {
        self.source.value(parts, trusted)
    }

    /// Whether it is the client's address (read from a [`PeerAddr`] in the request's
    /// extensions).
    pub(crate) fn reads_peer(&self) -> bool {
        self.source.reads_peer()
    }

    /// `layer`, reading this key from each request (through `trusted` proxies for the client's
    /// address), with what a request without it gets.
    pub(crate) fn read_by(&self, layer: SpillwayLayer, trusted: &TrustedProxies) -> SpillwayLayer {
        let (source, trusted) = (self.source.clone(), trusted.clone());
        let read = move |parts: &Parts| source.value(parts, &trusted);
        let missing = match self.missing {
            OnMissing::Pass => OnMissingKey::Pass,
            OnMissing::Shared => OnMissingKey::Shared,
            OnMissing::Refuse => OnMissingKey::Refuse,
        };
        layer
            .named_key(self.position, self.described.clone(), read)
            .on_missing_key(self.position, missing)
    }
}

impl RouteSource {
    /// Where the route with path `path` (`None`: the default route) reads `source`.
    pub(crate) fn of(source: &Source, path: Option<RoutePath<'_>>) -> Self {
        match source {
            Source::PeerIp => RouteSource::PeerIp,
            Source::Header(name) => RouteSource::Header(name.clone()),
            Source::Query(name) => RouteSource::Query(name.clone()),
            Source::Path(name) => RouteSource::Segment {
                index: path.and_then(|path| path_segment(path.template, name)),
                any_case: path.is_some_and(|path| path.any_case),
            },
        }
    }

    /// Whether it is the client's address.
    pub(crate) fn reads_peer(&self) -> bool {
        matches!(self, RouteSource::PeerIp)
    }

    /// A value written by hand (a criticality rule's), as this source reads values: folded
    /// ([`crate::router::fold`]) for a segment of a path matched in any case.
    pub(crate) fn as_read(&self, value: &str) -> String {
        match self {
            RouteSource::Segment { any_case: true, .. } => crate::router::fold(value).into_owned(),
            _ => value.to_owned(),
        }
    }

    /// Where the request with `headers` and `uri` states this key more than once (a header on
    /// two lines, a query parameter twice), the key as the file writes it: no one value is
    /// the key then, since servers differ in which they read.
    pub(crate) fn repeated(&self, headers: &http::HeaderMap, uri: &http::Uri) -> Option<String> {
        match self {
            RouteSource::Header(name) => {
                header_repeated(headers, name).then(|| format!("header:{name}"))
            }
            RouteSource::Query(name) => (uri.query())
                .is_some_and(|query| query_repeated(query, name))
                .then(|| format!("query:{name}")),
            RouteSource::PeerIp | RouteSource::Segment { .. } => None,
        }
    }

    /// This key of the request with head `parts`, if it has one: as text, so that it matches
    /// an exception written as text (a header as `spillway_tower::keys::header_value` reads
    /// it: an empty one is missing, the raw bytes of one that is not UTF-8 in a form no text
    /// takes, `Host` as its host name in lower case without port or trailing dot).
    pub(crate) fn value(&self, parts: &Parts, trusted: &TrustedProxies) -> Option<String> {
        match self {
            RouteSource::PeerIp => {
                let peer = parts.extensions.get::<PeerAddr>()?.0.ip();
                Some(trusted.client_key(peer, &parts.headers))
            }
            RouteSource::Header(name) => header_value(&parts.headers, name),
            RouteSource::Query(name) => query_value(parts.uri.query()?, name).map(Cow::into_owned),
            RouteSource::Segment { index, any_case } => {
                // Read from the path the request was routed by.
                let path = crate::proxy::routable_path(parts.uri.path());
                let segment = path.strip_prefix('/')?.split('/').nth((*index)?)?;
                if segment.is_empty() {
                    return None;
                }
                // A route matched in any case: so are its keys, folded as routes match.
                Some(if *any_case {
                    crate::router::fold(segment).into_owned()
                } else {
                    segment.to_owned()
                })
            }
        }
    }
}

/// Why a value of `values`, keys of `source` written by hand (a per-key rule's exceptions, a
/// criticality rule's values), can never be a key the source reads: a `peer_ip` key that is
/// not an address or network as `prefixes` write keys (`2001:db8::1` where IPv6 clients are
/// keyed by /64). `None` when each can be, or the source reads other keys.
pub(crate) fn key_problem<'a>(
    source: &Source,
    values: impl IntoIterator<Item = &'a str>,
    prefixes: spillway_tower::keys::PeerIpPrefixes,
) -> Option<(usize, String)> {
    if *source != Source::PeerIp {
        return None;
    }
    values
        .into_iter()
        .enumerate()
        .find_map(|(index, value)| prefixes.check_key(value).err().map(|why| (index, why)))
}

/// [`key_problem`] for a criticality rule's `values` read from `source` under `config`'s
/// listener (nothing when the source or the listener's prefixes are themselves at fault).
pub(crate) fn values_problem(
    source: &Result<Source, String>,
    values: &[String],
    config: &Config,
) -> Option<String> {
    let prefixes = config.listener.peer_ip_prefixes().ok()?;
    let source = source.as_ref().ok()?;
    key_problem(source, values.iter().map(String::as_str), prefixes)
        .map(|(index, why)| format!("value {index}: {why}"))
}

/// [`key_problem`] for a per-key rule's exceptions: the exception at fault and why.
pub(crate) fn exception_problem(
    rule: &KeyedConfig,
    prefixes: spillway_tower::keys::PeerIpPrefixes,
) -> Option<(usize, String)> {
    let source = Source::parse(&rule.key).ok()?;
    let keys = rule
        .exceptions
        .iter()
        .map(|exception| exception.key.as_str());
    key_problem(&source, keys, prefixes)
}

/// Why `rule` cannot read its key on every route that produces its resource: a `path:NAME`
/// source that a route's template lacks, or that the default route (which has none) would
/// need. `routes`: each route's resource and path template, the default route's with none.
pub(crate) fn path_problem<'a>(
    rule: &KeyedConfig,
    routes: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Option<String> {
    let Ok(Source::Path(name)) = Source::parse(&rule.key) else {
        return None;
    };
    let resource = rule.resource.as_str();
    let mut default_produces = false;
    for (produces, template) in routes {
        if produces != resource {
            continue;
        }
        match template {
            Some(path) if path_segment(path, &name).is_none() => {
                return Some(format!(
                    "reads `{{{name}}}` from the path, and the route `{path}` to `{resource}` has no such segment"
                ))
            }
            Some(_) => {}
            None => default_produces = true,
        }
    }
    default_produces.then(|| {
        format!(
            "reads `{{{name}}}` from the path, and `{resource}` is the default route's resource, which has no path template"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::get(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let mut parts = builder.body(()).unwrap().into_parts().0;
        parts
            .extensions
            .insert(PeerAddr("9.9.9.9:4000".parse().unwrap()));
        parts
    }

    #[test]
    fn sources_parse_and_name_what_is_wrong() {
        assert_eq!(Source::parse("peer_ip"), Ok(Source::PeerIp));
        assert_eq!(
            Source::parse("header:X-User"),
            Ok(Source::Header(HeaderName::from_static("x-user")))
        );
        assert_eq!(
            Source::parse("query:user"),
            Ok(Source::Query("user".into()))
        );
        assert_eq!(Source::parse("path:id"), Ok(Source::Path("id".into())));
        assert!(Source::parse("header:bad name")
            .unwrap_err()
            .contains("not a header name"));
        assert!(Source::parse("query:")
            .unwrap_err()
            .contains("names no query"));
        assert!(Source::parse("cookie:x")
            .unwrap_err()
            .contains("not a key source"));
        assert!(Source::parse("").unwrap_err().contains("not a key source"));
    }

    #[test]
    fn keys_come_from_headers_queries_and_path_segments() {
        let keys = |resource_rules: &[(&str, OnMissing)], template| {
            let plan: Plan = [(
                "r".to_owned(),
                resource_rules
                    .iter()
                    .map(|(source, missing)| (Source::parse(source).unwrap(), *missing))
                    .collect(),
            )]
            .into();
            route_keys(&plan, "r", template)
        };
        let read = |keys: &[RouteKey], request: &Parts| -> Vec<Option<String>> {
            keys.iter()
                .map(|key| key.source.value(request, &TrustedProxies::default()))
                .collect()
        };
        let all = keys(
            &[
                ("header:x-user", OnMissing::Pass),
                ("query:user", OnMissing::Pass),
                ("path:id", OnMissing::Pass),
                ("peer_ip", OnMissing::Pass),
            ],
            Some("/users/{id}/orders".into()),
        );
        let request = request(
            "/users/42/orders?x=1&user=a%20b+c&user=second",
            &[("x-user", "alice")],
        );
        assert_eq!(
            read(&all, &request),
            [
                Some("alice".into()),
                Some("a b c".into()),
                Some("42".into()),
                Some("9.9.9.9".into())
            ]
        );
        let bare = request_without();
        assert_eq!(
            read(&all, &bare),
            [None, None, None, Some("9.9.9.9".into())]
        );
        // The default route has no template: a path key is always missing there.
        let default = keys(&[("path:id", OnMissing::Pass)], None);
        assert_eq!(read(&default, &request), [None]);
    }

    fn request_without() -> Parts {
        request("/users", &[])
    }

    #[test]
    fn a_header_that_is_not_text_is_a_key_no_text_can_be() {
        let plan: Plan = [(
            "r".to_owned(),
            vec![(Source::parse("header:x-user").unwrap(), OnMissing::Pass)],
        )]
        .into();
        let keys = route_keys(&plan, "r", None);
        let mut parts = request("/", &[]);
        let mut read = |value: &[u8]| {
            let value = http::HeaderValue::from_bytes(value).unwrap();
            parts.headers.insert("x-user", value);
            keys[0].source.value(&parts, &TrustedProxies::default())
        };
        let (a, b) = (read(b"caf\xe9"), read(b"caf\xe8"));
        assert_eq!(a.as_deref(), Some("\u{0}bytes:636166e9"));
        assert_ne!(a, b);
        assert_eq!(read(b"cafe").as_deref(), Some("cafe"));
    }
}
