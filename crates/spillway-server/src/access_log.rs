//! spillway's access log (`[access_log]`, off by default): one JSON object a line for each
//! request the proxy answers, with what its limits decided, in a form `spillway replay` reads.
//!
//! A thread of its own writes the file, so that no request waits on the disk: a request's line
//! is made when its response has been sent (or abandoned) and queued; past [`QUEUE_LINES`]
//! lines (or [`QUEUE_BYTES`]) waiting, a line is dropped and counted
//! (`spillway_access_log_lines_total{result="dropped"}`).

mod entry;

pub(crate) use entry::{Decision, Entry, Pending};

use crate::config::Config;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

/// The most lines waiting for the writer before new ones are dropped.
pub(crate) const QUEUE_LINES: usize = 65_536;

/// The access log's counts, kept across reloads (the metrics read them).
#[derive(Debug, Default)]
pub(crate) struct Counts {
    written: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
}

impl Counts {
    /// Lines written, dropped because the writer was behind, and lost to a write error.
    pub(crate) fn read(&self) -> [(&'static str, u64); 3] {
        [
            ("written", self.written.load(Ordering::Relaxed)),
            ("dropped", self.dropped.load(Ordering::Relaxed)),
            ("failed", self.failed.load(Ordering::Relaxed)),
        ]
    }
}

/// The request headers `config`'s access log keeps: those the configuration reads, and those
/// `[access_log] headers` adds (`None`: no access log).
pub(crate) fn logged_headers(config: &Config) -> Option<Vec<http::HeaderName>> {
    let access_log = config.access_log.as_ref()?;
    Some(crate::read_headers::read_by(
        config,
        &access_log.get_ref().headers,
    ))
}

/// The access log's file, opened: what a configuration needs before [`AccessLog::start`].
#[derive(Debug)]
pub(crate) struct Opened {
    file: File,
    path: PathBuf,
}

impl Opened {
    /// Opens `config`'s access log, if it has one, for appending (created if missing).
    ///
    /// # Errors
    ///
    /// The file cannot be opened for writing; the message names it.
    pub(crate) fn open(config: &Config) -> Result<Option<Self>, String> {
        let Some(access_log) = &config.access_log else {
            return Ok(None);
        };
        let path = access_log.get_ref().path.clone();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|err| cannot_write(&path, &err))?;
        Ok(Some(Self { file, path }))
    }

    /// Whether `config`'s access log could be opened, without creating it (`spillway check`):
    /// an existing file opens for appending, a new one's directory exists.
    ///
    /// # Errors
    ///
    /// As [`Opened::open`].
    pub(crate) fn check(config: &Config) -> Result<(), String> {
        let Some(access_log) = &config.access_log else {
            return Ok(());
        };
        let path = &access_log.get_ref().path;
        if path.exists() {
            return OpenOptions::new()
                .append(true)
                .open(path)
                .map(drop)
                .map_err(|err| cannot_write(path, &err));
        }
        let parent = path.parent().filter(|dir| !dir.as_os_str().is_empty());
        match parent {
            Some(dir) if !dir.is_dir() => Err(format!(
                "access_log.path: cannot write `{}`: its directory does not exist",
                path.display()
            )),
            _ => Ok(()),
        }
    }
}

fn cannot_write(path: &Path, err: &std::io::Error) -> String {
    format!("access_log.path: cannot write `{}`: {err}", path.display())
}

/// What the writer thread is sent: a line, or a request to say once every line sent before it
/// is written.
enum Message {
    Line(String),
    Flush(std::sync::mpsc::Sender<()>),
}

/// A running access log: lines go to its writer thread, which ends when the last holder of
/// this (the proxy, and each request still being answered) lets it go.
pub(crate) struct AccessLog {
    messages: SyncSender<Message>,
    counts: Arc<Counts>,
    /// The bytes of the lines waiting for the writer.
    queued: Arc<AtomicUsize>,
    /// Where a line's time is read.
    clock: Clock,
}

