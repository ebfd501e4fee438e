//! One client holds at most `listener.max_connections_per_client` connections: found by an
//! attack, one address held every place under `max_connections` (300 silent WebSockets, or
//! 300 TLS handshakes sent a byte every half second), and every other client out. Events are
//! waited for with a timeout; nothing sleeps.

mod support;

use bytes::Bytes;
use http::Request;
use http::{Method, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use std::net::SocketAddr;
use std::time::Duration;
use support::server::{call, Harness, Served, TOKEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection to `proxy` from the loopback address `from` (any of 127.0.0.0/8).
async fn connect_from(from: &str, proxy: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(proxy).await.unwrap()
}

/// What `stream` reads until it closes (within 10 s).
async fn read_all(mut stream: TcpStream) -> String {
    let mut read = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut read))
        .await
        .expect("closed in time")
        .unwrap_or_default();
    String::from_utf8_lossy(&read).into_owned()
}

async fn get(stream: TcpStream) -> String {
    let mut stream = stream;
    let head = "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    // Refused, the connection may be closed before the head is written.
    let _ = stream.write_all(head.as_bytes()).await;
    read_all(stream).await
}

#[tokio::test]
async fn a_client_at_its_cap_is_closed_and_another_client_is_served() {
    let upstream = support::upstream(|_request: Request<Incoming>| async {
        http::Response::new(Full::new(Bytes::from("ok")))
    })
    .await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\nmax_connections = 8\nmax_connections_per_client = 2\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"r\"\npath = \"/\"\nupstream = \"app\"\n"
    );
    let served = Harness::start(&text).await;
    // Two silent connections from 127.0.0.7: its cap.
    let held = [
        connect_from("127.0.0.7", served.proxy).await,
        connect_from("127.0.0.7", served.proxy).await,
    ];
    // A third from it is closed at once, unanswered.
    let third = get(connect_from("127.0.0.7", served.proxy).await).await;
    assert_eq!(third, "", "closed unanswered");
    // Another client is served.
    let other = get(connect_from("127.0.0.8", served.proxy).await).await;
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    let metrics = served.handle.render_metrics().unwrap();
    let line = r#"spillway_client_cap_refusals_total{listener="proxy"} 1"#;
    assert!(metrics.contains(line), "{line} not in\n{metrics}");
    // The status says it too, with the cap and the clients holding connections.
    let (status, body) = call(
        served.admin,
        Method::GET,
        "/api/status",
        Some(TOKEN),
        Bytes::new(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let proxy = &status["connections"]["proxy"];
    assert_eq!(proxy["troubles"]["client_cap_refusals"], 1, "{proxy}");
    assert_eq!(proxy["troubles"]["go_aways"], 0, "{proxy}");
    assert_eq!(proxy["max_per_client"], 2, "{proxy}");
    assert!(proxy["clients"].as_u64().unwrap() >= 1, "{proxy}");
    // One of its connections closes: it may open another.
    drop(held);
    let again = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let read = get(connect_from("127.0.0.7", served.proxy).await).await;
            if read.starts_with("HTTP/1.1 200") {
                return read;
            }
            // The proxy has not seen the close yet.
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("served once its connections closed");
    assert!(again.contains("ok"), "{again}");
}

/// A request from `from` whose body stalls after its first byte: it holds its places from
/// its admission on. Returns the connection, to hold.
async fn stalled_upload(from: &str, proxy: SocketAddr) -> TcpStream {
    let mut stream = connect_from(from, proxy).await;
    let head = "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nx";
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// What a stalled request was answered at once, if anything within a moment: a refusal is
/// answered at once, an admitted one not until its body ends.
async fn refused_at_once(stream: &mut TcpStream) -> String {
    let mut read = vec![0u8; 12];
    match tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut read)).await {
        Ok(Ok(_)) => String::from_utf8_lossy(&read).into_owned(),
        other => format!("no answer: {other:?}"),
    }
}

