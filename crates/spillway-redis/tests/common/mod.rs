//! A real `redis-server` for a test: on a free loopback port, in a directory of its own, with no
//! persistence, stopped when dropped.

#![allow(dead_code)] // each test file uses what it needs

pub(crate) mod cluster;
pub(crate) mod relay;

use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Longest a server may take to start (never reached when it starts).
const START: Duration = Duration::from_secs(30);

pub(crate) struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one and returns once it says it accepts connections.
    pub(crate) async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = spawn(port, dir.path(), &[]).await;
        Self {
            child,
            port,
            _dir: dir,
        }
    }

    /// Kills it (SIGKILL), as a crash would, and returns once it has exited.
    pub(crate) async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }

    /// Starts it again on the same port, empty.
    pub(crate) async fn restart(&mut self) {
        self.child = spawn(self.port, self._dir.path(), &[]).await;
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// A new connection manager: a process of the fleet, as far as Redis can tell.
    pub(crate) async fn connect(&self) -> redis::aio::ConnectionManager {
        let client = redis::Client::open(self.url()).unwrap();
        client.get_connection_manager().await.unwrap()
    }
}

/// A free loopback port: the kernel's pick, released for a server to take. Never one this process
/// was given before: the kernel may hand a port just released out again, and two servers (a
/// proxy and its admin API) told the same port would fail to start.
pub(crate) fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// A server on `port` with `extra` arguments, once it says it accepts connections.
pub(crate) async fn spawn(port: u16, dir: &std::path::Path, extra: &[&str]) -> Child {
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--loglevel", "notice"])
        .args(extra)
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| {
            panic!("cannot start redis-server ({err}): install Debian's redis-server package, as .ci/run does")
        });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(START, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("Ready to accept connections") {
                return true;
            }
        }
        false
    });
    assert!(
        ready.await.unwrap_or(false),
        "redis-server on port {port} did not become ready"
    );
    // Keep reading its log, so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
