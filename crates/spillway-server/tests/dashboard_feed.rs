//! The dashboard's feed through the admin API: one `second` event a second on the stream with
//! each resource's passes, blocks by rule and errors, the same seconds in the history, and
//! neither without the token. On tokio's paused clock: the feed's seconds pass when the test
//! waits.

mod support;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;
use support::server::{Harness, TOKEN};

/// Longest any one wait may take before the test fails (never reached when it passes).
const STEP: Duration = Duration::from_secs(30);

/// The proxy (a QPS limit of 1 on `/orders`) and its admin API with a minute of history.
async fn start() -> Harness {
    let text = "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:9\"\n\n[[route]]\nresource = \"orders\"\npath = \"/orders\"\nupstream = \"app\"\n\n[[flow]]\nid = \"orders-qps\"\nresource = \"orders\"\ncount = 1\n";
    Harness::start_with(text, |admin| {
        admin.with_history(Duration::from_secs(60), 10)
    })
    .await
}

fn request(addr: SocketAddr, path: &str, token: Option<&str>) -> Request<Empty<Bytes>> {
    let mut request = Request::get(format!("http://{addr}{path}"));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    request.body(Empty::new()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_stream_and_the_history_show_each_second() {
    let h = start().await;
    let (proxy, admin) = (h.proxy, h.admin);
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let stream = client
        .request(request(admin, "/api/stream", Some(TOKEN)))
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    // Three requests: the first passes (and fails: nothing listens upstream), the QPS rule of
    // 1 refuses the others.
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = client
            .request(request(proxy, "/orders", None))
            .await
            .unwrap();
        statuses.push(response.status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::BAD_GATEWAY,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // Events until they have shown all three (they may span two seconds).
    let mut body = stream.into_body();
    let mut text = String::new();
    let (mut pass, mut block, mut error, mut by_rule) = (0, 0, 0, 0);
    let seen = tokio::time::timeout(STEP, async {
        while pass + block < 3 {
            let frame = body.frame().await.unwrap().unwrap();
            let Ok(data) = frame.into_data() else {
                continue;
            };
            text.push_str(&String::from_utf8_lossy(&data));
            while let Some(end) = text.find("\n\n") {
                let event: String = text.drain(..end + 2).collect();
                let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) else {
                    continue;
                };
                assert!(event.starts_with("event: second\n"), "{event}");
                let second: Value = serde_json::from_str(data).unwrap();
                let orders = &second["resources"]["orders"];
                pass += orders["pass"].as_u64().unwrap();
                block += orders["block"].as_u64().unwrap();
                error += orders["error"].as_u64().unwrap();
                by_rule += orders["blocks"]["orders-qps"].as_u64().unwrap_or(0);
                assert!(second["second"].as_u64().unwrap() > 1_700_000_000);
            }
        }
    });
    seen.await.expect("the stream shows the requests");
    assert_eq!((pass, block, error, by_rule), (1, 2, 1, 2));

    // The history has the same seconds.
    let response = client
        .request(request(admin, "/api/history?resource=orders", Some(TOKEN)))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let history: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(
        (&history["window"], &history["cap"]),
        (&60.into(), &10.into())
    );
    assert_eq!(history["resources"][0]["resource"], "orders");
    let series = history["series"].as_array().unwrap();
    assert_eq!(series.len(), 60);
    let sum = |field: &str| {
        series
            .iter()
            .map(|s| s[field].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!((sum("pass"), sum("block"), sum("error")), (1, 2, 1));
    let totals = history["totals"].as_array().unwrap();
    let total_block: u64 = totals.iter().map(|s| s["block"].as_u64().unwrap()).sum();
    assert_eq!(total_block, 2);
    // A resource without a history.
    let response = client
        .request(request(admin, "/api/history?resource=nope", Some(TOKEN)))
        .await
        .unwrap();
    let nope: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert!(nope["series"].is_null());
}

#[tokio::test(start_paused = true)]
async fn neither_without_the_token() {
    let h = start().await;
    let admin = h.admin;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    for path in ["/api/stream", "/api/history"] {
        let response = client.request(request(admin, path, None)).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
}
