//! `spillway serve` as a child process, for the test files that need the binary itself
//! (signals, process limits): a free port, the child, and its log's lines as they come.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The longest any wait on the child may take.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

/// A free loopback port (bound, then released for the child to take). Never one this process
/// was given before: the kernel may hand a port just released out again, and two servers (a
/// proxy and its admin API) told the same port would fail to start.
pub(crate) fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
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

/// The child, killed when dropped: a test that fails leaves no process behind (which would
/// also hold the test's output open).
#[derive(Debug)]
pub(crate) struct Spillway(Child);

impl std::ops::Deref for Spillway {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Spillway {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Spillway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `spillway serve` on a file in `dir` holding `config`, under an open-file limit of
/// `open_files` (soft, hard) when given: the child, and its log's lines as they come.
pub(crate) fn serve(
    dir: &Path,
    config: &str,
    open_files: Option<(u64, u64)>,
) -> (Spillway, mpsc::Receiver<String>) {
    serve_with(dir, config, open_files, &[])
}

/// As [`serve`], with more arguments to `spillway serve`.
pub(crate) fn serve_with(
    dir: &Path,
    config: &str,
    open_files: Option<(u64, u64)>,
    args: &[&str],
) -> (Spillway, mpsc::Receiver<String>) {
    let path = dir.join("spillway.toml");
    std::fs::write(&path, config).unwrap();
    let binary = env!("CARGO_BIN_EXE_spillway");
    let mut command = match open_files {
        // The shell sets the limits and becomes the binary (`exec`): the child is spillway.
        Some((soft, hard)) => {
            let mut command = Command::new("sh");
            command.args([
                "-c",
                &format!("ulimit -Sn {soft} && ulimit -Hn {hard} && exec \"$0\" \"$@\""),
                binary,
            ]);
            command
        }
        None => Command::new(binary),
    };
    let mut child = command
        .args(["serve", "--config"])
        .arg(&path)
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            let _ = lines_tx.send(line);
        }
    });
    (Spillway(child), lines)
}

/// Reads the log until a line holds `needle` (within the deadline), and returns that line; no
/// line may hold colour codes, since the log is not a terminal.
pub(crate) fn wait_for_line(lines: &mpsc::Receiver<String>, needle: &str) -> String {
    // What came before, for the failure's message (a child that could not start says why).
    let mut seen = Vec::new();
    loop {
        let line = lines.recv_timeout(DEADLINE).unwrap_or_else(|_| {
            let last = &seen[seen.len().saturating_sub(20)..];
            panic!(
                "no `{needle}` in the log; its last lines:\n{}",
                last.join("\n")
            )
        });
        assert!(!line.contains('\u{1b}'), "ANSI codes in {line:?}");
        if line.contains(needle) {
            return line;
        }
        seen.push(line);
    }
}

/// Waits for `child` to exit (within the deadline; past it, fails saying `what`), and returns
/// how it exited.
#[allow(dead_code)] // Not every test file that uses the child waits for its exit.
pub(crate) fn wait_for_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    use spillway::Clock;
    let clock = spillway::SystemClock::new();
    let start = clock.now_nanos();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        let waited = clock.now_nanos().saturating_sub(start);
        assert!(waited < DEADLINE.as_nanos() as u64, "{what}");
        std::thread::yield_now();
    }
}
