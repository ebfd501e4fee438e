//! `spillway serve` under a low open-file limit, flooded with client connections: the automatic
//! connection cap keeps descriptors for the upstream connections and the admin API, so the
//! connections it holds are served and the admin API answers. Every wait is on an event (a log
//! line, a request arriving, a response, the exit) with a deadline.

#![cfg(target_os = "linux")]

mod support;
use support::child;

use child::{free_port, serve, wait_for_exit, wait_for_line, DEADLINE};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

/// Longest a connection to the proxy may take to be established.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// An upstream that serves each connection on a thread of its own: it tells `arrived` of each
/// request and answers them all once `released` is set.
fn holding_upstream(
    arrived: mpsc::Sender<()>,
    released: Arc<(Mutex<bool>, Condvar)>,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (arrived, released) = (arrived.clone(), released.clone());
            std::thread::spawn(move || {
                if read_head(&mut stream).is_empty() {
                    return;
                }
                let _ = arrived.send(());
                let (lock, freed) = &*released;
                let guard = lock.lock().unwrap();
                let (guard, _) = freed
                    .wait_timeout_while(guard, DEADLINE, |released| !*released)
                    .unwrap();
                drop(guard);
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            });
        }
    });
    addr
}

/// Reads up to the end of a request or response head; what came (empty at end of stream).
fn read_head(stream: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    head
}

