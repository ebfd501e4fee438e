//! One access log line: what the request was as it arrived ([`Pending`]), what the proxy
//! decided ([`Decision`]), written when its response is done with ([`Entry`], on drop).

use super::AccessLog;
use http::{HeaderName, Method, Request, StatusCode};
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::net::IpAddr;
use std::sync::Arc;
use tokio::time::Instant;

/// A request as it arrived, for its line.
#[derive(Debug)]
pub(crate) struct Pending {
    log: Arc<AccessLog>,
    /// When it arrived: in nanoseconds since the Unix epoch ([`AccessLog::wall_nanos`]), and
    /// on the monotonic clock its duration is measured on.
    nanos: u64,
    arrived: Instant,
    method: Method,
    host: Option<String>,
    /// Its target as the client sent it (path and query).
    target: String,
    /// The connection's peer.
    ip: IpAddr,
    /// The headers the log keeps that it has (the first value of each).
    headers: Vec<(HeaderName, String)>,
    /// The values of its route's per-key rules' keys (`Table::key_values`), when its route
    /// has any: a refusal by a per-key rule names its key.
    pub(crate) keys: Vec<Option<String>>,
}

impl Pending {
    /// `request`, from `peer`, arrived at `arrived`, for `log`.
    pub(crate) fn new<B>(
        log: &Arc<AccessLog>,
        request: &Request<B>,
        peer: IpAddr,
        arrived: Instant,
    ) -> Box<Self> {
        let text = |value: &http::HeaderValue| String::from_utf8_lossy(value.as_bytes()).into();
        let host = (request.headers().get(http::header::HOST).map(text))
            .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
        let target = request.uri().path_and_query().map_or_else(
            || request.uri().path().to_owned(),
            |pq| pq.as_str().to_owned(),
        );
        let headers = (log.headers().iter())
            .filter_map(|name| Some((name.clone(), text(request.headers().get(name)?))))
            .collect();
        Box::new(Self {
            log: Arc::clone(log),
            nanos: log.wall_nanos(arrived),
            arrived,
            method: request.method().clone(),
            host,
            target,
            ip: peer,
            headers,
            keys: Vec::new(),
        })
    }

    /// Answered with `status`, as `decision` says: the line is written when the entry is
    /// dropped (with the response's body).
    pub(crate) fn answered(self: Box<Self>, status: StatusCode, decision: Decision) -> Entry {
        Entry {
            pending: self,
            status,
            decision,
        }
    }
}

/// What the proxy decided for a request: `decision` is the metrics' outcome (`pass`, `block`,
/// `shadow_block`, `client_error`, `bad_host`, `bad_path`, `no_route`), `reason` its reason
/// (a refusal's kind, a client's fault, an upstream's failure).
#[derive(Debug, Default)]
pub(crate) struct Decision {
    /// Its route's path template (`None`: the default route's, or no route).
    pub(crate) route: Option<String>,
    pub(crate) resource: String,
    pub(crate) decision: &'static str,
    pub(crate) reason: Option<&'static str>,
    /// The rule that refused it (or would have, in shadow mode), where it has an id.
    pub(crate) rule: Option<String>,
    /// The key a per-key rule refused it for.
    pub(crate) key: Option<String>,
}

impl Decision {
    /// `decision` on `resource` by the route with `template`.
    pub(crate) fn new(template: Option<&str>, resource: &str, decision: &'static str) -> Self {
        Self {
            route: template.map(str::to_owned),
            resource: resource.to_owned(),
            decision,
            ..Self::default()
        }
    }

    /// With `reason`.
    pub(crate) fn because(self, reason: &'static str) -> Self {
        Self {
            reason: Some(reason),
            ..self
        }
    }

    /// By the rule `rule`, if it has an id, for `key`, if a per-key rule.
    pub(crate) fn by(self, rule: Option<&str>, key: Option<String>) -> Self {
        Self {
            rule: rule.map(str::to_owned),
            key,
            ..self
        }
    }
}

/// A request's line, written when this is dropped: after its response was sent or abandoned,
/// so that its duration covers the whole answer (as nginx's `$request_time` does).
#[derive(Debug)]
pub(crate) struct Entry {
    pending: Box<Pending>,
    status: StatusCode,
    decision: Decision,
}

impl Entry {
    /// The line, its request having taken `took` from arrival to the end of its answer.
    fn line(&self, took: std::time::Duration) -> String {
        let pending = &self.pending;
        let decision = &self.decision;
        let line = Line {
            time: crate::calendar::rfc3339_micros(pending.nanos),
            method: pending.method.as_str(),
            host: pending.host.as_deref(),
            path: &pending.target,
            ip: pending.ip,
            headers: Headers(&pending.headers),
            status: self.status.as_u16(),
            // To the microsecond.
            duration_ms: (took.as_micros() as f64) / 1_000.0,
            route: decision.route.as_deref(),
            resource: &decision.resource,
            decision: decision.decision,
            reason: decision.reason,
            rule: decision.rule.as_deref(),
            key: decision.key.as_deref(),
        };
        let mut text = serde_json::to_string(&line).unwrap_or_default();
        text.push('\n');
        text
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let line = self.line(self.pending.arrived.elapsed());
        self.pending.log.send(line);
    }
}

/// A line's fields, in the order written.
#[derive(serde::Serialize)]
struct Line<'a> {
    time: String,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<&'a str>,
    path: &'a str,
    ip: IpAddr,
    #[serde(skip_serializing_if = "Headers::is_empty")]
    headers: Headers<'a>,
    status: u16,
    duration_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<&'a str>,
    resource: &'a str,
    decision: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
}

/// Headers as a JSON object of names and values.
struct Headers<'a>(&'a [(HeaderName, String)]);

impl Headers<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Headers<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            map.serialize_entry(name.as_str(), value)?;
        }
        map.end()
    }
}