/// Where an access log reads its lines' times.
enum Clock {
    /// The rules' spillway, whose clock reads Unix time.
    Rules(spillway::Spillway),
    /// The wall clock when the log started and the monotonic clock then: a line's time is the
    /// first advanced by the second.
    Anchored(u64, tokio::time::Instant),
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog").finish_non_exhaustive()
    }
}

/// The most bytes of lines waiting for the writer: past it (a disk that stalls, lines with
/// large headers), a line is dropped, as past [`QUEUE_LINES`].
pub(crate) const QUEUE_BYTES: usize = 64 * 1024 * 1024;

impl AccessLog {
    /// Starts writing to `opened`, counting in `counts`, its lines' times read on `rules`'
    /// clock where it reads Unix time (`spillway serve`'s: so that a replay of the log cuts
    /// the windows the live rules cut), else on the wall clock.
    ///
    /// # Errors
    ///
    /// The writer thread cannot be started.
    pub(crate) fn start(
        opened: Opened,
        counts: Arc<Counts>,
        rules: &spillway::Spillway,
    ) -> Result<Self, String> {
        let (messages, queue) = std::sync::mpsc::sync_channel(QUEUE_LINES);
        let Opened { file, path } = opened;
        let queued = Arc::new(AtomicUsize::new(0));
        let writer = Writer {
            counts: Arc::clone(&counts),
            queued: Arc::clone(&queued),
        };
        std::thread::Builder::new()
            .name("spillway-access-log".to_owned())
            .spawn(move || writer.run(&queue, file, &path))
            .map_err(|err| format!("cannot start the access log's writer: {err}"))?;
        // A clock that reads a time past 2001-09-09 reads Unix time.
        let clock = if rules.clock().now_nanos() >= 1_000_000_000 * 1_000_000_000 {
            Clock::Rules(rules.clone())
        } else {
            Clock::Anchored(
                crate::unix_time::unix_nanos_now(),
                tokio::time::Instant::now(),
            )
        };
        Ok(Self {
            messages,
            counts,
            queued,
            clock,
        })
    }