/// The value of `key=` in a log line.
fn field(line: &str, key: &str) -> String {
    let start = line
        .find(&format!(" {key}="))
        .unwrap_or_else(|| panic!("no {key} in {line:?}"));
    line[start + key.len() + 2..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// `GET /api/status` on the admin API: its status line and body.
fn admin_status(admin: SocketAddr) -> (String, String) {
    admin_get(admin, "/api/status")
}

/// `GET path` on the admin API: its status line and body.
fn admin_get(admin: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(admin).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

fn config(port: u16, admin_port: u16, upstream: SocketAddr) -> String {
    format!(
        // One address floods: no cap per client, so that it can take every place.
        "[listener]\nlisten = \"127.0.0.1:{port}\"\nat_capacity = \"close\"\n\
         max_connections_per_client = 0\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\
         [default]\nupstream = \"app\"\n"
    )
}

/// `spillway serve` under an open-file limit of `soft` and `hard`, its upstream a port nothing
/// answers on (for what the process does at start).
fn serve_alone(
    dir: &std::path::Path,
    soft: u64,
    hard: u64,
) -> (child::Spillway, mpsc::Receiver<String>) {
    let upstream: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let config = config(free_port(), free_port(), upstream);
    serve(dir, &config, Some((soft, hard)))
}

/// The open-file limit (soft and hard) the flooded proxies run under.
const LIMIT: u64 = 256;

/// `spillway serve` under an open-file limit of [`LIMIT`], in front of a holding upstream,
/// once it says it listens.
struct Flooded {
    _child: child::Spillway,
    _dir: tempfile::TempDir,
    /// The log line that says it listens.
    listening: String,
    proxy: SocketAddr,
    admin: SocketAddr,
    /// A message for each request the upstream holds.
    arrived: mpsc::Receiver<()>,
    released: Arc<(Mutex<bool>, Condvar)>,
}

impl Flooded {
    fn start() -> Self {
        let (arrived_tx, arrived) = mpsc::channel();
        let released = Arc::new((Mutex::new(false), Condvar::new()));
        let upstream = holding_upstream(arrived_tx, released.clone());
        let (port, admin_port) = (free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        let (child, lines) = serve(
            dir.path(),
            &config(port, admin_port, upstream),
            Some((LIMIT, LIMIT)),
        );
        let listening = wait_for_line(&lines, "spillway listening");
        Self {
            _child: child,
            _dir: dir,
            listening,
            proxy: format!("127.0.0.1:{port}").parse().unwrap(),
            admin: format!("127.0.0.1:{admin_port}").parse().unwrap(),
            arrived,
            released,
        }
    }

    /// Lets the upstream answer every request it holds, and those to come.
    fn release(&self) {
        *self.released.0.lock().unwrap() = true;
        self.released.1.notify_all();
    }
}

#[test]
fn flooded_under_a_low_open_file_limit_the_held_connections_are_served_and_the_admin_answers() {
    let flooded = Flooded::start();
    let (line, limit) = (&flooded.listening, LIMIT);
    assert_eq!(field(line, "open_file_limit"), limit.to_string(), "{line}");
    // What the limit leaves once the admin API's reserve is set aside, halved: one upstream
    // connection for each client connection.
    let cap: usize = field(line, "max_connections").parse().unwrap();
    let reserve = 2 * spillway_server::admin::MAX_CONNECTIONS;
    assert!(
        (1..=(limit as usize - reserve) / 2).contains(&cap),
        "{line}"
    );

    // Far more connections than the process has descriptors for, each with a request that
    // the upstream holds: without the cap, these take every descriptor, and each request
    // fails for want of one for its upstream connection (502).
    let proxy = flooded.proxy;
    let mut clients = Vec::new();
    for opened in 0..limit {
        // At the cap the proxy accepts and closes at once, so every connection is taken from
        // the backlog; a proxy out of descriptors stops accepting, and connections hang.
        let mut client =
            TcpStream::connect_timeout(&proxy, CONNECT_TIMEOUT).unwrap_or_else(|err| {
                panic!("connection {opened}: the proxy stopped accepting: {err}")
            });
        client.set_read_timeout(Some(DEADLINE)).unwrap();
        let _ = client.write_all(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
        clients.push(client);
    }
    // The proxy holds `cap` of them, each with its request at the upstream at the same time,
    // on `cap` upstream connections.
    for held in 0..cap {
        flooded
            .arrived
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("only {held} of {cap} requests reached the upstream"));
    }
    // And the admin API answers.
    let (status_line, body) = admin_status(flooded.admin);
    assert_eq!(status_line, "HTTP/1.1 200 OK", "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let proxy_connections = &status["connections"]["proxy"];
    assert_eq!(proxy_connections["max"], cap, "{status}");
    assert_eq!(proxy_connections["open"], cap, "{status}");
    assert_eq!(status["connections"]["open_file_limit"], limit, "{status}");

    // Released, each held request is answered 200; the others were closed at the cap.
    flooded.release();
    let mut answered = 0;
    for client in &mut clients {
        let head = read_head(client);
        if head.is_empty() {
            continue;
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        answered += 1;
    }
    assert_eq!(answered, cap);
    assert!(
        flooded.arrived.try_recv().is_err(),
        "more requests than the cap"
    );
}

#[test]
fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
    let dir = tempfile::tempdir().unwrap();
    let (child, lines) = serve_alone(dir.path(), 256, 512);
    let line = wait_for_line(&lines, "spillway listening");
    assert_eq!(field(&line, "open_file_limit"), "512", "{line}");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let open_files = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        open_files.split_whitespace().collect::<Vec<_>>()[3..5],
        ["512", "512"],
        "{open_files}"
    );
}

#[test]
fn a_limit_that_leaves_no_room_is_refused_at_start_saying_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, lines) = serve_alone(dir.path(), 100, 100);
    let line = wait_for_line(&lines, "open-file limit");
    assert!(
        line.starts_with("error: the open-file limit (100) leaves no room"),
        "{line}"
    );
    assert!(line.contains("ulimit -n"), "{line}");
    let status = wait_for_exit(&mut child, "still running");
    assert_eq!(status.code(), Some(1));
}

/// One HTTP/2 request on `sender`: its status.
async fn h2_get(
    mut sender: hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    authority: String,
) -> Option<u16> {
    let request = http::Request::get(format!("http://{authority}/hold"))
        .body(http_body_util::Empty::new())
        .unwrap();
    let response = sender.send_request(request).await.ok()?;
    Some(response.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_clients_with_more_requests_than_descriptors_get_503_and_the_admin_answers() {
    let mut flooded = tokio::task::spawn_blocking(Flooded::start).await.unwrap();
    let admin = flooded.admin;
    let status = tokio::task::spawn_blocking(move || admin_status(admin))
        .await
        .unwrap();
    let status: serde_json::Value = serde_json::from_str(&status.1).unwrap();
    let upstreams = status["connections"]["upstream"]["max"].as_u64().unwrap() as usize;
    assert!((1..LIMIT as usize / 2).contains(&upstreams), "{status}");

    // Two connections, 150 requests each at once: more upstream connections than the process
    // has descriptors for.
    let authority = flooded.proxy.to_string();
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..2 {
        let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
        let (sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        for _ in 0..150 {
            let (sender, authority, done) = (sender.clone(), authority.clone(), done.clone());
            tokio::spawn(async move { done.send(h2_get(sender, authority).await) });
        }
    }
    // As many as the cap reach the upstream and are held there; the others are refused.
    let held = tokio::task::spawn_blocking(move || {
        for held in 0..upstreams {
            flooded
                .arrived
                .recv_timeout(DEADLINE)
                .unwrap_or_else(|_| panic!("only {held} of {upstreams} requests arrived"));
        }
        flooded
    });
    flooded = tokio::time::timeout(DEADLINE, held).await.unwrap().unwrap();
    for _ in upstreams..300 {
        let status = tokio::time::timeout(DEADLINE, finished.recv()).await;
        assert_eq!(status.unwrap().unwrap(), Some(503));
    }
    // The admin API answers meanwhile.
    let (status_line, body) = tokio::task::spawn_blocking(move || admin_status(admin))
        .await
        .unwrap();
    assert_eq!(status_line, "HTTP/1.1 200 OK", "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status["connections"]["upstream"]["open"], upstreams,
        "{status}"
    );

    let (_, metrics) = tokio::task::spawn_blocking(move || admin_get(admin, "/metrics"))
        .await
        .unwrap();
    let refused = format!("spillway_upstream_refusals_total {}\n", 300 - upstreams);
    assert!(metrics.contains(&refused), "{metrics}");
    // Released, the held ones are answered.
    flooded.release();
    for _ in 0..upstreams {
        let status = tokio::time::timeout(DEADLINE, finished.recv()).await;
        assert_eq!(status.unwrap().unwrap(), Some(200));
    }
    assert!(
        flooded.arrived.try_recv().is_err(),
        "more requests than the cap arrived"
    );
}
