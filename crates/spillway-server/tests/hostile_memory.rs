//! What hostile clients cost `spillway serve` in memory, read from the process itself
//! (`/proc/PID/status`): a thousand unfinished request heads, just under and far past the
//! head cap, and two hundred clients that stop reading a response without end. Each phase
//! waits on events (answers, closes, the admin API's counts) with a deadline; the bounds are
//! on the peak (`VmHWM`), so they hold whatever the timing, and the memory must go back once
//! the connections close.
//!
//! Run with `--nocapture` to see the numbers.

#![cfg(target_os = "linux")]

mod support;
use support::child;

use child::{free_port, serve, wait_for_line, DEADLINE};
use spillway::{Clock, SystemClock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A field of `/proc/PID/status`, in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.trim().strip_suffix("kB"))
        .unwrap_or_else(|| panic!("no {field}"))
        .trim()
        .parse()
        .unwrap();
    kib / 1024.0
}

/// A deadline of [`DEADLINE`] from now, on the system clock.
struct Deadline(SystemClock, u64);

impl Deadline {
    fn start() -> Self {
        let clock = SystemClock::new();
        let now = clock.now_nanos();
        Self(clock, now)
    }

    fn passed(&self) -> bool {
        self.0.now_nanos().saturating_sub(self.1) > DEADLINE.as_nanos() as u64
    }
}

/// Waits (polling every 20 ms, within the deadline) until `ready` holds.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Deadline::start();
    while !ready() {
        assert!(!deadline.passed(), "no {what} within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The proxy's open connections, as the admin API's status says.
async fn open_connections(admin: u16) -> u64 {
    let mut stream = TcpStream::connect(("127.0.0.1", admin)).await.unwrap();
    stream
        .write_all(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    let status: serde_json::Value = serde_json::from_str(body).unwrap();
    status["connections"]["proxy"]["open"].as_u64().unwrap()
}

/// Waits (within the deadline) until the proxy holds `open` connections.
async fn until_open(admin: u16, open: u64) {
    let deadline = Deadline::start();
    loop {
        let now = open_connections(admin).await;
        if now == open {
            return;
        }
        assert!(!deadline.passed(), "{now} connections open, not {open}");
    }
}

/// An upstream whose every response is a chunked body without end, counting the connections
/// it saw closed.
async fn endless_upstream(closed: tokio::sync::mpsc::UnboundedSender<()>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let closed = closed.clone();
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head).await;
                let mut chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                loop {
                    chunk.extend_from_slice(b"4000\r\n");
                    chunk.extend_from_slice(&[b'x'; 0x4000]);
                    chunk.extend_from_slice(b"\r\n");
                    if stream.write_all(&chunk).await.is_err() {
                        break;
                    }
                    chunk.clear();
                }
                let _ = closed.send(());
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_heads_and_stalled_readers_cost_bounded_memory_given_back_on_close() {
    let (closed_tx, mut closed) = tokio::sync::mpsc::unbounded_channel();
    let upstream = endless_upstream(closed_tx).await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[listener]\nlisten = \"127.0.0.1:{port}\"\nheader_timeout = \"60s\"\nsend_timeout = \"1s\"\nworkers = 2\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:{upstream}\"\n\n[default]\nupstream = \"app\"\n"
    );
    let (child, lines) = serve(dir.path(), &config, None);
    wait_for_line(&lines, "spillway listening");
    let pid = child.id();
    let base = status_mib(pid, "VmRSS:");
    // Each worker's waiting accept holds a place: the count at rest.
    let idle = open_connections(admin).await;

    // 1,000 heads of 60 KB without an end of line, under the 64 KiB cap: held open.
    let mut held = Vec::new();
    for _ in 0..1_000 {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', 60_000));
        stream.write_all(&head).await.unwrap();
        held.push(stream);
    }
    until_open(admin, idle + 1_000).await;
    // 1,000 more of 300 KB, past the cap: each answered 431 and closed at once.
    for _ in 0..1_000 {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', 300_000));
        // The proxy may stop reading (and close) before all of it is sent.
        let _ = stream.write_all(&head).await;
        let mut answer = [0u8; 12];
        let _ = tokio::time::timeout(DEADLINE, stream.read_exact(&mut answer))
            .await
            .expect("answered in time");
        assert_eq!(&answer, b"HTTP/1.1 431");
    }
    let held_rss = status_mib(pid, "VmRSS:");
    drop(held);
    until_open(admin, idle).await;
    let heads_peak = status_mib(pid, "VmHWM:");
    println!("heads: base {base:.0} MiB, 1,000 held {held_rss:.0} MiB, peak {heads_peak:.0} MiB");
    // About 90 KiB a connection (its 64 KiB read buffer, its task and socket), at most 120,
    // where they cost 500 KiB each before the head was capped.
    assert!(
        heads_peak - base < 120.0,
        "peak {heads_peak:.0} MiB, base {base:.0} MiB"
    );
    // Given back within seconds of the close, not held until the next traffic.
    until("the heads' memory given back", || {
        status_mib(pid, "VmRSS:") < base + 20.0
    })
    .await;

    // 200 clients ask for an endless body and read nothing: closed at the send timeout (1 s),
    // with their upstream connections. The peak is measured afresh (`5` to `clear_refs` resets
    // it).
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let base = status_mib(pid, "VmHWM:");
    let mut stalled = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        stream
            .write_all(b"GET /download HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        stalled.push(stream);
    }
    for n in 0..200 {
        tokio::time::timeout(DEADLINE, closed.recv())
            .await
            .unwrap_or_else(|_| panic!("only {n} of 200 upstream connections closed"));
    }
    until_open(admin, idle).await;
    let readers_peak = status_mib(pid, "VmHWM:");
    println!("stalled readers: from {base:.0} MiB, peak {readers_peak:.0} MiB");
    // Each holds at most its 64 KiB write queue, its upstream connection's 64 KiB buffer and
    // the response's 64 KiB read ahead, and a task: at most 300 KiB (650 KiB before the
    // upstream buffer was capped), for at most the send timeout.
    assert!(
        readers_peak - base < 60.0,
        "peak {readers_peak:.0} MiB, from {base:.0} MiB"
    );
    until("the readers' memory given back", || {
        status_mib(pid, "VmRSS:") < base + 20.0
    })
    .await;
    drop(stalled);
}
