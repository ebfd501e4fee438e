//! spillway's access log (`[access_log]`, off by default): one JSON object a line for each
//! request the proxy answers, with what its limits decided, in a form `spillway replay` reads.
//!
//! A thread of its own writes the file, so that no request waits on the disk: a request's line
//! is made when its response has been sent (or abandoned) and queued; past [`QUEUE_LINES`]
//! lines waiting, a line is dropped and counted (`spillway_access_log_lines_total{result=
//! "dropped"}`).

mod entry;
mod headers;

pub(crate) use entry::{Decision, Entry, Pending};

use crate::config::Config;
use http::HeaderName;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The access log's file, opened, and the headers its lines keep: what a configuration needs
/// before [`AccessLog::start`].
#[derive(Debug)]
pub(crate) struct Opened {
    file: File,
    path: PathBuf,
    headers: Vec<HeaderName>,
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
        let headers = headers::logged(config);
        Ok(Some(Self {
            file,
            path,
            headers,
        }))
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

/// A running access log: lines go to its writer thread, which ends when the last holder of
/// this (the proxy, and each request still being answered) lets it go.
#[derive(Debug)]
pub(crate) struct AccessLog {
    lines: SyncSender<String>,
    counts: Arc<Counts>,
    headers: Vec<HeaderName>,
    /// The wall clock when it started (nanoseconds since the Unix epoch), and the monotonic
    /// clock then: a line's time is the first advanced by the second.
    anchor: (u64, tokio::time::Instant),
    /// The writer thread.
    writer: std::thread::JoinHandle<()>,
}

impl AccessLog {
    /// Starts writing to `opened`, counting in `counts`, its lines' times read on `clock`
    /// where it reads Unix time (`spillway serve`'s: so that a replay of the log cuts the
    /// windows the live rules cut), else on the wall clock.
    ///
    /// # Errors
    ///
    /// The writer thread cannot be started.
    pub(crate) fn start(
        opened: Opened,
        counts: Arc<Counts>,
        clock: &dyn spillway::Clock,
    ) -> Result<Self, String> {
        let (lines, queue) = std::sync::mpsc::sync_channel(QUEUE_LINES);
        let Opened {
            file,
            path,
            headers,
        } = opened;
        let writer_counts = Arc::clone(&counts);
        let writer = std::thread::Builder::new()
            .name("spillway-access-log".to_owned())
            .spawn(move || write_lines(&queue, file, &path, &writer_counts))
            .map_err(|err| format!("cannot start the access log's writer: {err}"))?;
        // A clock that reads a time past 2001-09-09 reads Unix time.
        let on_clock = clock.now_nanos();
        let wall = if on_clock >= 1_000_000_000 * 1_000_000_000 {
            on_clock
        } else {
            crate::unix_time::unix_nanos_now()
        };
        let anchor = (wall, tokio::time::Instant::now());
        Ok(Self {
            lines,
            counts,
            headers,
            anchor,
            writer,
        })
    }

    /// Stops taking lines and waits for the writer to write those queued.
    pub(crate) fn close(self) {
        let Self { lines, writer, .. } = self;
        drop(lines);
        if writer.join().is_err() {
            tracing::warn!("the access log's writer failed");
        }
    }

    /// The time of the monotonic instant `at`, in nanoseconds since the Unix epoch: the Unix
    /// time when the log started (on the rules' clock where it reads Unix time), advanced by
    /// the monotonic clock since. So the times of one log's lines never go back and agree with
    /// their durations and with the windows the rules counted in.
    pub(crate) fn wall_nanos(&self, at: tokio::time::Instant) -> u64 {
        let (wall, then) = self.anchor;
        let since = at.saturating_duration_since(then).as_nanos();
        wall.saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
    }

    /// The headers each line keeps.
    pub(crate) fn headers(&self) -> &[HeaderName] {
        &self.headers
    }

    /// Queues `line` (a JSON object and its newline), or counts it dropped if the writer is
    /// behind.
    fn send(&self, line: String) {
        match self.lines.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The writer thread: writes each line as it comes, flushing whenever none is waiting, until
/// every sender is gone.
fn write_lines(queue: &Receiver<String>, file: File, path: &Path, counts: &Counts) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, file);
    let mut pending = 0u64;
    let mut failing = false;
    while let Ok(line) = queue.recv() {
        let mut result = out.write_all(line.as_bytes());
        pending += 1;
        while result.is_ok() {
            match queue.try_recv() {
                Ok(line) => {
                    result = out.write_all(line.as_bytes());
                    pending += 1;
                }
                Err(_) => break,
            }
        }
        let result = result.and_then(|()| out.flush());
        match result {
            Ok(()) => {
                counts.written.fetch_add(pending, Ordering::Relaxed);
                if failing {
                    tracing::info!(path = %path.display(), "the access log is written again");
                    failing = false;
                }
            }
            Err(err) => {
                // The lines in the buffer are lost with it: counted, and a new buffer taken.
                counts.failed.fetch_add(pending, Ordering::Relaxed);
                if !failing {
                    tracing::warn!(path = %path.display(), error = %err, "cannot write the access log: its lines are lost until it can");
                    failing = true;
                }
                let file = out.into_parts().0;
                out = std::io::BufWriter::with_capacity(64 * 1024, file);
            }
        }
        pending = 0;
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
        let clock = spillway::ManualClock::new();
        let log = AccessLog::start(opened, Arc::clone(&counts), &clock).expect("starts");
        for n in 0..1_000 {
            log.send(format!("{{\"n\":{n}}}\n"));
        }
        // The writer ends when its last sender is gone, after the lines queued before.
        log.close();
        assert_eq!(counts.read()[0].1 + counts.read()[1].1, 1_000);
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
