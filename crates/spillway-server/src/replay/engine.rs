//! Runs a log's records through a configuration's routes on a paused tokio clock: each request
//! arrives at its recorded time and, if admitted, holds its places for its recorded duration,
//! ending with its recorded status, so that concurrency limits, breakers and adaptive limits
//! see what the service did.

use super::report::Tallies;
use super::source::{Source, SourceError};
use crate::config::Config;
use crate::proxy::{Held, Proxy, ReplayStacks, Replayed};
use spillway::Clock;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The replay's clock: wall-clock nanoseconds of the log, so that the engine's windows fall
/// on the log's seconds. The engine sets it to each event's time; while requests wait (as
/// tasks on tokio's paused time, woken by its timers), it reads tokio's time too, which the
/// engine then moves on through their timers.
#[derive(Debug, Clone)]
struct ReplayClock {
    /// The log's time of tokio's `origin`.
    origin: Instant,
    base: u64,
    /// The time the engine set last.
    set: Arc<AtomicU64>,
    /// Requests waiting as tasks.
    waiting: Arc<AtomicU64>,
}

impl ReplayClock {
    /// tokio's instant of the log's time `nanos`.
    fn at(&self, nanos: u64) -> Instant {
        self.origin + Duration::from_nanos(nanos.saturating_sub(self.base))
    }

    /// The log's time on tokio's clock.
    fn on_tokio(&self) -> u64 {
        let elapsed = Instant::now().duration_since(self.origin).as_nanos();
        (self.base).saturating_add(u64::try_from(elapsed).unwrap_or(u64::MAX))
    }
}

impl Clock for ReplayClock {
    fn now_nanos(&self) -> u64 {
        let set = self.set.load(Ordering::Relaxed);
        if self.waiting.load(Ordering::Relaxed) == 0 {
            set
        } else {
            set.max(self.on_tokio())
        }
    }
}

