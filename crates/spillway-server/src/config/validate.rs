//! Reading and checking a configuration: syntax, types, every rule, and the references between
//! routes and upstreams.

use super::{Config, ConfigError};
use std::collections::HashSet;
use std::net::IpAddr;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;

/// Reads and checks the file at `path`.
///
/// # Errors
///
/// A [`ConfigError`] naming the file, line and field of the first problem.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    use std::io::Read as _;
    let name = path.display().to_string();
    let cannot_read = |err: std::io::Error| ConfigError::file(&name, format!("cannot read: {err}"));
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    // Read at most one byte past the cap: a huge file (or `/dev/zero`) costs no more.
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot_read)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::file(
            &name,
            format!("is larger than {} MiB", MAX_FILE_BYTES >> 20),
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| ConfigError::file(&name, "is not UTF-8 text".to_owned()))?;
    parse(&text, &name)
}

/// The largest configuration file read: far above any real one (a file of 10,000 rules is
/// about 1 MiB), small enough that reading and parsing it stays quick.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// Checks a configuration's text; `file` names it in errors.
///
/// # Errors
///
/// A [`ConfigError`] naming the file, line and field of the first problem.
pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
    let config: Config = toml::from_str(text)
        .map_err(|err| ConfigError::at(file, text, err.span(), None, err.message().trim_end()))?;
    Check { text, file }.all(&config)?;
    Ok(config)
}

struct Check<'a> {
    text: &'a str,
    file: &'a str,
}

