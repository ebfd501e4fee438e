//! Per-key rules through the layer on a real axum router, on tokio's paused clock: keys from a
//! header, a query parameter, a path segment of the matched route, and the client's address
//! (the peer's, or through a trusted proxy the one it names).
#![cfg(feature = "axum")]

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use spillway::keyed::KeyedRule;
use spillway_tower::keys::{trusted_proxies, PeerAddr};
use spillway_tower::{SpillwayLayer, TokioClock};
use std::net::SocketAddr;
use tower::ServiceExt;

fn app(spillway: &spillway::Spillway) -> Router {
    let trusted = trusted_proxies(&["10.0.0.0/8".into()]).unwrap();
    Router::new()
        .route("/users/{id}", get(|| async { "user" }))
        .route("/search", get(|| async { "results" }))
        .layer(
            SpillwayLayer::new(spillway.clone())
                .by_route()
                .key_peer_ip(0, trusted)
                .key_header(1, "x-user")
                .key_query(2, "tenant")
                .key_path(3, "id"),
        )
}

/// Of `n` requests to `uri` from `peer` with `headers`, how many passed.
async fn passed(app: &Router, uri: &str, peer: &str, headers: &[(&str, &str)], n: usize) -> usize {
    let mut passed = 0;
    for _ in 0..n {
        let mut request = Request::get(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut request = request.body(Body::empty()).unwrap();
        let peer: SocketAddr = format!("{peer}:4000").parse().unwrap();
        request.extensions_mut().insert(PeerAddr(peer));
        let status = app.clone().oneshot(request).await.unwrap().status();
        match status {
            StatusCode::OK => passed += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("{other}"),
        }
    }
    passed
}

#[tokio::test(start_paused = true)]
async fn each_key_source_limits_its_own_keys() {
    let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_keyed_rules(vec![
            KeyedRule::qps("per-client", "GET /search", 4.0),
            KeyedRule::qps("per-user", "GET /search", 2.0).with_param(1),
            KeyedRule::qps("per-tenant", "GET /search", 3.0).with_param(2),
            KeyedRule::qps("per-id", "GET /users/{id}", 1.0).with_param(3),
        ])
        .unwrap();
    let app = app(&spillway);
    // Each client its own 4; a trusted proxy's clients each theirs, spoofed hops ignored.
    assert_eq!(passed(&app, "/search", "1.1.1.1", &[], 6).await, 4);
    assert_eq!(passed(&app, "/search", "2.2.2.2", &[], 6).await, 4);
    let via = |client: &'static str| [("x-forwarded-for", client)];
    assert_eq!(
        passed(&app, "/search", "10.0.0.1", &via("3.3.3.3"), 6).await,
        4
    );
    assert_eq!(
        passed(&app, "/search", "10.0.0.1", &via("6.6.6.6, 4.4.4.4"), 6).await,
        4
    );
    // An untrusted peer's claims change nothing: it is 1.1.1.1, already at its limit.
    assert_eq!(
        passed(&app, "/search", "1.1.1.1", &via("5.5.5.5"), 2).await,
        0
    );
    // Per user and per tenant, on fresh clients.
    assert_eq!(
        passed(&app, "/search", "7.0.0.1", &[("x-user", "alice")], 3).await,
        2
    );
    assert_eq!(
        passed(&app, "/search?tenant=t1", "7.0.0.2", &[], 4).await,
        3
    );
    assert_eq!(
        passed(&app, "/search?tenant=t1", "7.0.0.3", &[], 1).await,
        0
    );
    // A header or a parameter given twice: every such request shares one key, whichever line
    // comes first (the upstream may read another one than the limit would).
    let twice = [("x-user", "fresh-1"), ("x-user", "victim")];
    assert_eq!(passed(&app, "/search", "7.0.0.4", &twice, 1).await, 1);
    let twice = [("x-user", "fresh-2"), ("x-user", "victim")];
    assert_eq!(passed(&app, "/search", "7.0.0.5", &twice, 2).await, 1);
    assert_eq!(
        passed(&app, "/search?tenant=a&tenant=t2", "7.0.0.6", &[], 2).await,
        2
    );
    assert_eq!(
        passed(&app, "/search?tenant=b&tenant=t2", "7.0.0.7", &[], 2).await,
        1
    );
    // Per path segment of the matched route.
    assert_eq!(passed(&app, "/users/1", "8.0.0.1", &[], 2).await, 1);
    assert_eq!(passed(&app, "/users/2", "8.0.0.2", &[], 2).await, 1);
    // A second later, every key has its limit again.
    tokio::time::advance(std::time::Duration::from_millis(1_001)).await;
    assert_eq!(passed(&app, "/search", "1.1.1.1", &[], 6).await, 4);
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A per-IP limit behind a server that hands the layer no address limits nothing, as
/// `on_missing_key` says by default, but not silently: the first such request logs a warning,
/// once.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_per_ip_key_with_no_peer_address_warns_once() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_keyed_rules(vec![KeyedRule::qps("per-client", "GET /search", 2.0)])
        .unwrap();
    let app = app(&spillway);
    let mut passed = 0;
    for _ in 0..5 {
        let request = Request::get("/search").body(Body::empty()).unwrap();
        if app.clone().oneshot(request).await.unwrap().status() == StatusCode::OK {
            passed += 1;
        }
    }
    assert_eq!(passed, 5, "no address, no key: the default lets them pass");
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert_eq!(log.matches("WARN").count(), 1, "{log}");
    assert!(log.contains("no peer address"), "{log}");
    assert!(log.contains("into_make_service_with_connect_info"), "{log}");
}

/// Of `n` requests from the IPv6 peer `peer` to `app`, how many passed.
async fn passed_v6(app: &Router, peer: &str, n: usize) -> usize {
    let peer = SocketAddr::new(peer.parse().unwrap(), 4000);
    let mut passed = 0;
    for _ in 0..n {
        let mut request = Request::get("/search").body(Body::empty()).unwrap();
        request.extensions_mut().insert(PeerAddr(peer));
        if app.clone().oneshot(request).await.unwrap().status() == StatusCode::OK {
            passed += 1;
        }
    }
    passed
}

#[tokio::test(start_paused = true)]
async fn an_ipv6_client_is_keyed_by_its_64_unless_told_otherwise() {
    let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_keyed_rules(vec![KeyedRule::qps("per-client", "GET /search", 2.0)])
        .unwrap();
    let router = |trusted: spillway_tower::keys::TrustedProxies| {
        Router::new()
            .route("/search", get(|| async { "results" }))
            .layer(
                SpillwayLayer::new(spillway.clone())
                    .by_route()
                    .key_peer_ip(0, trusted),
            )
    };
    // By default: every address of a /64 is one client.
    let app = router(Default::default());
    let mut total = 0;
    for n in 1..=10 {
        total += passed_v6(&app, &format!("2001:db8:0:1::{n:x}"), 1).await;
    }
    assert_eq!(total, 2);
    assert_eq!(passed_v6(&app, "2001:db8:0:2::1", 3).await, 2);
    // Keyed by address: each its own two.
    let exact = spillway_tower::keys::TrustedProxies::default()
        .keying(spillway_tower::keys::PeerIpPrefixes::EXACT);
    let app = router(exact);
    assert_eq!(passed_v6(&app, "2001:db8:0:3::1", 3).await, 2);
    assert_eq!(passed_v6(&app, "2001:db8:0:3::2", 3).await, 2);
}
