//! The library's first hour: the four tasks a newcomer starts with, each written as the README
//! and the crate docs show, in at most 10 lines of library code (the lines between a task's
//! `begin` and `end` markers, which a test counts), and each checked to do what it says.
//!
//! 1. A QPS limit on a function.
//! 2. An axum service with a warming-up route, a route limited in concurrency and a per-IP
//!    limit on `/login`.
//! 3. The recommended adaptive limit on a whole service.
//! 4. A Guava-style rate limiter used directly, blocking and async.
#![cfg(feature = "axum")]

use axum::body::Body;
use axum::routing::{get, post};
use axum::Router;
use http::{Request, StatusCode};
use spillway::adaptive::AdaptiveRule;
use spillway::flow::{Behavior, FlowRule};
use spillway::keyed::KeyedRule;
use spillway::{BlockError, Clock, ManualClock, RateLimiter, Spillway};
use spillway_tower::keys::PeerAddr;
use spillway_tower::{SpillwayLayer, TokioClock};
use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tower::ServiceExt;

// task 1 begin
fn limit_reports(spillway: &Spillway) -> Result<(), Box<dyn Error>> {
    spillway.load_flow_rules(vec![FlowRule::per_second("report", 2)])?;
    Ok(())
}

fn report(spillway: &Spillway) -> Result<&'static str, BlockError> {
    let _entry = spillway.entry("report").enter()?;
    Ok("the report")
}
// task 1 end

#[test]
fn task_1_a_qps_limit_on_a_function() {
    let clock = ManualClock::new();
    let spillway = Spillway::new_with_clock(clock.clone());
    limit_reports(&spillway).unwrap();
    assert_eq!(report(&spillway).ok(), Some("the report"));
    assert_eq!(report(&spillway).ok(), Some("the report"));
    let refused = report(&spillway).unwrap_err();
    assert_eq!(refused.rule_id(), Some("report"));
    clock.advance(Duration::from_secs(1));
    assert_eq!(report(&spillway).ok(), Some("the report"));
}

// task 2 begin
fn service(spillway: Spillway, routes: Router) -> Result<Router, Box<dyn Error>> {
    let warm_up = Behavior::warm_up(Duration::from_secs(10));
    let search = FlowRule::per_second("GET /search", 30).with_behavior(warm_up);
    let upload = FlowRule::in_flight("POST /upload", 1);
    spillway.load_flow_rules(vec![search, upload])?;
    spillway.load_keyed_rules(vec![KeyedRule::per_second("POST /login", 2)])?;
    let layer = SpillwayLayer::new(spillway).by_route();
    Ok(routes.layer(layer.key_peer_ip(0, Vec::new())))
}
// task 2 end

/// The routes of task 2: an upload holds its place until `release` is notified.
fn routes(release: Arc<Notify>) -> Router {
    Router::new()
        .route("/search", get(|| async { "results" }))
        .route(
            "/upload",
            post(move || {
                let release = release.clone();
                async move {
                    release.notified().await;
                    "stored"
                }
            }),
        )
        .route("/login", post(|| async { "welcome" }))
}

fn request(method: &str, uri: &str, peer: &str) -> Request<Body> {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    let peer: SocketAddr = format!("{peer}:5000").parse().unwrap();
    request.extensions_mut().insert(PeerAddr(peer));
    request
}

async fn status(app: &Router, method: &str, uri: &str, peer: &str) -> StatusCode {
    let response = app.clone().oneshot(request(method, uri, peer)).await;
    response.unwrap().status()
}

