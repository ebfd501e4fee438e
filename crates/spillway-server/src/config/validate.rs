//! Reading and checking a configuration: syntax, types, the listener, upstreams, routes and the
//! admin, and the references between routes and upstreams. The rules of each kind are checked
//! by their kind, through the [`Check`] given to them (`checked::parse` runs both).

use super::error::LineIndex;
use super::{Config, ConfigError};
use std::cell::RefCell;
use std::collections::HashSet;
use std::net::IpAddr;
use std::ops::Range;
use toml::Spanned;

/// Checks a configuration's text, `rules` checking its rules; `file` names it in errors.
///
/// # Errors
///
/// A [`ConfigError`] with every problem found, in file order, each naming its line and field:
/// every value of the wrong type and every unknown key, then what the checks find in the rest
/// (the checks do not run when a table lacks a field it needs). A file that is not valid TOML
/// stops at its first syntax error.
pub(crate) fn parse_with(
    text: &str,
    file: &str,
    rules: impl FnOnce(&Config, &Check<'_>),
) -> Result<Config, ConfigError> {
    let mut typed = super::typed::read_typed(text, file, MAX_PROBLEMS)?;
    let check = Check::new(text, file);
    if let Some(config) = &typed.config {
        check.all(config);
        rules(config, &check);
    }
    // What the checks say of a field blanked out is about its default, not the file.
    let removed = |problem: &ConfigError| {
        problem.problems().iter().any(|p| {
            p.field().is_some_and(|field| {
                typed.removed.iter().any(|gone| {
                    field == gone
                        || field.starts_with(&format!("{gone}."))
                        || field.starts_with(&format!("{gone}["))
                })
            })
        })
    };
    // An upstream set aside may be the one a route names: no second problem for it.
    let upstream_gone = typed
        .removed
        .iter()
        .any(|gone| gone.starts_with("upstream["));
    let names_upstream = |problem: &ConfigError| {
        upstream_gone
            && (problem.problems().iter()).any(|p| p.message().starts_with("no upstream is named"))
    };
    let checked: Vec<ConfigError> = (check.problems.into_inner().into_iter())
        .map(|problem| problem.map_fields(|field| typed.field_in_file(field)))
        .filter(|problem| !removed(problem) && !names_upstream(problem))
        .collect();
    let mut problems = std::mem::take(&mut typed.problems);
    problems.extend(checked);
    // The first in file order are the ones kept (stable: problems at one spot keep the order
    // they were found in).
    problems.sort_by_key(ConfigError::position);
    if problems.len() > MAX_PROBLEMS {
        problems.truncate(MAX_PROBLEMS);
        problems.push(ConfigError::at(
            file,
            text,
            Some(text.len()..text.len()),
            None,
            format!("stopped after {MAX_PROBLEMS} problems: fix these and check again"),
        ));
    }
    match (ConfigError::all(problems), typed.config) {
        (None, Some(config)) => Ok(config),
        (Some(error), _) => Err(error),
        // Unreachable: reading stops only with a problem noted.
        (None, None) => Err(ConfigError::file(file, "cannot be read")),
    }
}

/// Most problems one check lists: a file with thousands of bad rules is checked in about the
/// time a good one takes (each rule kind is checked again after each rule at fault).
pub const MAX_PROBLEMS: usize = 100;

/// The problems found in one configuration file, each noted where it is written.
pub(crate) struct Check<'a> {
    text: &'a str,
    file: &'a str,
    lines: LineIndex,
    pub(super) problems: RefCell<Vec<ConfigError>>,
}

impl<'a> Check<'a> {
    pub(super) fn new(text: &'a str, file: &'a str) -> Self {
        Self {
            text,
            file,
            lines: LineIndex::new(text),
            problems: RefCell::new(Vec::new()),
        }
    }

    /// Notes a problem in the item at `span`, pointing at `key` inside it when the key is
    /// written there.
    pub(crate) fn problem(
        &self,
        span: Range<usize>,
        path: String,
        key: &str,
        message: impl Into<String>,
    ) {
        let at = self.key_offset(&span, key).unwrap_or(span.start);
        let field = if key.is_empty() {
            path
        } else {
            format!("{path}.{key}")
        };
        let error = ConfigError::at_offset(self.file, &self.lines, at, Some(field), message);
        self.problems.borrow_mut().push(error);
    }

