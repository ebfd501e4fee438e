//! Which request headers a configuration reads: its keys', claims' and origin's, and the
//! forwarding header its trusted proxies write. An access log line keeps them (and those
//! `[access_log] headers` adds), so that a replay of the log reads what `serve` read; a replay
//! keeps no other, so that its records hold nothing it will not read.

use crate::config::Config;
use crate::keyed::Source;
use http::HeaderName;

/// The headers `config` reads, each once, in the order first named; with `extra` (the access
/// log's `headers`) after them.
pub(crate) fn read_by(config: &Config, extra: &[String]) -> Vec<HeaderName> {
    let mut names: Vec<HeaderName> = Vec::new();
    let mut add = |name: HeaderName| {
        if !names.contains(&name) {
            names.push(name);
        }
    };
    let mut add_named = |text: &str| {
        if let Ok(name) = HeaderName::from_bytes(text.as_bytes()) {
            add(name);
        }
    };
    let mut keys: Vec<&str> = config
        .keyed
        .iter()
        .map(|rule| rule.get_ref().key.as_str())
        .collect();
    if let Some(criticality) = &config.criticality {
        let criticality = criticality.get_ref();
        if let Some(header) = &criticality.header {
            add_named(header);
        }
        keys.extend(
            criticality
                .rules
                .iter()
                .filter_map(|rule| rule.get_ref().key.as_deref()),
        );
    }
    if let Some(tenant) = &config.tenant {
        keys.push(&tenant.get_ref().key);
    }
    for key in keys {
        if let Ok(Source::Header(name)) = Source::parse(key) {
            add_named(name.as_str());
        }
    }
    // A deadline is read from gRPC's `grpc-timeout` (on a gRPC request, told by its
    // content type) where the section or a route sets one.
    let deadline = config.deadline.as_ref().map(|deadline| deadline.get_ref());
    if let Some(header) = deadline.and_then(|deadline| deadline.header.as_deref()) {
        add_named(header);
    }
    let grpc = deadline.is_some_and(|deadline| deadline.grpc)
        || config
            .routes
            .iter()
            .any(|route| route.get_ref().deadline.is_some());
    if grpc {
        add_named("grpc-timeout");
        add_named("content-type");
    }
    if let Some(origin) = &config.listener.origin_header {
        add_named(origin);
    }
    if !config.listener.trusted_proxies.is_empty() {
        add_named(config.listener.forwarded_header.as_str());
    }
    for name in extra {
        add_named(name);
    }
    names
}

/// `headers` ([`read_by`]), with those per-key rules `rules` read too (rules the admin API
/// gives).
pub(crate) fn with_keyed(
    mut headers: Vec<HeaderName>,
    rules: &[crate::config::KeyedConfig],
) -> Vec<HeaderName> {
    for rule in rules {
        if let Ok(Source::Header(name)) = Source::parse(&rule.key) {
            if !headers.contains(&name) {
                headers.push(name);
            }
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_keeps_the_headers_the_rules_read_and_those_named() {
        let text = r#"
            [listener]
            origin_header = "X-Caller"
            trusted_proxies = ["10.0.0.0/8"]

            [[upstream]]
            name = "app"
            url = "http://127.0.0.1:9"

            [[route]]
            path = "/api"
            resource = "api"
            upstream = "app"

            [[keyed]]
            id = "per-user"
            resource = "api"
            key = "header:X-User"
            count = 5

            [[keyed]]
            id = "per-ip"
            resource = "api"
            key = "peer_ip"
            count = 5

            [deadline]
            header = "x-deadline-ms"

            [access_log]
            path = "access.log"
            headers = ["user-agent", "x-user"]
        "#;
        let config = crate::checked::parse(text, "test.toml").expect("a good file");
        let extra = &config.access_log.as_ref().unwrap().get_ref().headers;
        let logged = read_by(&config, extra);
        let names: Vec<&str> = logged.iter().map(HeaderName::as_str).collect();
        assert_eq!(
            names,
            [
                "x-user",
                "x-deadline-ms",
                "grpc-timeout",
                "content-type",
                "x-caller",
                "x-forwarded-for",
                "user-agent"
            ]
        );
    }
}
