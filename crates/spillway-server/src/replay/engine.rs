//! Runs a log's records through a configuration's routes on a paused tokio clock: each request
//! arrives at its recorded time and, if admitted, holds its places for its recorded duration,
//! ending with its recorded status, so that concurrency limits, breakers and adaptive limits
//! see what the service did.

use super::report::Tallies;
use super::source::{Source, SourceError};
use crate::config::Config;
use crate::proxy::{Proxy, ReplayStacks, Replayed};
use spillway::Clock;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The replay's clock: wall-clock nanoseconds of the log, on tokio's paused time, so that
/// the engine's windows fall on the log's seconds.
#[derive(Debug, Clone, Copy)]
struct ReplayClock {
    origin: Instant,
    base: u64,
}

impl ReplayClock {
    fn at(&self, nanos: u64) -> Instant {
        self.origin + Duration::from_nanos(nanos.saturating_sub(self.base))
    }
}

impl Clock for ReplayClock {
    fn now_nanos(&self) -> u64 {
        let elapsed = Instant::now().duration_since(self.origin).as_nanos();
        self.base
            .saturating_add(u64::try_from(elapsed).unwrap_or(u64::MAX))
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

/// Replays `source`'s records through `config` (checked, and made fit to replay), on the
/// current runtime, whose time must be paused.
pub(crate) async fn run(
    config: &Config,
    source: &mut Source,
    hash_keys: bool,
) -> Result<Tallies, EngineError> {
    let empty = Tallies::new(hash_keys);
    let Some(mut record) = source.next_record()? else {
        return Ok(empty);
    };
    let tallies = Arc::new(Mutex::new(empty));
    let clock = ReplayClock {
        origin: Instant::now(),
        base: record.start_nanos,
    };
    let spillway = spillway::Spillway::new_with_clock(clock);
    let proxy = Proxy::new(config, spillway).map_err(EngineError::Setup)?;
    crate::server::apply_rules(&proxy, config).map_err(EngineError::Setup)?;
    let stacks = Arc::new(ReplayStacks::new(&proxy));
    let open = Arc::new(AtomicU64::new(0));
    loop {
        tokio::time::sleep_until(clock.at(record.start_nanos)).await;
        open.fetch_add(1, Ordering::Relaxed);
        let (stacks, tallies, open) =
            (Arc::clone(&stacks), Arc::clone(&tallies), Arc::clone(&open));
        tokio::spawn(async move {
            let at = record.start_nanos;
            let peer = SocketAddr::new(record.peer, 0);
            let replayed = stacks.replay(record.request(), peer, record.status).await;
            let lock = || {
                tallies
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            };
            match replayed {
                Replayed::Early { resource, outcome } => lock().early(&resource, outcome, at),
                Replayed::Refused {
                    resource,
                    rule,
                    kind,
                    key,
                } => {
                    let rule = rule.as_deref().unwrap_or(kind);
                    lock().refused(&resource, at, rule, kind, key.as_deref());
                }
                Replayed::MissingKey { resource } => {
                    lock().refused(&resource, at, "missing_key", "keyed", None);
                }
                Replayed::Admitted {
                    resource,
                    shadowed,
                    held,
                } => {
                    let shadow = shadowed
                        .as_ref()
                        .map(|s| (s.rule.as_deref().unwrap_or(s.kind), s.kind));
                    lock().admitted(&resource, at, shadow);
                    tokio::time::sleep_until(clock.at(record.end_nanos())).await;
                    held.finish().await;
                }
            }
            open.fetch_sub(1, Ordering::Relaxed);
        });
        record = match source.next_record()? {
            Some(next) => next,
            None => break,
        };
    }
    // The calls still running end at their recorded times.
    while open.load(Ordering::Relaxed) > 0 {
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
