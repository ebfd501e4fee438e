//! Cluster rules through the layer, on a real `redis-server`: two services, each with its own
//! `Spillway` (two processes, as far as Redis can tell), share a leased QPS limit and a leased
//! concurrency limit. Leases are refilled by the test when they ask, on a manual clock.
#![cfg(feature = "axum")]

#[path = "../../spillway-redis/tests/common/mod.rs"]
mod redis_server;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use redis_server::RedisServer;
use spillway::cluster::ClusterRule;
use spillway::ManualClock;
use spillway_redis::{
    LeaseSettings, LeasedConcurrency, LeasedWindow, SharedConcurrency, SharedWindow, Time,
};
use spillway_tower::SpillwayLayer;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tower::ServiceExt;

/// A guard against a hang if the code under test is broken; never reached when it works.
const HANG: Duration = Duration::from_secs(30);

/// A service whose `/hold` waits for the gate (announcing its arrival), behind the layer.
fn app(
    spillway: &spillway::Spillway,
    gate: Arc<Notify>,
    arrived: mpsc::UnboundedSender<()>,
) -> Router {
    Router::new()
        .route("/hello", get(|| async { "hi" }))
        .route(
            "/hold",
            get(move || {
                let (gate, arrived) = (gate.clone(), arrived.clone());
                async move {
                    let open = gate.notified();
                    let _ = arrived.send(());
                    open.await;
                    "done"
                }
            }),
        )
        .layer(SpillwayLayer::new(spillway.clone()).by_route())
}

async fn call(app: &Router, path: &str) -> (StatusCode, String) {
    let request = Request::get(path).body(Body::empty()).unwrap();
    let response = tokio::time::timeout(HANG, app.clone().oneshot(request))
        .await
        .expect("the service answers")
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

struct Process {
    app: Router,
    window: Arc<LeasedWindow>,
    places: Arc<LeasedConcurrency>,
    redis: redis::aio::ConnectionManager,
}

impl Process {
    async fn refill(&mut self) {
        if self.window.wants_refill() {
            self.window.refill(&mut self.redis).await.unwrap();
        }
        if self.places.wants_refill() {
            self.places.refill(&mut self.redis).await.unwrap();
        }
    }
}

async fn process(
    redis: &RedisServer,
    clock: &ManualClock,
    who: &str,
    gate: Arc<Notify>,
    arrived: mpsc::UnboundedSender<()>,
) -> Process {
    let time = Time::Clock(Arc::new(clock.clone()));
    let window = SharedWindow::new("hello", 10.0, Duration::from_secs(1), 2, time.clone()).unwrap();
    let window = Arc::new(LeasedWindow::new(window, Arc::new(clock.clone()), 4).unwrap());
    let shared = SharedConcurrency::new("hold", 1, who, Duration::from_secs(3), time).unwrap();
    let places = Arc::new(
        LeasedConcurrency::new(shared, Arc::new(clock.clone()), LeaseSettings::default()).unwrap(),
    );
    let spillway = spillway::Spillway::new_with_clock(clock.clone());
    spillway
        .load_cluster_rules(vec![
            ClusterRule::new("hello-fleet", "GET /hello", window.clone()),
            ClusterRule::new("hold-fleet", "GET /hold", places.clone()),
        ])
        .unwrap();
    Process {
        app: app(&spillway, gate, arrived),
        window,
        places,
        redis: redis.connect().await,
    }
}

#[tokio::test]
async fn two_services_share_cluster_rules_through_the_layer() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    let gate = Arc::new(Notify::new());
    let (arrived, mut arrivals) = mpsc::unbounded_channel();
    let mut a = process(&redis, &clock, "a", gate.clone(), arrived.clone()).await;
    let mut b = process(&redis, &clock, "b", gate.clone(), arrived).await;

    // Each holds its first lease before its first request (the test is each process's driver:
    // a request that found no lease would wait for one that never comes).
    a.refill().await;
    b.refill().await;
    // 10 a second for both: in one bucket of the window, the two admit 10 between them.
    let mut passed = 0;
    for _ in 0..20 {
        for process in [&mut a, &mut b] {
            match call(&process.app, "/hello").await {
                (StatusCode::OK, _) => passed += 1,
                (status, body) => {
                    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
                    assert!(body.contains("cluster rule hello-fleet"), "{body}");
                }
            }
            process.refill().await;
        }
    }
    assert_eq!(passed, 10);

    // One place for both: A's request holds it until it ends; B is refused meanwhile.
    assert_eq!(call(&a.app, "/hold").await.0, StatusCode::TOO_MANY_REQUESTS);
    a.refill().await;
    let held = {
        let app = a.app.clone();
        tokio::spawn(async move { call(&app, "/hold").await.0 })
    };
    tokio::time::timeout(HANG, arrivals.recv())
        .await
        .expect("the held request reaches the service");
    for _ in 0..5 {
        let (status, body) = call(&b.app, "/hold").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert!(body.contains("hold-fleet"), "{body}");
        clock.advance_millis(50);
        b.refill().await;
        a.refill().await;
    }
    gate.notify_one();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    assert_eq!(a.places.in_use(), 0);
    // A's spare place goes back within two 100 ms periods; then B gets it.
    for _ in 0..4 {
        clock.advance_millis(60);
        a.refill().await;
    }
    assert_eq!(a.places.held(), 0);
    assert_eq!(call(&b.app, "/hold").await.0, StatusCode::TOO_MANY_REQUESTS);
    b.refill().await;
    let held = {
        let app = b.app.clone();
        tokio::spawn(async move { call(&app, "/hold").await.0 })
    };
    tokio::time::timeout(HANG, arrivals.recv())
        .await
        .expect("B's request reaches the service");
    gate.notify_one();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
}

#[tokio::test]
async fn a_quiet_route_waits_for_its_lease_instead_of_being_refused() {
    let redis = RedisServer::start().await;
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    let time = Time::Clock(Arc::new(clock.clone()));
    let window = SharedWindow::new("quiet", 300.0, Duration::from_secs(1), 2, time).unwrap();
    let settings = LeaseSettings {
        call_timeout: Duration::from_secs(2),
        ..LeaseSettings::default()
    };
    let window =
        Arc::new(LeasedWindow::with_settings(window, Arc::new(clock.clone()), settings).unwrap());
    // Its driver, as in production.
    let (driven, conn) = (window.clone(), redis.connect().await);
    tokio::spawn(async move { driven.drive(conn, |_| {}).await });
    let spillway = spillway::Spillway::new_with_clock(clock.clone());
    spillway
        .load_cluster_rules(vec![ClusterRule::new(
            "quiet-fleet",
            "GET /hello",
            window.clone(),
        )])
        .unwrap();
    let (arrived, _arrivals) = mpsc::unbounded_channel();
    let app = app(&spillway, Arc::new(Notify::new()), arrived);
    // One request every 2 s: each finds the lease expired and empty, waits for a refill, and
    // is served (the first, before any lease, too).
    for n in 0..5 {
        assert!(!window.is_ready(1), "request {n} finds no pass");
        assert_eq!(
            call(&app, "/hello").await,
            (StatusCode::OK, "hi".into()),
            "request {n}"
        );
        clock.advance_millis(2_000);
    }
}
