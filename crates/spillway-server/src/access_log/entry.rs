//! One access log line: what the request was as it arrived ([`Pending`]) and what the proxy
//! decided ([`Decision`]), written when its response is done with ([`Entry`], dropped), or
//! when its handling was dropped before an answer (the client went away).

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
    /// The headers the log keeps that it has, each value in order (a name repeated for each).
    headers: Vec<(HeaderName, String)>,
    /// The values of its route's per-key rules' keys (`Table::key_values`), when its route
    /// has any: a refusal by a per-key rule names its key.
    pub(crate) keys: Vec<Option<String>>,
    /// Its route's template and resource, once routed.
    routed: Option<(Option<String>, String)>,
    /// Its answer's status and what was decided, once answered.
    answer: Option<(StatusCode, Decision)>,
}

impl Pending {
    /// `request`, from `peer`, arrived at `arrived`, for `log`, which keeps `headers`.
    pub(crate) fn new<B>(
        log: &Arc<AccessLog>,
        request: &Request<B>,
        peer: IpAddr,
        arrived: Instant,
        headers: &[HeaderName],
    ) -> Box<Self> {
        let text = |value: &http::HeaderValue| String::from_utf8_lossy(value.as_bytes()).into();
        let host = (request.headers().get(http::header::HOST).map(text))
            .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
        let target = request.uri().path_and_query().map_or_else(
            || request.uri().path().to_owned(),
            |pq| pq.as_str().to_owned(),
        );
        let headers = (headers.iter())
            .flat_map(|name| {
                let values = request.headers().get_all(name).iter();
                values.map(|value| (name.clone(), text(value)))
            })
            .collect();
        Box::new(Self {
            log: Arc::clone(log),
            nanos: log.now_nanos(),
            arrived,
            method: request.method().clone(),
            host,
            target,
            ip: peer,
            headers,
            keys: Vec::new(),
            routed: None,
            answer: None,
        })
    }

    /// Routed to the route with `template`, on `resource`: what its line says if it is dropped
    /// unanswered.
    pub(crate) fn routed(&mut self, template: Option<&str>, resource: &str) {
        self.routed = Some((template.map(str::to_owned), resource.to_owned()));
    }

    /// Answered with `status`, as `decision` says: the line is written when the entry is
    /// dropped (with the response's body).
    pub(crate) fn answered(mut self: Box<Self>, status: StatusCode, decision: Decision) -> Entry {
        self.answer = Some((status, decision));
        Entry { _line: self }
    }
}

/// What the proxy decided for a request: `decision` is the metrics' outcome (`pass`, `block`,
/// `shadow_block`, `client_error`, `bad_host`, `bad_header`, `bad_path`, `repeated_key`, `no_route`), `reason` its reason
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
    _line: Box<Pending>,
}

/// The status a line gives a request whose client went away before its answer (nginx's).
const CLIENT_CLOSED: u16 = 499;

impl Pending {
    /// The line, its request having taken `took` from arrival to the end of its answer (or to
    /// when its handling was dropped, its client gone).
    fn line(&mut self, took: std::time::Duration) -> String {
        let gone = || {
            let (template, resource) = self.routed.clone().unwrap_or_default();
            let decision = Decision::new(template.as_deref(), &resource, "client_error");
            (CLIENT_CLOSED, decision.because("client_gone"))
        };
        let (status, decision) = match self.answer.take() {
            Some((status, decision)) => (status.as_u16(), decision),
            None => gone(),
        };
        let line = Line {
            time: crate::calendar::rfc3339_micros(self.nanos),
            method: self.method.as_str(),
            host: self.host.as_deref(),
            path: &self.target,
            ip: self.ip,
            headers: Headers(&self.headers),
            status,
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

impl Drop for Pending {
    fn drop(&mut self) {
        let line = self.line(self.arrived.elapsed());
        self.log.send(line);
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
    /// A header with one value as a string, one with several as an array of them.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let mut rest = self.0;
        while let Some((name, _)) = rest.first() {
            let count = rest.iter().take_while(|(other, _)| other == name).count();
            let (same, after) = rest.split_at(count);
            match same {
                [(_, value)] => map.serialize_entry(name.as_str(), value)?,
                _ => {
                    let values: Vec<&str> = same.iter().map(|(_, value)| value.as_str()).collect();
                    map.serialize_entry(name.as_str(), &values)?;
                }
            }
            rest = after;
        }
        map.end()
    }
}
