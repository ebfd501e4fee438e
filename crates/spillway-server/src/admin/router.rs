//! The admin API's routes, on axum's router, behind one guard: the `Host` check and the token.

use super::{error, json_response, unauthorized, Admin};
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use http_body_util::Full;

/// Every endpoint. axum answers a known path with a method it does not take with 405 and an
/// `Allow` header, and a `HEAD` as the `GET` without its body.
pub(super) fn router(admin: Admin) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/api/resources", get(resources))
        .route("/api/kinds", get(kinds))
        .route("/api/rules", get(rules).put(put_rules))
        .route("/api/status", get(status))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/history", get(history))
        .route("/api/stream", get(stream))
        .route("/api/reload", post(reload))
        .route("/metrics", get(metrics))
        .fallback(|| async { body(error(StatusCode::NOT_FOUND, "no such endpoint")) })
        .layer(middleware::from_fn_with_state(admin.clone(), guard))
        .with_state(admin)
}

/// The one check before any endpoint: a `Host` this API answers to, then the token (but for
/// the dashboard's page and, if public, the metrics). A connection whose request carries the
/// token (any request, with none set) is trusted from then on: never closed to make room for a
/// newcomer. Writes are checked once more by [`cross_site`].
async fn guard(State(admin): State<Admin>, request: Request, next: Next) -> Response {
    // The probes say nothing sensitive, and a prober (the kubelet, a load balancer) sends
    // neither the token nor a loopback `Host`.
    if matches!(request.uri().path(), "/healthz" | "/readyz") {
        return next.run(request).await;
    }
    if !admin.host_allowed(&request) {
        return body(error(
            StatusCode::FORBIDDEN,
            "this Host is not allowed: use a loopback name, or add it to admin.allowed_hosts",
        ));
    }
    let authorized = admin.authorized(&request);
    if authorized {
        if let Some(seat) = request.extensions().get::<super::ConnSeat>() {
            seat.0.trust();
        }
    }
    let open = match request.uri().path() {
        // The dashboard's page holds no data; it asks for the token.
        "/" => true,
        "/metrics" => admin.metrics_public,
        _ => false,
    };
    if !open && !authorized {
        let method = request.method();
        if method != http::Method::GET && method != http::Method::HEAD {
            let action = format!("{method} {}", request.uri().path());
            let who = crate::audit::Who::of(&request);
            admin
                .audit()
                .record(&who, &action, "refused", "no valid admin token");
        }
        return body(unauthorized());
    }
    next.run(request).await
}

/// A write that a web page elsewhere may have made a browser send, refused (403, or 415 for
/// the content type) and audited: it must come from the API's own pages or from a client that
/// sends no `Origin`, with a body declared JSON, which no page elsewhere can make a browser
/// send without a CORS preflight (which this API never allows). Without a token (the default
/// on loopback) this is what keeps a page the operator visits from reloading or rewriting the
/// rules.
fn refused_write(admin: &Admin, request: &Request) -> Option<Response> {
    let why = cross_site(request)?;
    let action = format!("{} {}", request.method(), request.uri().path());
    let who = crate::audit::Who::of(request);
    admin.audit().record(&who, &action, "refused", why);
    let status = if why.starts_with("Content-Type") {
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    } else {
        StatusCode::FORBIDDEN
    };
    Some(body(error(status, why)))
}

/// Why a write looks cross-site: an `Origin` that is not this API's own (`http://` or
/// `https://` and the request's `Host`), or a body that is not declared JSON.
fn cross_site(request: &Request) -> Option<&'static str> {
    let headers = request.headers();
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let own = match (origin.to_str().ok(), host) {
            (Some(origin), Some(host)) => {
                let origin = origin.to_ascii_lowercase();
                let host = host.to_ascii_lowercase();
                origin.strip_prefix("http://") == Some(host.as_str())
                    || origin.strip_prefix("https://") == Some(host.as_str())
            }
            _ => false,
        };
        if !own {
            return Some(
                "Origin is not this admin API's own: writes are taken only from its own pages \
                 or from clients that send no Origin",
            );
        }
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Some("Content-Type must be application/json for a write");
    }
    None
}

fn body(response: http::Response<Full<Bytes>>) -> Response {
    response.map(Body::new)
}

async fn dashboard() -> Response {
    let mut response =
        http::Response::new(Full::new(Bytes::from_static(super::DASHBOARD.as_bytes())));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    body(response)
}

