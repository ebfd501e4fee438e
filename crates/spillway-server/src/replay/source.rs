//! The records of a replay's logs in time order: each file read line by line (gzip-compressed
//! or not), each line parsed, the malformed ones counted, and lines a little out of order put
//! back in order.

use super::formats::{Parser, Reading};
use super::record::Record;
use super::reorder::Reorder;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const SECOND: u64 = 1_000_000_000;

/// A day, in nanoseconds.
const DAY: u64 = 86_400 * SECOND;

/// Most lines of one second spread together (more are spread in groups of this many).
const MAX_GROUP: usize = 100_000;

/// The longest line read whole: a longer one is malformed, and skipped to its end. Above the
/// longest spillway's own access log writes: a head of at most the largest
/// `max_header_size` (1 MiB), each byte at most three in the log (U+FFFD for one that is not
/// text), written as a header and again as a refusal's key: 6 MiB and the line's other fields.
pub(crate) const MAX_LINE: usize = 8 << 20;

/// A record, the file it was read from, and its line there.
type Located = (Record, Arc<str>, u64);

/// How many malformed or late lines a report shows (each kind is counted in full).
pub(crate) const SHOWN: usize = 5;

/// A line that could not be replayed as it is: where, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LineProblem {
    /// The file.
    pub file: String,
    /// The line's number in it, from 1.
    pub line: u64,
    /// What is wrong with it.
    pub why: String,
}

impl std::fmt::Display for LineProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.why)
    }
}

/// What reading the logs found besides the records.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ReadCounts {
    /// Lines read, blank ones included.
    pub lines: u64,
    /// Lines that were not a request in the format.
    pub malformed: u64,
    /// The first few of them.
    pub malformed_shown: Vec<LineProblem>,
    /// Records that arrived before records already replayed by more than the reordering
    /// window: replayed at the replay's time then, not theirs.
    pub late: u64,
    /// The first few of them.
    pub late_shown: Vec<LineProblem>,
}

/// Why the logs could not be read.
#[derive(Debug)]
pub enum SourceError {
    /// A file could not be opened or read.
    Unreadable {
        /// The file.
        file: String,
        /// Why.
        why: String,
    },
    /// A malformed line, with `--strict`.
    Malformed(LineProblem),
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceError::Unreadable { file, why } => write!(f, "{file}: cannot be read: {why}"),
            SourceError::Malformed(problem) => {
                write!(f, "{problem} (malformed; --strict stops here)")
            }
        }
    }
}

impl std::error::Error for SourceError {}

/// Reads one line into `buf`, holding at most [`MAX_LINE`] bytes and its newline: `None` at
/// the end, else whether it fit (the rest of a longer line is read and dropped).
fn read_capped(reader: &mut dyn BufRead, buf: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    buf.clear();
    let cap = MAX_LINE as u64 + 1;
    let n = Read::take(&mut *reader, cap).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.ends_with(b"\n") || (n as u64) < cap {
        return Ok(Some(true));
    }
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(Some(false));
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => {
                reader.consume(at + 1);
                return Ok(Some(false));
            }
            None => {
                let len = chunk.len();
                reader.consume(len);
            }
        }
    }
}