impl Check<'_> {
    /// An error in the item at `span`, pointing at `key` inside it when the key is written there.
    fn error(
        &self,
        span: Range<usize>,
        path: String,
        key: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        let at = self.key_offset(&span, key).unwrap_or(span.start);
        let field = if key.is_empty() {
            path
        } else {
            format!("{path}.{key}")
        };
        ConfigError::at(self.file, self.text, Some(at..at), Some(field), message)
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

    fn all(&self, config: &Config) -> Result<(), ConfigError> {
        let upstreams = self.upstreams(&config.upstreams)?;
        self.routes(config, &upstreams)?;
        self.rules(&config.flow, "flow", |rules| {
            spillway::flow::validate_flow_rules(rules)
                .map_err(|e| (e.index(), e.field(), e.problem().to_owned()))
        })?;
        self.rules(&config.system, "system", |rules| {
            spillway::system::validate_system_rules(rules)
                .map_err(|e| (e.index(), e.field(), e.problem().to_owned()))
        })?;
        self.rules(&config.breakers, "breaker", |rules| {
            spillway::breaker::validate_breaker_rules(rules)
                .map_err(|e| (e.index(), e.field(), e.problem().to_owned()))
        })?;
        self.rules(&config.adaptive, "adaptive", |rules| {
            spillway::adaptive::validate_adaptive_rules(rules)
                .map_err(|e| (e.index(), e.field(), e.problem().to_owned()))
        })?;
        if let Some(blocked) = &config.blocked {
            let (span, item) = (blocked.span(), blocked.get_ref());
            if !(400..=599).contains(&item.status) {
                return Err(self.error(
                    span,
                    "blocked".into(),
                    "status",
                    format!("must be an error status (400 to 599), got {}", item.status),
                ));
            }
            if let Some(content_type) = &item.content_type {
                if http::HeaderValue::from_str(content_type).is_err() {
                    return Err(self.error(
                        span,
                        "blocked".into(),
                        "content_type",
                        "is not a valid header value",
                    ));
                }
            }
        }
        let admin = &config.admin;
        if !is_loopback(admin.listen.ip()) && admin_token(admin).is_none() {
            return Err(ConfigError::at(
                self.file,
                self.text,
                self.key_offset(&(0..self.text.len()), "listen")
                    .map(|at| at..at),
                Some("admin.listen".into()),
                format!(
                    "{} is not loopback: set `admin.token` (or SPILLWAY_ADMIN_TOKEN) so that \
                     writes need a bearer token",
                    admin.listen
                ),
            ));
        }
        let listener = &config.listener;
        for (key, value) in [
            ("upstream_timeout", listener.upstream_timeout),
            ("header_timeout", listener.header_timeout),
            ("body_timeout", listener.body_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::at(
                    self.file,
                    self.text,
                    self.key_offset(&(0..self.text.len()), key).map(|at| at..at),
                    Some(format!("listener.{key}")),
                    "must be longer than 0",
                ));
            }
        }
        Ok(())
    }

    fn upstreams<'c>(
        &self,
        upstreams: &'c [Spanned<super::Upstream>],
    ) -> Result<HashSet<&'c str>, ConfigError> {
        let mut names = HashSet::new();
        for (index, upstream) in upstreams.iter().enumerate() {
            let (span, item) = (upstream.span(), upstream.get_ref());
            let path = format!("upstream[{index}]");
            if item.name.is_empty() {
                return Err(self.error(span, path, "name", "must not be empty"));
            }
            if !names.insert(item.name.as_str()) {
                return Err(self.error(
                    span,
                    path,
                    "name",
                    format!("`{}` names another upstream too", item.name),
                ));
            }
            if let Err(problem) = check_url(&item.url) {
                return Err(self.error(span, path, "url", problem));
            }
        }
        Ok(names)
    }

    fn routes(&self, config: &Config, upstreams: &HashSet<&str>) -> Result<(), ConfigError> {
        let mut resources = HashSet::new();
        for (index, route) in config.routes.iter().enumerate() {
            let (span, item) = (route.span(), route.get_ref());
            let path = format!("route[{index}]");
            if item.resource.is_empty() {
                return Err(self.error(span, path, "resource", "must not be empty"));
            }
            resources.insert(item.resource.as_str());
            if let Err(problem) = crate::router::Pattern::parse(&item.path) {
                return Err(self.error(span, path, "path", problem));
            }
            for method in &item.methods {
                if http::Method::from_bytes(method.as_bytes()).is_err() {
                    return Err(self.error(
                        span,
                        path,
                        "methods",
                        format!("`{method}` is not an HTTP method"),
                    ));
                }
            }
            if !upstreams.contains(item.upstream.as_str()) {
                return Err(self.error(
                    span,
                    path,
                    "upstream",
                    format!("no upstream is named `{}`", item.upstream),
                ));
            }
            if item.actives.is_some_and(|a| a.max == 0) {
                return Err(self.error(span, path, "actives.max", "must be at least 1"));
            }
            if item.executes == Some(0) {
                return Err(self.error(span, path, "executes", "must be at least 1"));
            }
            if let Some(tps) = item.tps {
                if tps.rate == 0 || tps.interval.is_zero() {
                    return Err(self.error(
                        span,
                        path,
                        "tps",
                        "needs a rate and an interval above 0",
                    ));
                }
            }
        }
        if let Some(default) = &config.default {
            let (span, item) = (default.span(), default.get_ref());
            if let Some(upstream) = &item.upstream {
                if !upstreams.contains(upstream.as_str()) {
                    return Err(self.error(
                        span,
                        "default".into(),
                        "upstream",
                        format!("no upstream is named `{upstream}`"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn rules<T: Clone>(
        &self,
        rules: &[Spanned<T>],
        kind: &str,
        validate: impl Fn(&[T]) -> Result<(), (usize, &'static str, String)>,
    ) -> Result<(), ConfigError> {
        let plain: Vec<T> = rules.iter().map(|rule| rule.get_ref().clone()).collect();
        validate(&plain).map_err(|(index, field, problem)| {
            let span = rules[index].span();
            self.error(span, format!("{kind}[{index}]"), field, problem)
        })
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

/// An upstream URL the proxy can use: `http://host:port[/prefix]`.
fn check_url(url: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|err| format!("`{url}` is not a URL: {err}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "`{url}` must start with http:// (TLS to upstreams is not supported yet)"
        ));
    }
    if uri.authority().is_none() {
        return Err(format!("`{url}` has no host"));
    }
    if uri.query().is_some() {
        return Err(format!("`{url}` must not have a query"));
    }
    Ok(uri)
}