/// Why a replay stopped.
#[derive(Debug)]
pub enum EngineError {
    /// The logs could not be read (or, with `--strict`, a line was malformed).
    Source(SourceError),
    /// The configuration could not be set up (a file it names, a rule the engine refused).
    Setup(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Source(err) => err.fmt(f),
            EngineError::Setup(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for EngineError {}

impl From<SourceError> for EngineError {
    fn from(err: SourceError) -> Self {
        EngineError::Source(err)
    }
}

/// An admitted call held until its recorded end, in the heap of such calls (ordered by the
/// key beside it).
struct HeldCall(Held);

impl PartialEq for HeldCall {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for HeldCall {}
impl PartialOrd for HeldCall {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeldCall {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// Counts what became of a request that arrived at `at`: the admitted call to hold, if it was
/// admitted.
fn note(tallies: &Mutex<Tallies>, replayed: Replayed, at: u64) -> Option<Held> {
    let mut tallies = tallies
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match replayed {
        Replayed::Early { resource, outcome } => tallies.early(&resource, outcome, at),
        Replayed::Refused {
            resource,
            rule,
            kind,
            key,
        } => {
            let rule = rule.as_deref().unwrap_or(kind);
            tallies.refused(&resource, at, rule, kind, key.as_deref());
        }
        Replayed::MissingKey { resource } => {
            tallies.refused(&resource, at, "missing_key", "keyed", None);
        }
        Replayed::Admitted {
            resource,
            shadowed,
            held,
        } => {
            let shadow = shadowed
                .as_ref()
                .map(|s| (s.rule.as_deref().unwrap_or(s.kind), s.kind));
            tallies.admitted(&resource, at, shadow);
            return Some(held);
        }
    }
    None
}

/// Moves the replay's clock on to `nanos` (never back), and tokio's paused time with it
/// exactly: while requests wait (in a queue, for a place), through every timer of theirs due
/// before it, in order; then the rest of the way at once. tokio's timers fire on whole
/// milliseconds, rounded up: a sleep to a millisecond before lands at the time or before it,
/// and the rest is advanced exactly.
async fn move_to(clock: &ReplayClock, nanos: u64) {
    let at = clock.at(nanos);
    if clock.waiting.load(Ordering::Relaxed) > 0 {
        if let Some(before) = at.checked_sub(Duration::from_millis(1)) {
            tokio::time::sleep_until(before).await;
        }
    }
    let now = Instant::now();
    if at > now {
        // With nothing waiting on tokio's timers, its clock is moved without a turn of the
        // scheduler: `advance` moves it at its first poll, then only yields (checked: if it
        // did not move, it is awaited).
        let unwaited = clock.waiting.load(Ordering::Relaxed) == 0;
        if !unwaited
            || futures_util::FutureExt::now_or_never(tokio::time::advance(at - now)).is_some()
            || Instant::now() < at
        {
            let now = Instant::now();
            if at > now {
                tokio::time::advance(at - now).await;
            }
        }
    }
    clock.set.fetch_max(nanos, Ordering::Relaxed);
}

/// Moves the replay's clock on to `nanos` for a call's end: with no request waiting, nothing
/// on tokio's time runs or reads it before the next arrival (a call's end reads the rules'
/// clock only), so tokio's time is moved at that arrival; otherwise as [`move_to`].
async fn end_at(clock: &ReplayClock, nanos: u64) {
    if clock.waiting.load(Ordering::Relaxed) > 0 {
        move_to(clock, nanos).await;
    } else {
        clock.set.fetch_max(nanos, Ordering::Relaxed);
    }
}

/// Replays `source`'s records through `config` (checked, and made fit to replay), on the
/// current runtime, whose time must be paused.
pub(crate) async fn run(
    config: &Config,
    source: &mut Source,
    hash_keys: bool,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<Tallies, EngineError> {
    let empty = Tallies::new(hash_keys);
    let Some(mut given) = source.next_record()? else {
        return Ok(empty);
    };
    let tallies = Arc::new(Mutex::new(empty));
    let waiting = Arc::new(AtomicU64::new(0));
    let clock = ReplayClock {
        origin: Instant::now(),
        base: given.record.start_nanos,
        set: Arc::new(AtomicU64::new(given.record.start_nanos)),
        waiting: Arc::clone(&waiting),
    };
    // The system rules' CPU and load readings are unknown: the replaying machine's would say
    // nothing of the service's.
    let spillway = spillway::Spillway::builder()
        .clock(clock.clone())
        .system_probe(spillway::system::ManualProbe::new())
        .build();
    let proxy = Proxy::new(config, spillway).map_err(EngineError::Setup)?;
    crate::server::apply_rules(&proxy, config).map_err(EngineError::Setup)?;
    let stacks = Arc::new(ReplayStacks::new(&proxy));
    // Requests that wait (in a queue, for an `actives` place, paced) run as tasks of their
    // own; the others are decided at once, and the admitted ones are held here until their
    // recorded end, earliest first.
    let mut holds: BinaryHeap<Reverse<(u64, u64, Box<HeldCall>)>> = BinaryHeap::new();
    let (mut order, mut replayed) = (0u64, 0u64);
    loop {
        let record = &mut given.record;
        let at = record.start_nanos;
        // Calls that end before this one arrives end first, each at its time.
        while let Some(Reverse((end, _, _))) = holds.peek() {
            if *end > at {
                break;
            }
            let Some(Reverse((end, _, call))) = holds.pop() else {
                break;
            };
            let HeldCall(held) = *call;
            end_at(&clock, end).await;
            held.finish().await;
        }
        move_to(&clock, at).await;
        let peer = SocketAddr::new(record.peer, 0);
        let (status, took) = (record.status, record.duration);
        let call = {
            let (stacks, request) = (Arc::clone(&stacks), record.take_request());
            async move { stacks.replay(request, peer, status, took).await }
        };
        let mut call = Box::pin(call);
        match futures_util::FutureExt::now_or_never(call.as_mut()) {
            Some(replayed) => {
                if let Some(held) = note(&tallies, replayed, at) {
                    let hold = u64::try_from(held.hold().as_nanos()).unwrap_or(u64::MAX);
                    order += 1;
                    let end = at.saturating_add(hold);
                    holds.push(Reverse((end, order, Box::new(HeldCall(held)))));
                }
            }
            None => {
                waiting.fetch_add(1, Ordering::Relaxed);
                let (tallies, waiting) = (Arc::clone(&tallies), Arc::clone(&waiting));
                tokio::spawn(async move {
                    if let Some(held) = note(&tallies, call.await, at) {
                        // Admitted after its wait: the upstream has it from now, for as long
                        // as it took (or as the proxy would wait).
                        tokio::time::sleep(held.hold()).await;
                        held.finish().await;
                    }
                    waiting.fetch_sub(1, Ordering::Relaxed);
                });
            }
        }
        replayed += 1;
        if replayed % 8192 == 0 {
            if let Some(progress) = progress {
                progress.set_position(source.bytes_read());
            }
        }
        given = match source.next_record()? {
            Some(next) => next,
            None => break,
        };
    }
    // The calls still running end at their recorded times.
    while let Some(Reverse((end, _, call))) = holds.pop() {
        let HeldCall(held) = *call;
        end_at(&clock, end).await;
        held.finish().await;
    }
    while waiting.load(Ordering::Relaxed) > 0 {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    drop(stacks);
    let tallies = Arc::try_unwrap(tallies)
        .map(|mutex| {
            mutex
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        })
        .unwrap_or_else(|shared| {
            std::mem::take(
                &mut shared
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            )
        });
    Ok(tallies)
}