/// One client holds a route's concurrency limit with requests whose bodies stall (or that it
/// leaves part-way, which hold their places as well): a per-key concurrency rule on `peer_ip`
/// keeps it to its share, and the others keep the rest. Without it, one client takes every
/// place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_ip_concurrency_rule_keeps_one_client_from_holding_a_route_s_places() {
    let (arrived, mut arrivals) = tokio::sync::mpsc::unbounded_channel();
    let upstream = support::upstream(move |request: Request<Incoming>| {
        let arrived = arrived.clone();
        async move {
            let _ = arrived.send(());
            let _ = http_body_util::BodyExt::collect(request.into_body()).await;
            http::Response::new(Full::new(Bytes::from("ok")))
        }
    })
    .await;
    for per_ip in [false, true] {
        let keyed = if per_ip {
            "[[keyed]]\nid = \"per-ip\"\nresource = \"r\"\nkey = \"peer_ip\"\n\
             grade = \"concurrency\"\ncount = 2\n"
        } else {
            ""
        };
        let text = format!(
            "[listener]\nlisten = \"127.0.0.1:0\"\n\n\
             [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
             [[route]]\nresource = \"r\"\npath = \"/\"\nupstream = \"app\"\n\n\
             [[flow]]\nid = \"places\"\nresource = \"r\"\ngrade = \"concurrency\"\ncount = 4\n\n\
             {keyed}"
        );
        let served = Served::start(&text).await;
        // One client sends four requests whose bodies stall, one at a time.
        let mut held = Vec::new();
        let mut first_client = 0;
        for _ in 0..4 {
            let mut stream = stalled_upload("127.0.0.7", served.proxy).await;
            tokio::select! {
                _ = arrivals.recv() => {
                    first_client += 1;
                    held.push(stream);
                }
                answer = refused_at_once(&mut stream) => {
                    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
                }
            }
        }
        // Another client asks for two places.
        let mut other_client = 0;
        for _ in 0..2 {
            let mut stream = stalled_upload("127.0.0.8", served.proxy).await;
            tokio::select! {
                _ = arrivals.recv() => {
                    other_client += 1;
                    held.push(stream);
                }
                answer = refused_at_once(&mut stream) => {
                    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
                }
            }
        }
        let places = (first_client, other_client);
        if per_ip {
            assert_eq!(places, (2, 2), "each client its share");
        } else {
            assert_eq!(places, (4, 0), "one client holds every place");
        }
        drop(held);
    }
}

/// On worker threads, a connection past its client's cap is closed where it was accepted,
/// before it is placed on a worker, and the cap holds across the workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_workers_a_client_at_its_cap_is_closed_and_another_client_is_served() {
    let upstream = support::upstream(|_request: Request<Incoming>| async {
        http::Response::new(Full::new(Bytes::from("ok")))
    })
    .await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\nmax_connections = 8\nmax_connections_per_client = 2\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"r\"\npath = \"/\"\nupstream = \"app\"\n"
    );
    let config = spillway_server::checked::parse(&text, "test.toml").unwrap();
    let workers = std::num::NonZeroUsize::new(2);
    let served = Served::with(&config, support::server::tokio_clocked(), workers).await;
    // Its two connections, which the workers share out (one each, when both are idle).
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_from("127.0.0.7", served.proxy).await;
        let head = "GET /x HTTP/1.1\r\nHost: x\r\n\r\n";
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = [0u8; 12];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"HTTP/1.1 200");
        held.push(stream);
    }
    let third = get(connect_from("127.0.0.7", served.proxy).await).await;
    assert_eq!(third, "", "closed unanswered");
    let other = get(connect_from("127.0.0.8", served.proxy).await).await;
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    let metrics = served.handle.render_metrics().unwrap();
    let line = r#"spillway_client_cap_refusals_total{listener="proxy"} 1"#;
    assert!(metrics.contains(line), "{line} not in\n{metrics}");
    drop(held);
    served.shutdown().await;
}

/// A WebSocket's tunnel holds its client's place until it closes (hyper hands its connection
/// over at the switch, and the connection's place went back then: found by a review), and a
/// trusted proxy has no cap.
#[tokio::test]
async fn a_tunnel_holds_its_client_s_place_and_a_trusted_proxy_has_no_cap() {
    let upstream = support::websocket_echo().await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\nmax_connections = 20\nmax_connections_per_client = 2\n\
         trusted_proxies = [\"127.0.0.9/32\"]\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"chat\"\npath = \"/\"\nupstream = \"app\"\n"
    );
    let served = Served::start(&text).await;
    let websocket = |from: &'static str| {
        let proxy = served.proxy;
        async move {
            let stream = connect_from(from, proxy).await;
            let url = format!("ws://{proxy}/chat");
            tokio::time::timeout(
                Duration::from_secs(10),
                tokio_tungstenite::client_async(url, stream),
            )
            .await
            .expect("answered in time")
            .map(|(socket, _)| socket)
        }
    };
    let first = websocket("127.0.0.7").await.expect("the first");
    let second = websocket("127.0.0.7").await.expect("the second");
    let resource = served.spillway.resource("chat").unwrap();
    assert_eq!(resource.stats().concurrency, 2, "both tunnels open");
    // Both switched: their connections are hyper's no more, but their places are held.
    assert!(websocket("127.0.0.7").await.is_err(), "the client's third");
    // A trusted proxy speaks for many clients.
    let mut through_proxy = Vec::new();
    for _ in 0..4 {
        through_proxy.push(websocket("127.0.0.9").await.expect("through the proxy"));
    }
    drop((first, second, through_proxy));
    served.shutdown().await;
}