/// A file's bytes as read, counted into `read` (for the progress bar: compressed bytes of a
/// compressed file).
struct Counted {
    file: File,
    read: Arc<AtomicU64>,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Opens `path`, decompressing it if it starts as gzip does, counting its bytes into `read`.
fn open(path: &Path, read: &Arc<AtomicU64>) -> Result<Box<dyn BufRead>, String> {
    let file = File::open(path).map_err(|err| err.to_string())?;
    let mut file = Counted {
        file,
        read: Arc::clone(read),
    };
    let mut magic = [0u8; 2];
    let mut read = 0;
    while read < 2 {
        match file.read(&mut magic[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(err) => return Err(err.to_string()),
        }
    }
    let head = std::io::Cursor::new(magic[..read].to_vec());
    let whole = head.chain(file);
    if magic[..read] == [0x1f, 0x8b] {
        let decoder = flate2::read::MultiGzDecoder::new(whole);
        Ok(Box::new(BufReader::with_capacity(1 << 16, decoder)))
    } else {
        Ok(Box::new(BufReader::with_capacity(1 << 16, whole)))
    }
}

/// The file being read: its name, its lines, its format's parser, and the last line's number.
struct OpenFile {
    name: Arc<str>,
    reader: Box<dyn BufRead>,
    parser: Parser,
    number: u64,
    /// The arrival of its last record taken.
    last: Option<u64>,
}

/// The records of `files`, in time order within `window` nanoseconds.
pub(crate) struct Source {
    files: std::vec::IntoIter<PathBuf>,
    /// How every file is read.
    reading: Reading,
    strict: bool,
    window: u64,
    current: Option<OpenFile>,
    /// The line being read.
    line: Vec<u8>,
    /// Records read and not yet given, earliest first (by arrival, then by reading order).
    pending: Reorder<Given>,
    /// The records read that ended in the same second, to spread over it.
    second: Vec<Located>,
    /// Records spread, in the order read.
    ready: VecDeque<Located>,
    order: u64,
    /// The latest arrival read so far, and the arrival of the last record given.
    latest: u64,
    given: u64,
    pub(crate) counts: ReadCounts,
    /// Bytes read from the files so far.
    bytes_read: Arc<AtomicU64>,
    /// The files' sizes together (0: unknown).
    pub(crate) bytes_total: u64,
}

/// A record read, with where.
pub(crate) struct Given {
    pub(crate) record: Record,
    file: Arc<str>,
    line: u64,
}

impl Source {
    pub(crate) fn new(files: Vec<PathBuf>, reading: Reading, strict: bool, window: u64) -> Self {
        let bytes_total = (files.iter())
            .filter_map(|file| std::fs::metadata(file).ok())
            .map(|metadata| metadata.len())
            .sum();
        Self {
            bytes_read: Arc::default(),
            bytes_total,
            files: files.into_iter(),
            reading,
            strict,
            window,
            current: None,
            line: Vec::with_capacity(256),
            pending: Reorder::default(),
            second: Vec::new(),
            ready: VecDeque::new(),
            order: 0,
            latest: 0,
            given: 0,
            counts: ReadCounts::default(),
        }
    }

    /// The next record, from the files in turn (`None`: all read). The records of a format
    /// that writes when a request ended to the second (nginx's `$time_local`) are spread over
    /// their second: the `n` lines of a file that ended in one second end at `(2k + 1) / 2n`
    /// of it, in the order logged, and arrived their duration before.
    fn read(&mut self) -> Result<Option<Located>, SourceError> {
        loop {
            if let Some(ready) = self.ready.pop_front() {
                return Ok(Some(ready));
            }
            match self.read_line_record()? {
                Some(((record, file, line), true)) => {
                    let second = record.end_nanos() / SECOND;
                    let same = |(first, name, _): &Located| {
                        first.end_nanos() / SECOND == second && Arc::ptr_eq(name, &file)
                    };
                    // A second's group is spread when the next second starts, or when it is as
                    // large as memory allows (a log of one second's lines is read in pieces).
                    if !self.second.first().is_none_or(same) || self.second.len() >= MAX_GROUP {
                        self.spread();
                    }
                    self.second.push((record, file, line));
                }
                Some((located, false)) => {
                    self.spread();
                    self.ready.push_back(located);
                }
                None if self.second.is_empty() => return Ok(None),
                None => self.spread(),
            }
        }
    }

    /// Spreads the records that ended in one second over it (see [`read`](Self::read)).
    fn spread(&mut self) {
        let n = self.second.len() as u64;
        for (k, (mut record, file, line)) in self.second.drain(..).enumerate() {
            let second = record.end_nanos() / SECOND * SECOND;
            let end = second.saturating_add((2 * k as u64 + 1) * SECOND / (2 * n));
            let took = u64::try_from(record.duration.as_nanos()).unwrap_or(u64::MAX);
            record.start_nanos = end.saturating_sub(took);
            self.ready.push_back((record, file, line));
        }
    }

    /// The next line's record, from the files in turn, and whether its format gives its end
    /// to the second (`None`: all read).
    fn read_line_record(&mut self) -> Result<Option<(Located, bool)>, SourceError> {
        loop {
            if self.current.is_none() {
                let Some(path) = self.files.next() else {
                    return Ok(None);
                };
                let name = path.display().to_string();
                let reader =
                    open(&path, &self.bytes_read).map_err(|why| SourceError::Unreadable {
                        file: name.to_string(),
                        why,
                    })?;
                self.current = Some(OpenFile {
                    name: name.into(),
                    reader,
                    parser: Parser::new(&self.reading),
                    number: 0,
                    last: None,
                });
            }
            let Some(OpenFile {
                name,
                reader,
                parser,
                number,
                last,
            }) = &mut self.current
            else {
                continue;
            };
            let fit = match read_capped(reader, &mut self.line) {
                Ok(None) => {
                    self.current = None;
                    continue;
                }
                Ok(Some(fit)) => fit,
                Err(err) => {
                    return Err(SourceError::Unreadable {
                        file: name.to_string(),
                        why: err.to_string(),
                    })
                }
            };
            *number += 1;
            self.counts.lines += 1;
            let text = match std::str::from_utf8(&self.line) {
                Ok(text) if fit => text,
                _ => {
                    let why = if fit {
                        "not UTF-8".to_owned()
                    } else {
                        format!("longer than {MAX_LINE} bytes")
                    };
                    let problem = LineProblem {
                        file: name.to_string(),
                        line: *number,
                        why,
                    };
                    self.malformed(problem)?;
                    continue;
                }
            };
            match parser.parse(text) {
                // A time more than a day past the line before it is a mistake (a clock, a
                // line of another log): taken, it would end the reordering of every line after.
                Ok(Some(record)) if last.is_some_and(|last| record.start_nanos > last + DAY) => {
                    let problem = LineProblem {
                        file: name.to_string(),
                        line: *number,
                        why: "more than a day after the line before it".to_owned(),
                    };
                    self.malformed(problem)?;
                }
                Ok(Some(record)) => {
                    *last = Some(record.start_nanos);
                    let coarse = parser.ends_to_the_second();
                    return Ok(Some(((record, Arc::clone(name), *number), coarse)));
                }
                Ok(None) => {}
                Err(why) => {
                    let problem = LineProblem {
                        file: name.to_string(),
                        line: *number,
                        why,
                    };
                    self.malformed(problem)?;
                }
            }
        }
    }

    /// Bytes read from the files so far.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    fn malformed(&mut self, problem: LineProblem) -> Result<(), SourceError> {
        if self.strict {
            return Err(SourceError::Malformed(problem));
        }
        self.counts.malformed += 1;
        if self.counts.malformed_shown.len() < SHOWN {
            self.counts.malformed_shown.push(problem);
        }
        Ok(())
    }

    /// The next record in time order: one is given once the latest read is more than the
    /// window past it, or the files are done. A record that arrives before one already given
    /// is counted late, and given at that one's time.
    pub(crate) fn next_record(&mut self) -> Result<Option<Given>, SourceError> {
        loop {
            if let Some(at) = self.pending.peek() {
                if self.latest.saturating_sub(at) > self.window {
                    return Ok(self.give());
                }
            }
            match self.read()? {
                Some((record, file, line)) => {
                    self.latest = self.latest.max(record.start_nanos);
                    self.order += 1;
                    let at = record.start_nanos;
                    let given = Given { record, file, line };
                    self.pending.push(at, self.order, given);
                }
                None => return Ok(self.give()),
            }
        }
    }

    fn give(&mut self) -> Option<Given> {
        let (at, mut given) = self.pending.pop()?;
        let Given { record, file, line } = &mut given;
        if at < self.given {
            self.counts.late += 1;
            if self.counts.late_shown.len() < SHOWN {
                let behind = (self.given - at) as f64 / 1e9;
                self.counts.late_shown.push(LineProblem {
                    file: file.to_string(),
                    line: *line,
                    why: format!("{behind:.3} s before a request already replayed"),
                });
            }
            // It keeps its recorded end: it arrives later, and takes that much less.
            let end = record.end_nanos();
            record.start_nanos = self.given;
            record.duration = Duration::from_nanos(end.saturating_sub(self.given));
        }
        self.given = record.start_nanos;
        Some(given)
    }
}