    /// Notes a problem with `key` of the table `[section]` (pointing at the key if it is
    /// written, else at the table, else at the top).
    fn section_problem(&self, section: &str, key: &str, message: impl Into<String>) {
        let span = self.section_span(section).unwrap_or(0..0);
        self.problem(span, section.to_owned(), key, message);
    }

    /// Where the table `[name]` is written: from its header to the next table's.
    fn section_span(&self, name: &str) -> Option<Range<usize>> {
        let header = format!("[{name}]");
        let mut offset = 0;
        let mut start = None;
        for line in self.text.split_inclusive('\n') {
            let trimmed = line.trim();
            if start.is_some() && trimmed.starts_with('[') {
                return start.map(|start| start..offset);
            }
            if trimmed == header || trimmed.starts_with(&format!("{header} ")) {
                start = Some(offset);
            }
            offset += line.len();
        }
        start.map(|start| start..self.text.len())
    }

    /// Where `key` (its first segment) is assigned inside `span`, if it is.
    fn key_offset(&self, span: &Range<usize>, key: &str) -> Option<usize> {
        let key = key.split('.').next().filter(|k| !k.is_empty())?;
        let item = self.text.get(span.clone())?;
        let mut offset = 0;
        for line in item.split_inclusive('\n') {
            let trimmed = line.trim_start();
            if let Some(rest) = trimmed.strip_prefix(key) {
                if rest.trim_start().starts_with('=') {
                    return Some(span.start + offset + (line.len() - trimmed.len()));
                }
            }
            offset += line.len();
        }
        None
    }

    fn all(&self, config: &Config) {
        self.listener(config);
        self.access_log(config);
        let upstreams = self.upstreams(&config.upstreams);
        self.routes(config, &upstreams);
        if let Some(blocked) = &config.blocked {
            let (span, item) = (blocked.span(), blocked.get_ref());
            if !(400..=599).contains(&item.status) {
                self.problem(
                    span.clone(),
                    "blocked".into(),
                    "status",
                    format!("must be an error status (400 to 599), got {}", item.status),
                );
            }
            if let Some(content_type) = &item.content_type {
                if http::HeaderValue::from_str(content_type).is_err() {
                    self.problem(
                        span,
                        "blocked".into(),
                        "content_type",
                        "is not a valid header value",
                    );
                }
            }
        }
        self.admin(config);
        self.claims(config);
    }