    /// Waits until the lines sent so far are written, `within` at most: whether they were.
    /// Blocks.
    pub(crate) fn flush(&self, within: std::time::Duration) -> bool {
        #[allow(clippy::disallowed_methods)] // a deadline for a blocking wait, not a reading
        let deadline = std::time::Instant::now() + within;
        let (done, written) = std::sync::mpsc::channel();
        let mut message = Message::Flush(done);
        loop {
            match self.messages.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) => {
                    #[allow(clippy::disallowed_methods)]
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    message = back;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
        #[allow(clippy::disallowed_methods)]
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        written.recv_timeout(left).is_ok()
    }

    /// The time now, in nanoseconds since the Unix epoch, for a request arriving now: on the
    /// rules' clock, so that a line's time is the time the rules counted it in; else the wall
    /// clock when the log started advanced by the monotonic clock (so the times of one log's
    /// lines never go back, and agree with their durations).
    pub(crate) fn now_nanos(&self) -> u64 {
        match &self.clock {
            Clock::Rules(rules) => rules.clock().now_nanos(),
            Clock::Anchored(wall, then) => {
                let since = tokio::time::Instant::now().saturating_duration_since(*then);
                wall.saturating_add(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
            }
        }
    }

    /// Queues `line` (a JSON object and its newline), or counts it dropped if the writer is
    /// behind.
    fn send(&self, line: String) {
        let bytes = line.len();
        if self.queued.fetch_add(bytes, Ordering::Relaxed) + bytes > QUEUE_BYTES {
            self.queued.fetch_sub(bytes, Ordering::Relaxed);
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.messages.try_send(Message::Line(line)).is_err() {
            self.queued.fetch_sub(bytes, Ordering::Relaxed);
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The writer thread's side of an access log.
struct Writer {
    counts: Arc<Counts>,
    queued: Arc<AtomicUsize>,
}

impl Writer {
    /// Writes each line as it comes, flushing whenever none is waiting, until every sender is
    /// gone.
    fn run(self, queue: &Receiver<Message>, file: File, path: &Path) {
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, file);
        // After a failed write the file may end in part of a line: the next good write starts
        // on a line of its own.
        let mut failing = false;
        let mut flushed = Vec::new();
        while let Ok(first) = queue.recv() {
            let mut lines = 0u64;
            let mut result = Ok(());
            let mut next = Some(first);
            while let Some(message) = next.take() {
                match message {
                    Message::Line(line) => {
                        self.queued.fetch_sub(line.len(), Ordering::Relaxed);
                        lines += 1;
                        if result.is_ok() {
                            if failing && lines == 1 {
                                result = out.write_all(b"\n");
                            }
                            result = result.and_then(|()| out.write_all(line.as_bytes()));
                        }
                    }
                    Message::Flush(done) => flushed.push(done),
                }
                next = queue.try_recv().ok();
            }
            match result.and_then(|()| out.flush()) {
                Ok(()) => {
                    self.counts.written.fetch_add(lines, Ordering::Relaxed);
                    if failing && lines > 0 {
                        tracing::info!(path = %path.display(), "the access log is written again");
                        failing = false;
                    }
                }
                Err(err) => {
                    // The batch's lines are lost (some may be in the file, the last one torn):
                    // counted, and a new buffer taken.
                    self.counts.failed.fetch_add(lines, Ordering::Relaxed);
                    if !failing {
                        tracing::warn!(path = %path.display(), error = %err, "cannot write the access log: its lines are lost until it can");
                        failing = true;
                    }
                    let file = out.into_parts().0;
                    out = std::io::BufWriter::with_capacity(64 * 1024, file);
                }
            }
            for done in flushed.drain(..) {
                let _ = done.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        crate::checked::parse(text, "test.toml").expect("a good file")
    }

    #[test]
    fn lines_reach_the_file_in_order_and_are_counted() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("access.log");
        let text = format!("[access_log]\npath = {:?}\n", path.display().to_string());
        let opened = Opened::open(&config(&text))
            .expect("opens")
            .expect("configured");
        let counts = Arc::new(Counts::default());
        let rules = spillway::Spillway::new_with_clock(spillway::ManualClock::new());
        let log = AccessLog::start(opened, Arc::clone(&counts), &rules).expect("starts");
        for n in 0..1_000 {
            log.send(format!("{{\"n\":{n}}}\n"));
        }
        // Every line sent before the flush is written (or was dropped, the writer behind).
        assert!(log.flush(std::time::Duration::from_secs(60)));
        assert_eq!(counts.read()[0].1 + counts.read()[1].1, 1_000);
        assert_eq!(log.queued.load(Ordering::Relaxed), 0);
        let written = std::fs::read_to_string(&path).expect("the log");
        let numbers: Vec<u64> = written
            .lines()
            .map(|line| line[5..line.len() - 1].parse().expect("a number"))
            .collect();
        assert_eq!(numbers.len() as u64, counts.read()[0].1);
        assert!(numbers.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn a_log_that_cannot_be_written_is_a_clear_error_and_check_creates_nothing() {
        let dir = tempfile::tempdir().expect("a directory");
        let missing = dir.path().join("no/such/dir/access.log");
        let text = format!("[access_log]\npath = {:?}\n", missing.display().to_string());
        let err = Opened::open(&config(&text)).expect_err("no directory");
        assert!(err.starts_with("access_log.path: cannot write"), "{err}");
        let err = Opened::check(&config(&text)).expect_err("no directory");
        assert!(err.contains("its directory does not exist"), "{err}");
        let fresh = dir.path().join("fresh.log");
        let text = format!("[access_log]\npath = {:?}\n", fresh.display().to_string());
        Opened::check(&config(&text)).expect("its directory exists");
        assert!(!fresh.exists(), "check created the file");
    }
}
