//! The admin API against hostile clients: silent connections, floods of unauthenticated ones,
//! live streams past their cap, and cross-site writes from a browser. Each waits on events
//! (an answer, a closed socket), on tokio's paused clock where time matters.

mod support;

use spillway_server::admin::AdminLimits;
use std::net::SocketAddr;
use std::time::Duration;
use support::server::Harness;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::server::TOKEN;

/// The longest any one wait may take, in real time.
const DEADLINE: Duration = Duration::from_secs(30);

/// A proxy in front of nothing, with its admin API (token `token`) held to `limits`, on a file of its own.
async fn start(token: Option<&str>, limits: AdminLimits) -> Harness {
    let text = "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:9\"\n";
    Harness::start_as(text, token, |admin| admin.with_limits(limits)).await
}

/// Sends `request` on a new connection and reads the answer's head and body, up to the
/// first `limit` bytes or the close.
async fn exchange(addr: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    read_answer(&mut stream).await
}

/// Reads one answer: its head, then as many body bytes as its `content-length` says.
async fn read_answer(stream: &mut TcpStream) -> String {
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(DEADLINE, async {
        loop {
            let n = stream.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            read.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&read);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(usize::MAX);
                if body.len() >= length {
                    break;
                }
            }
        }
    })
    .await
    .expect("an answer in time");
    String::from_utf8_lossy(&read).into_owned()
}

fn authorized_get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n")
}

#[tokio::test(start_paused = true)]
async fn silent_connections_never_keep_the_operator_out() {
    let h = start(Some(TOKEN), AdminLimits::default()).await;
    // 200 connections that send nothing, more than the 64 places.
    let mut silent = Vec::new();
    for _ in 0..200 {
        silent.push(TcpStream::connect(h.admin).await.unwrap());
    }
    // The operator is answered at once, without waiting for any of them to time out.
    let start = tokio::time::Instant::now();
    let answer = exchange(h.admin, &authorized_get("/metrics")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    // Each newcomer past the budget of 16 closed the oldest silent one.
    let evictions = metric(&answer, "spillway_admin_evictions_total");
    assert!(evictions >= 200.0 - 16.0, "{evictions}");
    assert!(metric(&answer, "spillway_admin_pending_connections") <= 16.0);
    // Re-opened as they close, they still do not: another 200, then the operator again.
    for _ in 0..200 {
        silent.push(TcpStream::connect(h.admin).await.unwrap());
    }
    let answer = exchange(h.admin, &authorized_get("/api/status")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(silent);
}

#[tokio::test(start_paused = true)]
async fn an_operator_slow_to_send_its_head_outlasts_a_flood_from_another_address() {
    let h = start(Some(TOKEN), AdminLimits::default()).await;
    // The operator connects from 127.0.0.2 and takes its time (a long round trip) ...
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut operator = socket.connect(h.admin).await.unwrap();
    // ... while 300 silent connections from 127.0.0.1 come and go past the budget of 16.
    let mut flood = Vec::new();
    for _ in 0..300 {
        flood.push(TcpStream::connect(h.admin).await.unwrap());
    }
    operator
        .write_all(authorized_get("/metrics").as_bytes())
        .await
        .unwrap();
    let answer = read_answer(&mut operator).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The flood evicted its own connections only.
    assert!(metric(&answer, "spillway_admin_evictions_total") >= 300.0 - 16.0);
    drop(flood);
}

#[tokio::test(start_paused = true)]
async fn a_silent_connection_is_closed_at_the_admin_header_timeout() {
    let limits = AdminLimits {
        header_timeout: Duration::from_secs(2),
        ..AdminLimits::default()
    };
    let h = start(Some(TOKEN), limits).await;
    let mut silent = TcpStream::connect(h.admin).await.unwrap();
    let start = tokio::time::Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(3600), silent.read(&mut buf))
        .await
        .expect("closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn streams_past_their_cap_and_newcomers_when_all_hold_the_token_get_503_at_once() {
    let limits = AdminLimits {
        max_streams: 3,
        ..AdminLimits::default()
    };
    let h = start(Some(TOKEN), limits).await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(h.admin).await.unwrap();
        stream
            .write_all(authorized_get("/api/stream").as_bytes())
            .await
            .unwrap();
        let mut head = [0u8; 15];
        stream.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200 OK");
        streams.push(stream);
    }
    let answer = exchange(h.admin, &authorized_get("/api/stream")).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("max_streams"), "{answer}");
    // Every place taken by a connection that showed the token: 61 more kept alive.
    let mut held = Vec::new();
    for _ in 0..spillway_server::admin::MAX_CONNECTIONS - 3 {
        let mut stream = TcpStream::connect(h.admin).await.unwrap();
        stream
            .write_all(authorized_get("/api/status").as_bytes())
            .await
            .unwrap();
        let answer = read_answer(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        held.push(stream);
    }
    // A newcomer is told at once, and not left hanging.
    let answer = exchange(h.admin, &authorized_get("/api/status")).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    // One stream closes: its place is a newcomer's again, once the server's next write on it
    // (the feed's next second) finds it closed.
    drop(streams.pop());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answer = tokio::time::timeout(DEADLINE, async {
        loop {
            let answer = exchange(h.admin, &authorized_get("/metrics")).await;
            if !answer.starts_with("HTTP/1.1 503") {
                return answer;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("a place came back");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(metric(&answer, "spillway_admin_full_refusals_total") >= 1.0);
    assert!(metric(&answer, "spillway_admin_stream_refusals_total") >= 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_cross_site_write_is_refused_and_changes_nothing() {
    // No token: the default on loopback, where only these checks stand between a web page the
    // operator visits and the rules.
    let h = start(None, AdminLimits::default()).await;
    let post = |headers: &str| {
        format!(
            "POST /api/reload HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: 2\r\n\r\n{{}}"
        )
    };
    for (headers, status, applied) in [
        // What a page at evil.example makes a browser send without a preflight.
        (
            "Origin: http://evil.example\r\nContent-Type: text/plain\r\n",
            "403",
            0,
        ),
        // Even with a JSON content type (which a browser would preflight), a foreign origin.
        (
            "Origin: http://evil.example\r\nContent-Type: application/json\r\n",
            "403",
            0,
        ),
        // No origin (a script), but not JSON.
        ("Content-Type: text/plain\r\n", "415", 0),
        // The dashboard's own page (its origin), and a script, are taken.
        (
            "Origin: http://127.0.0.1\r\nContent-Type: application/json\r\n",
            "200",
            1,
        ),
        (
            "Content-Type: application/json; charset=utf-8\r\n",
            "200",
            2,
        ),
    ] {
        let answer = exchange(h.admin, &post(headers)).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{headers}: {answer}"
        );
        assert_eq!(h.reloader.state().reloads, applied, "{headers}");
    }
    let rules = "PUT /api/rules HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: null\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"flow\":[]}";
    assert!(exchange(h.admin, rules).await.starts_with("HTTP/1.1 403"));
    // Every refusal is in the audit trail.
    let status = exchange(
        h.admin,
        "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    )
    .await;
    assert_eq!(
        status.matches("Origin is not this admin API").count(),
        3,
        "{status}"
    );
}

/// A sample's value from the text exposition in `answer`.
fn metric(answer: &str, series: &str) -> f64 {
    answer
        .lines()
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {series} in {answer}"))
}