    /// `[criticality]`, `[tenant]`, `[deadline]`, and the routes' own criticality and deadline.
    fn claims(&self, config: &Config) {
        if let Some(criticality) = &config.criticality {
            let (span, item) = (criticality.span(), criticality.get_ref());
            let problem = |path: String, key: &str, message: String| {
                self.problem(span.clone(), path, key, message);
            };
            if let Some(name) = &item.header {
                if let Err(why) = check_header(name) {
                    problem("criticality".into(), "header", why);
                }
            }
            for (index, rule) in item.rules.iter().enumerate() {
                let (span, rule) = (rule.span(), rule.get_ref());
                let problem = |path: String, key: &str, message: String| {
                    self.problem(span.clone(), path, key, message);
                };
                let path = format!("criticality.rule[{index}]");
                if let Some(why) = check_methods(&rule.methods) {
                    problem(path.clone(), "methods", why);
                }
                if rule.resource.as_deref() == Some("") {
                    problem(path.clone(), "resource", "must not be empty".into());
                }
                match (&rule.key, rule.values.is_empty()) {
                    (Some(key), empty) => {
                        let source = crate::keyed::Source::parse(key);
                        if let Err(why) = source {
                            problem(path.clone(), "key", why);
                        } else if empty {
                            problem(
                                path.clone(),
                                "values",
                                "must name the values of `key` that match".into(),
                            );
                        } else if let Some(why) =
                            crate::keyed::values_problem(&source, &rule.values, config)
                        {
                            problem(path.clone(), "values", why);
                        }
                    }
                    (None, false) => {
                        problem(
                            path.clone(),
                            "key",
                            "must say where `values` are read".into(),
                        );
                    }
                    (None, true) => {
                        if rule.resource.is_none() && rule.methods.is_empty() {
                            problem(
                                path,
                                "class",
                                "the rule matches every request: give a `resource`, `methods` \
                                 or a `key`, or set `criticality.default` instead"
                                    .into(),
                            );
                        }
                    }
                }
            }
        }
        if let Some(tenant) = &config.tenant {
            if let Err(why) = crate::keyed::Source::parse(&tenant.get_ref().key) {
                self.problem(tenant.span(), "tenant".into(), "key", why);
            }
        }
        let mut max = None;
        if let Some(deadline) = &config.deadline {
            let (span, item) = (deadline.span(), deadline.get_ref());
            let problem = |key: &str, message: String| {
                self.problem(span.clone(), "deadline".into(), key, message);
            };
            if let Some(name) = &item.header {
                if let Err(why) = check_header(name) {
                    problem("header", why);
                } else if RESERVED.contains(&name.to_ascii_lowercase().as_str()) {
                    problem(
                        "header",
                        format!(
                            "`{name}` is a header the proxy or HTTP gives a meaning of its own: \
                             name one of yours (`x-deadline-ms`)"
                        ),
                    );
                }
            }
            for (key, value) in [("default", item.default), ("max", item.max)] {
                if value.is_some_and(|value| value.is_zero()) {
                    problem(key, "must be longer than 0".into());
                }
            }
            if let (Some(default), Some(most)) = (item.default, item.max) {
                if default > most {
                    problem(
                        "default",
                        format!("{default:?} is longer than `deadline.max` ({most:?})"),
                    );
                }
            }
            max = item.max;
        }
        for (index, route) in config.routes.iter().enumerate() {
            let Some(deadline) = route.get_ref().deadline else {
                continue;
            };
            let path = format!("route[{index}]");
            if deadline.is_zero() {
                self.problem(route.span(), path, "deadline", "must be longer than 0");
            } else if let Some(most) = max.filter(|most| deadline > *most) {
                self.problem(
                    route.span(),
                    path,
                    "deadline",
                    format!("{deadline:?} is longer than `deadline.max` ({most:?})"),
                );
            }
        }
    }

