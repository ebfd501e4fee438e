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
        .route("/api/rules", get(rules).put(put_rules))
        .route("/api/status", get(status))
        .route("/api/history", get(history))
        .route("/api/stream", get(stream))
        .route("/api/reload", post(reload))
        .route("/metrics", get(metrics))
        .fallback(|| async { body(error(StatusCode::NOT_FOUND, "no such endpoint")) })
        .layer(middleware::from_fn_with_state(admin.clone(), guard))
        .with_state(admin)
}

/// The one check before any endpoint: a `Host` this API answers to, then the token (but for
/// the dashboard's page and, if public, the metrics).
async fn guard(State(admin): State<Admin>, request: Request, next: Next) -> Response {
    if !admin.host_allowed(&request) {
        return body(error(
            StatusCode::FORBIDDEN,
            "this Host is not allowed: use a loopback name, or add it to admin.allowed_hosts",
        ));
    }
    let open = match request.uri().path() {
        // The dashboard's page holds no data; it asks for the token.
        "/" => true,
        "/metrics" => admin.metrics_public,
        _ => false,
    };
    if !open && !admin.authorized(&request) {
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

async fn resources(State(admin): State<Admin>) -> Response {
    body(json_response(StatusCode::OK, &admin.resources()))
}

async fn rules(State(admin): State<Admin>) -> Response {
    body(json_response(StatusCode::OK, &admin.rules()))
}

async fn put_rules(State(admin): State<Admin>, request: Request) -> Response {
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
async fn stream(State(admin): State<Admin>) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use axum::response::IntoResponse;
    let seconds = admin.feed().subscribe();
    let events = futures_util::stream::unfold(seconds, |mut seconds| async move {
        loop {
            match seconds.recv().await {
                Ok(second) => {
                    let event = Event::default().event("second").data(&*second);
                    return Some((Ok::<_, std::convert::Infallible>(event), seconds));
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
    body(admin.reload(&crate::audit::Who::of(&request)).await)
}

async fn metrics(State(admin): State<Admin>, request: Request) -> Response {
    body(admin.metrics(&request))
}
