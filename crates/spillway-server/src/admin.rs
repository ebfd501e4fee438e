//! The admin API, on its own listener (loopback by default): a live dashboard, statistics,
//! rules (read and replace), status, and Prometheus metrics.

use crate::proxy::Proxy;
use crate::reload::Reloader;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{json, Value};
use spillway::breaker::BreakerRule;
use spillway::flow::FlowRule;
use spillway::system::{SystemProbe, SystemRule};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

/// The dashboard: one page that polls `/api/resources` and `/api/status` every second.
const DASHBOARD: &str = include_str!("dashboard.html");

/// Largest request body the admin API reads.
pub const MAX_BODY: usize = 1 << 20;

/// The admin API's state.
#[derive(Debug, Clone)]
pub struct Admin {
    proxy: Proxy,
    reloader: Option<Arc<Reloader>>,
    token: Option<String>,
}

/// A `PUT /api/rules` body: the rule kinds to replace (a kind left out stays as it is).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesBody {
    flow: Option<Vec<FlowRule>>,
    system: Option<Vec<SystemRule>>,
    breaker: Option<Vec<BreakerRule>>,
    adaptive: Option<Vec<spillway::adaptive::AdaptiveRule>>,
}

impl Admin {
    /// The admin API of `proxy`; `token`, if set, is required for writes.
    pub fn new(proxy: Proxy, reloader: Option<Arc<Reloader>>, token: Option<String>) -> Self {
        Self {
            proxy,
            reloader,
            token,
        }
    }