/// `GET /healthz`: 200 while every loop turns (see [`crate::health`]), else 503 with the
/// stalled workers' numbers.
async fn healthz(State(admin): State<Admin>) -> Response {
    use crate::health::Liveness;
    let (status, value) = match admin.proxy.health().liveness() {
        Liveness::Live => (StatusCode::OK, serde_json::json!({ "live": true })),
        Liveness::Stalled(workers) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({ "live": false, "stalled_workers": workers }),
        ),
    };
    body(probe(status, &value))
}

/// `GET /readyz`: 200 when ready for traffic, else 503 with why (starting, waiting for Redis,
/// draining).
async fn readyz(State(admin): State<Admin>) -> Response {
    use crate::health::Readiness;
    let cluster = admin.proxy.cluster_limits().states();
    let waiting = cluster.iter().filter(|rule| rule.starting).count();
    let reason = match admin.proxy.health().readiness(waiting) {
        Readiness::Ready => {
            return body(probe(StatusCode::OK, &serde_json::json!({ "ready": true })))
        }
        Readiness::Starting { workers: 0, .. } => "starting: no worker serves yet".to_owned(),
        Readiness::Starting { serving, workers } => {
            format!("starting: {serving} of {workers} workers serve")
        }
        Readiness::WaitingForRedis { rules } => {
            format!("waiting for Redis: {rules} cluster rules have had no answer yet")
        }
        Readiness::Draining => "draining: stopping after a signal".to_owned(),
        Readiness::Stalled(workers) => format!("stalled: workers {workers:?} do not turn"),
    };
    body(probe(
        StatusCode::SERVICE_UNAVAILABLE,
        &serde_json::json!({ "ready": false, "reason": reason }),
    ))
}

/// A probe's answer, never cached.
fn probe(status: StatusCode, value: &serde_json::Value) -> http::Response<Full<Bytes>> {
    let mut response = json_response(status, value);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn resources(State(admin): State<Admin>) -> Response {
    body(json_response(StatusCode::OK, &admin.resources()))
}

async fn kinds(State(admin): State<Admin>) -> Response {
    body(json_response(StatusCode::OK, &admin.kinds()))
}

async fn rules(State(admin): State<Admin>) -> Response {
    body(json_response(StatusCode::OK, &admin.rules()))
}

async fn put_rules(State(admin): State<Admin>, request: Request) -> Response {
    if let Some(refused) = refused_write(&admin, &request) {
        return refused;
    }
    body(admin.put_rules(request).await)
}

/// The query of `GET /api/history`.
#[derive(Debug, serde::Deserialize)]
struct HistoryQuery {
    resource: Option<String>,
}

/// `GET /api/history[?resource=NAME]`: the totals and the resources with a history, over the
/// window up to the newest second the feed took; with `resource`, its samples too.
async fn history(State(admin): State<Admin>, Query(query): Query<HistoryQuery>) -> Response {
    body_json(admin.feed().history_json(query.resource.as_deref()))
}

/// `GET /api/stream`: Server-Sent Events, one `second` event a second with every resource's
/// sample of that second (and a comment every 15 s to keep proxies from closing it).
/// At most `admin.max_streams` at once: past it, 503.
async fn stream(State(admin): State<Admin>) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use axum::response::IntoResponse;
    let Some(place) = admin.gate().stream() else {
        let mut response = error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many live streams are open (admin.max_streams): close one, or retry",
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return body(response);
    };
    let seconds = admin.feed().subscribe();
    // The stream holds its place until it ends.
    let events =
        futures_util::stream::unfold((seconds, place), |(mut seconds, place)| async move {
            loop {
                match seconds.recv().await {
                    Ok(second) => {
                        let event = Event::default().event("second").data(&*second);
                        return Some((Ok::<_, std::convert::Infallible>(event), (seconds, place)));
                    }
                    // A slow reader skips the seconds it missed.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(15)))
        .into_response()
}

fn body_json(value: serde_json::Value) -> Response {
    body(json_response(StatusCode::OK, &value))
}

async fn status(State(admin): State<Admin>) -> Response {
    body(json_response(StatusCode::OK, &admin.status()))
}

async fn reload(State(admin): State<Admin>, request: Request) -> Response {
    if let Some(refused) = refused_write(&admin, &request) {
        return refused;
    }
    body(admin.reload(&crate::audit::Who::of(&request)).await)
}

async fn metrics(State(admin): State<Admin>, request: Request) -> Response {
    body(admin.metrics(&request))
}
