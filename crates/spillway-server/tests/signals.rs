//! `spillway serve` stopped as an orchestrator stops it: SIGTERM closes the listener at once
//! and lets the request in flight finish, then the process exits 0. Every wait is on an event
//! (a log line, a channel, a connection refused, the exit) with a deadline.

#![cfg(unix)]

mod support;
use support::child;

use child::{free_port, serve, wait_for_exit, wait_for_line, DEADLINE};
use spillway::{Clock, SystemClock};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::mpsc;

/// Whether `DEADLINE` has passed since `start` (nanoseconds on the system clock).
fn past_deadline(clock: &SystemClock, start: u64) -> bool {
    clock.now_nanos().saturating_sub(start) > DEADLINE.as_nanos() as u64
}

/// Sends `signal` (`TERM`, `HUP`) to `child`.
fn send(signal: &str, child: &Child) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// An upstream that tells `arrived` of each request and answers it once `release` says so.
fn upstream(arrived: mpsc::Sender<()>, release: mpsc::Receiver<()>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if stream.read(&mut byte).unwrap_or(0) == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            let _ = arrived.send(());
            if release.recv_timeout(DEADLINE).is_err() {
                return;
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    addr
}

/// A probe's answer: `GET path` on `admin` as a kubelet sends it (no token, the pod's address
/// as `Host`), read to the close: the status code and the body.
fn probe(admin: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(admin).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 10.1.2.3:9090\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// Asks `/readyz` until it answers `status`, within the deadline: its body then.
fn ready_as(admin: SocketAddr, status: u16) -> String {
    let clock = SystemClock::new();
    let start = clock.now_nanos();
    loop {
        let (got, body) = probe(admin, "/readyz");
        if got == status {
            return body;
        }
        assert!(!past_deadline(&clock, start), "/readyz: {got} {body}");
        // No event says it: asked again every 10 ms (docs/testing.md).
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn sigterm_closes_the_listener_and_drains_the_request_in_flight() {
    let (arrived_tx, arrived) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let upstream = upstream(arrived_tx, release_rx);
    let (port, admin_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let (mut child, lines) = serve(
        dir.path(),
        &format!(
            "[listener]\nlisten = \"127.0.0.1:{port}\"\n[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\
             [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\
             [default]\nupstream = \"app\"\n"
        ),
        None,
    );
    wait_for_line(&lines, "spillway listening");
    let proxy: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    // Ready once its workers serve; live.
    assert_eq!(ready_as(admin, 200), r#"{"ready":true}"#);
    assert_eq!(
        probe(admin, "/healthz"),
        (200, r#"{"live":true}"#.to_owned())
    );

    // A request in flight, held at the upstream.
    let (answer_tx, answer) = mpsc::channel();
    std::thread::spawn(move || {
        let mut stream = TcpStream::connect(proxy).unwrap();
        stream
            .write_all(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut response = Vec::new();
        let mut buffer = [0u8; 1024];
        while !response.ends_with(b"ok") {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => response.extend_from_slice(&buffer[..n]),
            }
        }
        let _ = answer_tx.send(String::from_utf8_lossy(&response).into_owned());
    });
    arrived
        .recv_timeout(DEADLINE)
        .expect("the request reached the upstream");

    send("TERM", &child);
    wait_for_line(&lines, "shutting down");
    // Not ready while it drains, and still live.
    let draining = ready_as(admin, 503);
    assert!(draining.contains("draining"), "{draining}");
    assert_eq!(probe(admin, "/healthz").0, 200);
    // The listener closes: new connections are refused, not left hanging.
    let clock = SystemClock::new();
    let start = clock.now_nanos();
    while TcpStream::connect(proxy).is_ok() {
        assert!(
            !past_deadline(&clock, start),
            "still accepting while draining"
        );
        std::thread::yield_now();
    }
    // The request in flight ends normally, and then the process exits 0.
    release.send(()).unwrap();
    let response = answer.recv_timeout(DEADLINE).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let status = wait_for_exit(&mut child, "did not exit after draining");
    assert!(status.success(), "{status}");
}

#[test]
fn sighup_reloads_the_file() {
    let (port, admin_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let (mut child, lines) = serve(
        dir.path(),
        &format!(
            "[listener]\nlisten = \"127.0.0.1:{port}\"\n[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n"
        ),
        None,
    );
    wait_for_line(&lines, "spillway listening");
    // The file is unchanged: only the signal can make this reload.
    send("HUP", &child);
    wait_for_line(&lines, "configuration reloaded");
    send("TERM", &child);
    let _ = child.wait();
}

#[test]
fn a_reload_warns_of_rules_no_route_produces_as_the_start_does() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let base = format!("[listener]\nlisten = \"127.0.0.1:{port}\"\n");
    let (mut child, lines) = serve(dir.path(), &base, None);
    wait_for_line(&lines, "spillway listening");
    let typo = format!("{base}\n[[flow]]\nid = \"typo\"\nresource = \"GET /serch\"\ncount = 5\n");
    std::fs::write(dir.path().join("spillway.toml"), typo).unwrap();
    // The watcher or the signal, whichever comes first, reloads the file.
    send("HUP", &child);
    let warning = wait_for_line(&lines, "no route produces `GET /serch`");
    assert!(warning.contains("flow[0]"), "{warning}");
    wait_for_line(&lines, "configuration reloaded");
    send("TERM", &child);
    let _ = child.wait();
}

#[test]
fn a_write_stuck_on_a_hung_file_does_not_keep_the_process_past_its_drain() {
    let (port, admin_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let (mut child, lines) = serve(
        dir.path(),
        &format!(
            "[listener]\nlisten = \"127.0.0.1:{port}\"\ndrain_timeout = \"1s\"\n\
             [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n"
        ),
        None,
    );
    wait_for_line(&lines, "spillway listening");
    // The file becomes a FIFO no one writes to, as a hung disk would hang its reads.
    let file = dir.path().join("spillway.toml");
    std::fs::remove_file(&file).unwrap();
    let made = Command::new("mkfifo").arg(&file).status().unwrap();
    assert!(made.success());
    // A persisting write of the rules reads the file first (and the watcher may reload it).
    std::thread::spawn(move || {
        let body = r#"{"flow": [{"id": "a", "resource": "r", "count": 1}]}"#;
        let mut stream = TcpStream::connect(("127.0.0.1", admin_port)).unwrap();
        let _ = write!(
            stream,
            "PUT /api/rules?persist=true HTTP/1.1\r\nHost: 127.0.0.1:{admin_port}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
    });
    // Opening the FIFO to write waits for a reader: then a read is stuck on it, and stays
    // stuck while this end is held open and nothing is written.
    let (opened_tx, opened) = mpsc::channel();
    let fifo = file.clone();
    std::thread::spawn(move || {
        let held = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        let _ = opened_tx.send(held);
    });
    let held = opened
        .recv_timeout(DEADLINE)
        .expect("a read of the file began");
    send("TERM", &child);
    let status = wait_for_exit(&mut child, "still running with a read stuck on its file");
    assert!(status.success(), "{status}");
    drop(held);
}