    /// Serves on `listener` until `shutdown` completes.
    ///
    /// # Errors
    ///
    /// An accept error that is not transient.
    pub async fn run(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(_) => continue,
                },
                () = &mut shutdown => return Ok(()),
            };
            let admin = self.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let admin = admin.clone();
                    async move { Ok::<_, Infallible>(admin.handle(request).await) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    /// Answers one admin request.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = request.uri().path().to_owned();
        match (request.method().clone(), path.as_str()) {
            (Method::GET, "/") => {
                let mut response =
                    Response::new(Full::new(Bytes::from_static(DASHBOARD.as_bytes())));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                response
            }
            (Method::GET, "/api/resources") => json_response(StatusCode::OK, &self.resources()),
            (Method::GET, "/api/rules") => json_response(StatusCode::OK, &self.rules()),
            (Method::PUT, "/api/rules") => self.put_rules(request).await,
            (Method::GET, "/api/status") => json_response(StatusCode::OK, &self.status()),
            (Method::POST, "/api/reload") => self.reload(&request),
            (Method::GET, "/metrics") => match self.proxy.render_metrics() {
                Ok(text) => {
                    let mut response = Response::new(Full::new(Bytes::from(text)));
                    response.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                    );
                    response
                }
                Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "cannot render metrics"),
            },
            (_, "/api/resources" | "/api/rules" | "/api/status" | "/api/reload" | "/metrics") => {
                error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
            }
            _ => error(StatusCode::NOT_FOUND, "no such endpoint"),
        }
    }

    fn resources(&self) -> Value {
        let snapshot = self.proxy.spillway().snapshot();
        let stats = |s: &spillway::stats::NodeStats| {
            json!({
                "pass_qps": s.pass_qps,
                "block_qps": s.block_qps,
                "success_qps": s.success_qps,
                "error_qps": s.error_qps,
                "avg_rt_micros": s.avg_rt_micros,
                "concurrency": s.concurrency,
                "total_pass": s.total_pass,
                "total_block": s.total_block,
                "total_success": s.total_success,
                "total_error": s.total_error,
            })
        };
        let resources: Vec<Value> = snapshot
            .resources
            .iter()
            .map(|r| {
                let origins: serde_json::Map<String, Value> = r
                    .origins
                    .iter()
                    .map(|(origin, s)| (origin.to_string(), stats(s)))
                    .collect();
                json!({ "name": &*r.name, "stats": stats(&r.stats), "origins": origins })
            })
            .collect();
        json!({ "inbound": stats(&snapshot.inbound), "resources": resources })
    }

    fn rules(&self) -> Value {
        let spillway = self.proxy.spillway();
        json!({
            "flow": spillway.flow_rules(),
            "system": spillway.system_rules(),
            "breaker": spillway.breaker_rules(),
            "adaptive": spillway.adaptive_rules(),
        })
    }

    fn status(&self) -> Value {
        let spillway = self.proxy.spillway();
        let probe = spillway::system::LinuxProbe::global();
        let breakers: Vec<Value> = spillway
            .breaker_rules()
            .iter()
            .map(|rule| {
                let state = spillway.breaker_state(&rule.id).map(|s| s.as_str());
                json!({ "rule": rule.id, "resource": rule.resource, "state": state })
            })
            .collect();
        let config = match &self.reloader {
            Some(reloader) => {
                let state = reloader.state();
                json!({
                    "file": reloader.path().display().to_string(),
                    "reloads": state.reloads,
                    "last_error": state.last_error,
                    "restart_needed": state.restart_needed,
                })
            }
            None => Value::Null,
        };
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "config": config,
            "probe": { "load": probe.load(), "cpu_usage": probe.cpu_usage() },
            "breakers": breakers,
            "adaptive": adaptive_states(spillway),
        })
    }

    /// Whether `request` carries the bearer token (always, when none is configured).
    fn authorized<B>(&self, request: &Request<B>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes()))
    }

    fn reload<B>(&self, request: &Request<B>) -> Response<Full<Bytes>> {
        if !self.authorized(request) {
            return unauthorized();
        }
        match &self.reloader {
            Some(reloader) => match reloader.reload() {
                Ok(()) => json_response(StatusCode::OK, &json!({ "reloaded": true })),
                Err(err) => error(StatusCode::UNPROCESSABLE_ENTITY, &err.to_string()),
            },
            None => error(
                StatusCode::NOT_FOUND,
                "this server has no configuration file",
            ),
        }
    }

    async fn put_rules(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        if !self.authorized(&request) {
            return unauthorized();
        }
        let persist = request
            .uri()
            .query()
            .is_some_and(|query| query.split('&').any(|pair| pair == "persist=true"));
        let file = match (&self.reloader, persist) {
            (Some(reloader), true) => Some(reloader.path().to_path_buf()),
            (None, true) => {
                return error(
                    StatusCode::CONFLICT,
                    "persist=true needs a configuration file, and this server has none",
                )
            }
            (_, false) => None,
        };
        let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => {
                return error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("the body is larger than {MAX_BODY} bytes, or was cut short"),
                )
            }
        };
        let rules: RulesBody = match serde_json::from_slice(&body) {
            Ok(rules) => rules,
            Err(err) => return error(StatusCode::BAD_REQUEST, &format!("bad JSON: {err}")),
        };
        // Validate every kind before applying any, so a bad body changes nothing.
        let invalid = |err: String| error(StatusCode::UNPROCESSABLE_ENTITY, &err);
        if let Some(flow) = &rules.flow {
            if let Err(err) = spillway::flow::validate_flow_rules(flow) {
                return invalid(err.to_string());
            }
        }
        if let Some(system) = &rules.system {
            if let Err(err) = spillway::system::validate_system_rules(system) {
                return invalid(err.to_string());
            }
        }
        if let Some(breaker) = &rules.breaker {
            if let Err(err) = spillway::breaker::validate_breaker_rules(breaker) {
                return invalid(err.to_string());
            }
        }
        if let Some(adaptive) = &rules.adaptive {
            if let Err(err) = spillway::adaptive::validate_adaptive_rules(adaptive) {
                return invalid(err.to_string());
            }
        }
        if let Some(file) = &file {
            // Written first: if the file cannot take the rules, nothing changes.
            let written = crate::persist::write_rules(
                file,
                &crate::persist::Rules {
                    flow: rules.flow.as_deref(),
                    system: rules.system.as_deref(),
                    breakers: rules.breaker.as_deref(),
                    adaptive: rules.adaptive.as_deref(),
                },
            );
            if let Err(err) = written {
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("not persisted: {err}"),
                );
            }
        }
        let spillway = self.proxy.spillway();
        let applied = (|| -> Result<(), String> {
            if let Some(flow) = rules.flow {
                spillway.load_flow_rules(flow).map_err(|e| e.to_string())?;
            }
            if let Some(system) = rules.system {
                spillway
                    .load_system_rules(system)
                    .map_err(|e| e.to_string())?;
            }
            if let Some(breaker) = rules.breaker {
                spillway
                    .load_breaker_rules(breaker)
                    .map_err(|e| e.to_string())?;
            }
            if let Some(adaptive) = rules.adaptive {
                // Rules that stay the same keep their limiters (limit, RT estimates, queue).
                spillway
                    .load_adaptive_rules(adaptive)
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        })();
        match applied {
            Ok(()) => json_response(StatusCode::OK, &self.rules()),
            Err(err) => invalid(err),
        }
    }
}

/// Each adaptive rule's limiter now: limit, calls in flight, RT estimates (milliseconds), the
/// reason of the last change, samples, updates, refusals, and its queue (waiting, timeouts).
fn adaptive_states(spillway: &spillway::Spillway) -> Vec<Value> {
    let millis = |rtt: Option<std::time::Duration>| rtt.map(|rtt| rtt.as_secs_f64() * 1e3);
    spillway
        .adaptive_rules()
        .iter()
        .filter_map(|rule| {
            let state = spillway.adaptive_state(&rule.id)?;
            Some(json!({
                "rule": rule.id,
                "resource": rule.resource,
                "limit": state.limit,
                "in_flight": state.in_flight,
                "baseline_rtt_ms": millis(state.estimates.baseline),
                "latest_rtt_ms": millis(state.estimates.latest),
                "last_change": state.last_change.as_str(),
                "samples": state.samples,
                "updates": state.updates,
                "refusals": state.refusals,
                "waiting": state.waiting,
                "queue_timeouts": state.queue_timeouts,
            }))
        })
        .collect()
}

/// Compares without stopping at the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn json_response(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json_response(status, &json!({ "error": message }))
}

fn unauthorized() -> Response<Full<Bytes>> {
    let mut response = error(
        StatusCode::UNAUTHORIZED,
        "writes need `Authorization: Bearer <token>` with the admin token",
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Binds the admin listener.
///
/// # Errors
///
/// If the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
