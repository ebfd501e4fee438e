//! Matching a request to its route: method and path, first match wins.

use crate::config::{Config, Route};
use http::Method;

/// A route's path: a prefix, or a template of literal and `{name}` segments with an optional
/// final `{*rest}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// `/api`: the path itself and everything under it (`/api/...`), not `/apix`.
    Prefix(String),
    /// `/users/{id}/orders`: segment by segment.
    Template {
        /// Literal segments, `None` for a `{name}` segment.
        segments: Vec<Option<String>>,
        /// Whether a final `{*rest}` takes the remaining segments (at least one).
        rest: bool,
    },
}

impl Pattern {
    /// Parses a route path.
    ///
    /// # Errors
    ///
    /// What is wrong with it.
    pub fn parse(path: &str) -> Result<Self, String> {
        if !path.starts_with('/') {
            return Err(format!("`{path}` must start with /"));
        }
        if !path.contains('{') && !path.contains('}') {
            return Ok(Pattern::Prefix(path.trim_end_matches('/').to_owned()));
        }
        // A trailing `/` matches as a path without it does, as for a prefix.
        let parts: Vec<&str> = path[1..].trim_end_matches('/').split('/').collect();
        let mut segments = Vec::with_capacity(parts.len());
        let mut rest = false;
        for (index, part) in parts.iter().enumerate() {
            if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                if let Some(name) = name.strip_prefix('*') {
                    if index + 1 != parts.len() {
                        return Err(format!(
                            "`{{*{name}}}` must be the last segment of `{path}`"
                        ));
                    }
                    rest = true;
                    continue;
                }
                if name.is_empty() || name.contains(['{', '}']) {
                    return Err(format!("`{part}` in `{path}` is not a `{{name}}` segment"));
                }
                segments.push(None);
            } else if part.contains(['{', '}']) {
                return Err(format!(
                    "`{part}` in `{path}` mixes text and braces: a segment is text or `{{name}}`"
                ));
            } else {
                segments.push(Some((*part).to_owned()));
            }
        }
        Ok(Pattern::Template { segments, rest })
    }

    /// Whether `path` (without query) matches. A template matches a path with one trailing
    /// `/` as it matches the path without it (`/users/7/` as `/users/7`), as most servers
    /// route them, so that the `/` cannot take a request past the route's limits.
    pub fn matches(&self, path: &str) -> bool {
        self.matches_in(path, Case::Sensitive)
    }

    /// Whether `path` matches, its letters compared as `case` says (in any case: segment by
    /// segment, folded as Java's `equalsIgnoreCase` folds letters, percent-decoded).
    pub fn matches_in(&self, path: &str, case: Case) -> bool {
        let same = |a: &str, b: &str| match case {
            Case::Sensitive => a == b,
            Case::Insensitive => a.eq_ignore_ascii_case(b) || fold(a) == fold(b),
        };
        match self {
            Pattern::Prefix(prefix) if case == Case::Insensitive => {
                let mut parts = path.split('/');
                prefix.is_empty()
                    || prefix
                        .split('/')
                        .all(|segment| parts.next().is_some_and(|part| same(part, segment)))
            }
            Pattern::Prefix(prefix) => {
                prefix.is_empty()
                    || path == prefix
                    || path
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            }
            Pattern::Template { segments, rest } => {
                let Some(path) = path.strip_prefix('/') else {
                    return false;
                };
                let mut parts = path.split('/');
                for segment in segments {
                    match (parts.next(), segment) {
                        (Some(part), Some(literal)) if same(part, literal) => {}
                        (Some(part), None) if !part.is_empty() => {}
                        _ => return false,
                    }
                }
                match parts.next() {
                    None => !rest,
                    // One trailing `/`, and nothing after it.
                    Some("") if !rest => parts.next().is_none(),
                    Some(part) => *rest && !part.is_empty(),
                }
            }
        }
    }
}