    fn listener(&self, config: &Config) {
        let listener = &config.listener;
        for (key, value) in [
            ("upstream_timeout", listener.upstream_timeout),
            ("header_timeout", listener.header_timeout),
            ("body_timeout", listener.body_timeout),
            ("send_timeout", listener.send_timeout),
            ("tunnel_idle_timeout", listener.tunnel_idle_timeout),
        ] {
            if value.is_zero() {
                self.section_problem("listener", key, "must be longer than 0");
            }
        }
        let idle = listener.tunnel_idle_timeout;
        if !idle.is_zero() && idle < std::time::Duration::from_secs(1) {
            self.section_problem(
                "listener",
                "tunnel_idle_timeout",
                format!(
                    "{idle:?} would close tunnels between two messages: at least 1s (most \
                     WebSocket servers ping every 30s)"
                ),
            );
        }
        if let Some(name) = &listener.origin_header {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                self.section_problem(
                    "listener",
                    "origin_header",
                    format!("`{name}` is not a valid header name"),
                );
            }
        }
        if let Err(why) = crate::keyed::trusted_proxies(&listener.trusted_proxies) {
            self.section_problem("listener", "trusted_proxies", why);
        }
        let default = spillway_tower::keys::PeerIpPrefixes::default();
        let v4 =
            spillway_tower::keys::PeerIpPrefixes::new(listener.peer_ip_prefix_v4, default.v6());
        if let Err(why) = v4 {
            self.section_problem("listener", "peer_ip_prefix_v4", why);
        }
        let v6 =
            spillway_tower::keys::PeerIpPrefixes::new(default.v4(), listener.peer_ip_prefix_v6);
        if let Err(why) = v6 {
            self.section_problem("listener", "peer_ip_prefix_v6", why);
        }
        let (min, max) = (super::MIN_MAX_HEADER_SIZE, super::MAX_MAX_HEADER_SIZE);
        if !(min..=max).contains(&listener.max_header_size) {
            self.section_problem(
                "listener",
                "max_header_size",
                format!(
                    "must be from {min} to {max} bytes, not {}",
                    listener.max_header_size
                ),
            );
        }
    }

    fn admin(&self, config: &Config) {
        let admin = &config.admin;
        if admin
            .token
            .as_deref()
            .is_some_and(|token| token.trim().is_empty())
        {
            self.section_problem(
                "admin",
                "token",
                "must not be blank: remove it to run without a token (loopback only)",
            );
        }
        let history = admin.history;
        if history.subsec_nanos() != 0 || !(10..=3600).contains(&history.as_secs()) {
            self.section_problem(
                "admin",
                "history",
                format!("must be whole seconds from 10 s to 1 h, not {history:?}"),
            );
        }
        if !(1..=100_000).contains(&admin.history_resources) {
            self.section_problem(
                "admin",
                "history_resources",
                format!("must be from 1 to 100000, not {}", admin.history_resources),
            );
        }
        if admin.header_timeout.is_zero() {
            self.section_problem("admin", "header_timeout", "must be longer than 0");
        }
        let most = crate::admin::MAX_CONNECTIONS - 1;
        if !(1..=most).contains(&admin.max_pending) {
            self.section_problem(
                "admin",
                "max_pending",
                format!(
                    "must be from 1 to {most}, not {}: of the {} admin connections, the rest \
                     are kept for those that showed the token",
                    admin.max_pending,
                    crate::admin::MAX_CONNECTIONS
                ),
            );
        }
        if !(1..=1_000).contains(&admin.max_streams) {
            self.section_problem(
                "admin",
                "max_streams",
                format!("must be from 1 to 1000, not {}", admin.max_streams),
            );
        }
        if !is_loopback(admin.listen.ip()) && admin_token(admin).is_none() {
            self.section_problem(
                "admin",
                "listen",
                format!(
                    "{} is not loopback: set `admin.token` (or SPILLWAY_ADMIN_TOKEN) so that \
                     the admin API needs a bearer token",
                    admin.listen
                ),
            );
        }
        if admin.listen == config.listener.listen && admin.listen.port() != 0 {
            self.section_problem(
                "admin",
                "listen",
                format!(
                    "{} is the proxy's address too (`listener.listen`): give each its own",
                    admin.listen
                ),
            );
        }
    }

    fn upstreams<'c>(&self, upstreams: &'c [Spanned<super::Upstream>]) -> HashSet<&'c str> {
        let mut names = HashSet::new();
        for (index, upstream) in upstreams.iter().enumerate() {
            let (span, item) = (upstream.span(), upstream.get_ref());
            let path = format!("upstream[{index}]");
            if item.name.is_empty() {
                self.problem(span.clone(), path.clone(), "name", "must not be empty");
            } else if !names.insert(item.name.as_str()) {
                self.problem(
                    span.clone(),
                    path.clone(),
                    "name",
                    format!("`{}` names another upstream too", item.name),
                );
            }
            match check_url(&item.url) {
                Err(problem) => self.problem(span, path, "url", problem),
                Ok(uri) if item.ca.is_some() && uri.scheme_str() != Some("https") => self.problem(
                    span,
                    path,
                    "ca",
                    format!("is for https:// upstreams, and `{}` is not one", item.url),
                ),
                Ok(_) => {}
            }
        }
        names
    }

    fn routes(&self, config: &Config, upstreams: &HashSet<&str>) {
        for (index, route) in config.routes.iter().enumerate() {
            let (span, item) = (route.span(), route.get_ref());
            let path = format!("route[{index}]");
            let problem = |key: &str, message: String| {
                self.problem(span.clone(), path.clone(), key, message);
            };
            if item.resource.is_empty() {
                problem("resource", "must not be empty".into());
            }
            if let Err(message) = crate::router::Pattern::parse(&item.path) {
                problem("path", message);
            }
            if let Some(why) = check_methods(&item.methods) {
                problem("methods", why);
            }
            if !upstreams.contains(item.upstream.as_str()) {
                problem(
                    "upstream",
                    format!("no upstream is named `{}`", item.upstream),
                );
            }
            if item.actives.is_some_and(|a| a.max == 0) {
                problem("actives.max", "must be at least 1".into());
            }
            if item.executes == Some(0) {
                problem("executes", "must be at least 1".into());
            }
            if let Some(tps) = item.tps {
                if tps.rate == 0 || tps.interval.is_zero() {
                    problem("tps", "needs a rate and an interval above 0".into());
                }
            }
        }
        if let Some(default) = &config.default {
            let (span, item) = (default.span(), default.get_ref());
            if let Some(upstream) = &item.upstream {
                if !upstreams.contains(upstream.as_str()) {
                    self.problem(
                        span,
                        "default".into(),
                        "upstream",
                        format!("no upstream is named `{upstream}`"),
                    );
                }
            }
        }
    }

    /// Notes every rule of `kind` at fault, each with its first problem: the set is checked,
    /// the rule at fault noted and set aside, and the rest checked again, until they pass.
    pub(crate) fn rules<T: Clone>(
        &self,
        rules: &[Spanned<T>],
        kind: &str,
        validate: impl Fn(&[T]) -> Result<(), (usize, &'static str, String)>,
    ) {
        let mut left: Vec<usize> = (0..rules.len()).collect();
        let mut plain: Vec<T> = rules.iter().map(|rule| rule.get_ref().clone()).collect();
        loop {
            let Err((at, field, problem)) = validate(&plain) else {
                return;
            };
            let Some(&index) = left.get(at) else {
                return;
            };
            if self.problems.borrow().len() > MAX_PROBLEMS {
                return;
            }
            self.problem(
                rules[index].span(),
                format!("{kind}[{index}]"),
                field,
                problem,
            );
            left.remove(at);
            plain.remove(at);
        }
    }
}