#[tokio::test(start_paused = true)]
async fn task_2_an_axum_service_with_three_limits() {
    let spillway = Spillway::new_with_clock(TokioClock::new());
    let release = Arc::new(Notify::new());
    let app = service(spillway, routes(release.clone())).unwrap();

    // Warming up: cold, /search takes a third of its 30 a second (Sentinel's cold factor 3).
    let mut passed = 0;
    for _ in 0..30 {
        if status(&app, "GET", "/search", "1.1.1.1").await == StatusCode::OK {
            passed += 1;
        }
    }
    assert_eq!(
        passed, 10,
        "a cold warm-up route admits count / cold factor"
    );

    // One upload at a time: a second one, while the first holds its place, is refused.
    let first = tokio::spawn({
        let app = app.clone();
        async move { status(&app, "POST", "/upload", "1.1.1.1").await }
    });
    tokio::task::yield_now().await;
    assert_eq!(
        status(&app, "POST", "/upload", "2.2.2.2").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    release.notify_one();
    assert_eq!(first.await.unwrap(), StatusCode::OK);

    // Two logins a second per client address, each address its own.
    for peer in ["3.3.3.3", "4.4.4.4"] {
        assert_eq!(status(&app, "POST", "/login", peer).await, StatusCode::OK);
        assert_eq!(status(&app, "POST", "/login", peer).await, StatusCode::OK);
        assert_eq!(
            status(&app, "POST", "/login", peer).await,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
}

// task 3 begin
fn adaptive(spillway: Spillway, routes: Router) -> Result<Router, Box<dyn Error>> {
    spillway.load_adaptive_rules(vec![AdaptiveRule::recommended()])?;
    Ok(routes.layer(SpillwayLayer::new(spillway)))
}
// task 3 end

#[tokio::test(start_paused = true)]
async fn task_3_the_recommended_adaptive_limit() {
    let spillway = Spillway::new_with_clock(TokioClock::new());
    let release = Arc::new(Notify::new());
    let app = adaptive(spillway.clone(), routes(release.clone())).unwrap();
    // It starts by measuring the no-load latency with 3 calls in flight: a fourth is refused.
    let held: Vec<_> = (0..3)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { status(&app, "POST", "/upload", "1.1.1.1").await })
        })
        .collect();
    let in_flight = || spillway.adaptive_state("adaptive").unwrap().in_flight;
    for _ in 0..10_000 {
        if in_flight() == 3 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(in_flight(), 3, "three calls hold their places");
    assert_eq!(
        status(&app, "GET", "/search", "1.1.1.1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    for _ in 0..3 {
        release.notify_one();
    }
    for call in held {
        assert_eq!(call.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(
        status(&app, "GET", "/search", "1.1.1.1").await,
        StatusCode::OK
    );
}

// task 4 begin
fn pace(limiter: &RateLimiter) -> Duration {
    limiter.acquire(1) // blocks the thread until the permit is due
}

async fn pace_async(limiter: &RateLimiter) -> Option<Duration> {
    spillway_tower::try_acquire_within(limiter, 1, Duration::from_millis(300)).await
}
// task 4 end

#[test]
fn task_4a_a_rate_limiter_blocking() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::bursty_with_clock(5.0, clock.clone()).unwrap();
    assert_eq!(pace(&limiter), Duration::ZERO);
    assert_eq!(pace(&limiter), Duration::from_millis(200));
    assert_eq!(
        clock.now_nanos(),
        200_000_000,
        "the wait passed on the clock"
    );
}

#[tokio::test(start_paused = true)]
async fn task_4b_a_rate_limiter_async() {
    let limiter = RateLimiter::bursty_with_clock(5.0, TokioClock::new()).unwrap();
    assert_eq!(pace_async(&limiter).await, Some(Duration::ZERO));
    assert_eq!(pace_async(&limiter).await, Some(Duration::from_millis(200)));
    // The next is due 200 ms after that one: within 300 ms, it waits.
    assert_eq!(pace_async(&limiter).await, Some(Duration::from_millis(200)));
    // Reserve ahead so that the next would wait 400 ms: refused at once.
    limiter.reserve(1);
    assert_eq!(pace_async(&limiter).await, None);
}

/// Each task's library code, between its markers, is at most 10 lines (blank lines and
/// comment-only lines aside).
#[test]
fn each_task_takes_at_most_10_lines() {
    let source = include_str!("first_hour.rs");
    for task in 1..=4 {
        let begin = format!("// task {task} begin\n");
        let end = format!("// task {task} end\n");
        let from = source.find(&begin).expect("a begin marker") + begin.len();
        let to = source[from..].find(&end).expect("an end marker") + from;
        let lines = source[from..to]
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with("//"))
            .count();
        assert!(lines <= 10, "task {task} takes {lines} lines");
    }
}
