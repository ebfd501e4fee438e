//! A layer that names resources by route warns of rules that cannot apply: at its first
//! request, a rule on a `HEAD` route or a method not in capitals; at its first request a minute
//! or more later, a rule of the form `METHOD /path` no request has entered. Paused time: the
//! minute passes at once.

#![cfg(feature = "axum")]

use axum::{routing::get, Router};
use spillway::flow::FlowRule;
use spillway_tower::{SpillwayLayer, TokioClock};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::ServiceExt;

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .filter(|line| line.contains("WARN"))
            .map(str::to_owned)
            .collect()
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn rules_no_route_reaches_are_named() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_flow_rules(vec![
            FlowRule::per_second("GET /search", 10),
            FlowRule::per_second("GET /serch", 10).with_id("typo"),
            FlowRule::per_second("HEAD /search", 10).with_id("head"),
            FlowRule::per_second("post /login", 10).with_id("lower"),
            // Not a route: a resource the code enters itself, never warned of.
            FlowRule::per_second("db.query", 10),
        ])
        .unwrap();
    let app = Router::new()
        .route("/search", get(|| async { "results" }))
        .route("/login", axum::routing::post(|| async { "welcome" }))
        .layer(SpillwayLayer::new(spillway).by_route());
    let search = || {
        http::Request::get("/search")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    assert_eq!(app.clone().oneshot(search()).await.unwrap().status(), 200);

    // At once: the rules that can never apply.
    let lines = captured.lines();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].contains("id=head")
            && lines[0].contains("a HEAD request enters its route's GET resource")
            && lines[0].contains("`GET /search`"),
        "{lines:#?}"
    );
    assert!(
        lines[1].contains("id=lower") && lines[1].contains("`POST /login`"),
        "{lines:#?}"
    );

    // Requests within the first minute say nothing more; the first a minute after the first
    // request names the rule no request entered (and only it).
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(app.clone().oneshot(search()).await.unwrap().status(), 200);
    }
    tokio::time::sleep(Duration::from_secs(19)).await;
    assert_eq!(app.clone().oneshot(search()).await.unwrap().status(), 200);
    assert_eq!(captured.lines().len(), 2);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(app.clone().oneshot(search()).await.unwrap().status(), 200);
    let lines = captured.lines();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[2].contains("id=typo")
            && lines[2].contains("resource=GET /serch")
            && lines[2].contains("no request has entered"),
        "{lines:#?}"
    );
    // Once: nothing more later.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(app.oneshot(search()).await.unwrap().status(), 200);
    assert_eq!(captured.lines().len(), 3);
}