/// The admin token: the environment's `SPILLWAY_ADMIN_TOKEN`, else the file's.
pub fn admin_token(admin: &super::AdminConfig) -> Option<String> {
    std::env::var("SPILLWAY_ADMIN_TOKEN")
        .ok()
        .filter(|token| !token.is_empty())
        .or_else(|| admin.token.clone().filter(|token| !token.is_empty()))
}

fn is_loopback(ip: IpAddr) -> bool {
    ip.is_loopback()
}

/// The first problem with a list of methods: one that is no method, or in lower case.
fn check_methods(methods: &[String]) -> Option<String> {
    methods.iter().find_map(|method| {
        if http::Method::from_bytes(method.as_bytes()).is_err() {
            Some(format!("`{method}` is not an HTTP method"))
        } else if method.bytes().any(|byte| byte.is_ascii_lowercase()) {
            Some(format!(
                "`{method}` must be upper case: methods are case-sensitive, and clients send `{}`",
                method.to_ascii_uppercase()
            ))
        } else {
            None
        }
    })
}

/// Headers `[deadline] header` may not name: the proxy writes the milliseconds left into it.
const RESERVED: [&str; 10] = [
    "grpc-timeout",
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
    "te",
    "upgrade",
    "x-forwarded-for",
    "forwarded",
];

/// A header name the proxy can read.
impl Check<'_> {
    /// `[access_log]`: a file to write to, and headers by valid names.
    fn access_log(&self, config: &Config) {
        let Some(access_log) = &config.access_log else {
            return;
        };
        let (span, item) = (access_log.span(), access_log.get_ref());
        let problem = |key: &str, message: String| {
            self.problem(span.clone(), "access_log".into(), key, message);
        };
        if item.path.as_os_str().is_empty() {
            problem("path", "names no file".to_owned());
        }
        let max = super::MAX_LOGGED_HEADERS;
        if item.headers.len() > max {
            problem(
                "headers",
                format!(
                    "names {} headers; at most {max} are kept",
                    item.headers.len()
                ),
            );
        }
        for name in &item.headers {
            if let Err(why) = check_header(name) {
                problem("headers", why);
            }
        }
    }
}

fn check_header(name: &str) -> Result<(), String> {
    http::HeaderName::from_bytes(name.as_bytes())
        .map(drop)
        .map_err(|_| format!("`{name}` is not a valid header name"))
}

/// An upstream URL the proxy can use: `http://host:port[/prefix]` or `https://...`.
fn check_url(url: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|err| format!("`{url}` is not a URL: {err}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!("`{url}` must start with http:// or https://"));
    }
    if uri.authority().is_none() {
        return Err(format!("`{url}` has no host"));
    }
    if uri.query().is_some() {
        return Err(format!("`{url}` must not have a query"));
    }
    Ok(uri)
}