/// `text`, a path segment in normal form (every byte but an unreserved one percent-encoded),
/// as servers that match paths in any case compare it: percent-decoded, each character the
/// lower case of its upper case, as Java's `equalsIgnoreCase` (Spring's case-insensitive
/// matching) folds them, so that `ſ` is `s`, the Kelvin sign `k` and `ı` `i`, as such
/// servers take them. (A character whose case is more than one character, `ß`, stays
/// itself, as there.)
pub(crate) fn fold(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('%') && text.is_ascii() {
        if !text.bytes().any(|byte| byte.is_ascii_uppercase()) {
            return std::borrow::Cow::Borrowed(text);
        }
        return std::borrow::Cow::Owned(text.to_ascii_lowercase());
    }
    // The one character a case mapping gives, or `otherwise` if it gives several.
    fn single(mut mapped: impl Iterator<Item = char>, otherwise: char) -> char {
        match (mapped.next(), mapped.next()) {
            (Some(c), None) => c,
            _ => otherwise,
        }
    }
    let decoded = percent_decoded(text);
    std::borrow::Cow::Owned(
        String::from_utf8_lossy(&decoded)
            .chars()
            .map(|c| {
                let upper = single(c.to_uppercase(), c);
                single(upper.to_lowercase(), upper)
            })
            .collect(),
    )
}

/// `text` with its `%XX` escapes decoded (a `%` not followed by two hex digits is kept).
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            if let (Some(high), Some(low)) = (hex(at + 1), hex(at + 2)) {
                // Two hex digits: at most 255.
                out.push((high * 16 + low) as u8);
                at += 3;
                continue;
            }
        }
        out.push(bytes[at]);
        at += 1;
    }
    out
}

/// How a route's path compares letters (`case_sensitive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Letter by letter (the default).
    Sensitive,
    /// ASCII letters in any case.
    Insensitive,
}

impl Case {
    /// A route's `case_sensitive`.
    pub fn of(case_sensitive: bool) -> Self {
        if case_sensitive {
            Case::Sensitive
        } else {
            Case::Insensitive
        }
    }
}

/// The routes, compiled.
#[derive(Debug, Clone)]
pub struct Router {
    routes: Vec<(Pattern, Case, Vec<Method>, usize)>,
}

impl Router {
    /// Compiles the routes of a checked configuration.
    pub fn new(config: &Config) -> Self {
        let routes = config
            .routes
            .iter()
            .enumerate()
            .filter_map(|(index, route)| {
                let route: &Route = route.get_ref();
                let pattern = Pattern::parse(&route.path).ok()?;
                let methods = route
                    .methods
                    .iter()
                    .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
                    .collect();
                Some((pattern, Case::of(route.case_sensitive), methods, index))
            })
            .collect();
        Self { routes }
    }

    /// The index of the first route matching `method` and `path`.
    pub fn find(&self, method: &Method, path: &str) -> Option<usize> {
        self.routes
            .iter()
            .find(|(pattern, case, methods, _)| {
                method_matches(methods, method) && pattern.matches_in(path, *case)
            })
            .map(|&(_, _, _, index)| index)
    }
}

/// Whether a request's `method` is among `methods` (empty: any). A HEAD request matches a list
/// that names GET: a server answers HEAD as it answers GET, without the body (RFC 9110
/// section 9.3.2), so a HEAD must not go past what limits the GET.
pub(crate) fn method_matches(methods: &[Method], method: &Method) -> bool {
    methods.is_empty()
        || methods.contains(method)
        || (method == Method::HEAD && methods.contains(&Method::GET))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_request_matches_what_names_get() {
        let get = [Method::GET];
        assert!(method_matches(&get, &Method::GET));
        assert!(method_matches(&get, &Method::HEAD));
        assert!(!method_matches(&get, &Method::POST));
        assert!(!method_matches(&[Method::POST], &Method::HEAD));
        assert!(method_matches(&[Method::HEAD], &Method::HEAD));
        assert!(!method_matches(&[Method::HEAD], &Method::GET));
        assert!(method_matches(&[], &Method::DELETE));
    }

    #[test]
    fn prefixes_match_whole_segments() {
        let api = Pattern::parse("/api").unwrap();
        assert!(api.matches("/api") && api.matches("/api/") && api.matches("/api/orders/7"));
        assert!(!api.matches("/apix") && !api.matches("/"));
        let root = Pattern::parse("/").unwrap();
        assert!(root.matches("/") && root.matches("/anything"));
    }

    #[test]
    fn templates_match_segment_by_segment() {
        let user = Pattern::parse("/users/{id}/orders").unwrap();
        assert!(user.matches("/users/7/orders"));
        assert!(!user.matches("/users//orders") && !user.matches("/users/7/orders/1"));
        // One trailing `/` is the same path; two are not (the normal form merges them).
        assert!(user.matches("/users/7/orders/"));
        assert!(!user.matches("/users/7/orders//"));
        let written = Pattern::parse("/users/{id}/").unwrap();
        assert!(written.matches("/users/7") && written.matches("/users/7/"));
        let id = Pattern::parse("/users/{id}").unwrap();
        assert!(id.matches("/users/7/") && !id.matches("/users/") && !id.matches("/users/7/x"));
        let files = Pattern::parse("/files/{*rest}").unwrap();
        assert!(
            files.matches("/files/a/b.txt")
                && !files.matches("/files")
                && !files.matches("/files/")
        );
    }

    #[test]
    fn a_route_in_any_case_matches_every_spelling_of_its_letters() {
        let any = Case::Insensitive;
        let api = Pattern::parse("/api/Orders").unwrap();
        assert!(api.matches_in("/API/orders", any) && api.matches_in("/api/ORDERS/7", any));
        assert!(!api.matches("/API/orders") && api.matches("/api/Orders/7"));
        assert!(!api.matches_in("/api/ordersx", any) && !api.matches_in("/apí/orders", any));
        let user = Pattern::parse("/users/{id}/orders").unwrap();
        assert!(user.matches_in("/USERS/Alice/Orders/", any));
        assert!(!user.matches("/USERS/alice/orders"));
        // A prefix shorter than a multi-byte path, cut inside a character, is no match.
        let short = Pattern::parse("/ab").unwrap();
        assert!(!short.matches_in("/aé", any));
        // Letters Java's and .NET's case folding take for ASCII ones (`ſ`, the Kelvin sign,
        // `ı`), percent-encoded as a path in normal form has them.
        let tokens = Pattern::parse("/api/tokens").unwrap();
        for spelling in [
            "/api/TO%E2%84%AAENS",
            "/api/to%E2%84%AAens/1",
            "/ap%C4%B1/tokens",
        ] {
            assert!(tokens.matches_in(spelling, any), "{spelling}");
            assert!(!tokens.matches(spelling), "{spelling}");
        }
        assert!(user.matches_in("/u%C5%BFers/x/orders", any));
        assert!(!tokens.matches_in("/api/tokensx", any) && !tokens.matches_in("/api", any));
        assert_eq!(fold("%zz%C3"), "%zz\u{fffd}");
        assert_eq!(fold("Users"), "users");
        assert_eq!(fold("u%C5%BFers"), "users"); // `ſ`
        assert_eq!(fold("%E2%84%AAate"), "kate"); // the Kelvin sign
        assert_eq!(fold("caf%C3%A9"), "café");
        assert_eq!(fold("stra%C3%9Fe"), "straße");
    }

    #[test]
    fn bad_paths_say_why() {
        assert!(Pattern::parse("api")
            .unwrap_err()
            .contains("must start with /"));
        assert!(Pattern::parse("/a/{*rest}/b")
            .unwrap_err()
            .contains("last segment"));
        assert!(Pattern::parse("/a/x{id}")
            .unwrap_err()
            .contains("mixes text and braces"));
        assert!(Pattern::parse("/a/{}")
            .unwrap_err()
            .contains("is not a `{name}` segment"));
    }
}
