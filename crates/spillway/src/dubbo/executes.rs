//! Dubbo's `ExecuteLimitFilter`: a concurrency limit per key that refuses at once when full.

use super::key_map::KeyMap;
use crate::block::{BlockError, BlockKind};
use crate::flow::try_increment;
use crate::sync::{AtomicU64, Ordering};
use std::fmt;
use std::sync::Arc;

/// Default cap on keys an [`ExecuteLimiter`] tracks.
pub const DEFAULT_MAX_EXECUTE_KEYS: usize = 10_000;

/// Dubbo's `executes`: at most `max` calls in flight per key (a service, or a service and
/// method), refusing at once when full. Dubbo's `RpcStatus.beginCount`: the check and the count
/// are one compare-and-swap, and a `max` of 0 means unlimited (still counted).
///
/// The [`ExecutePermit`] returned releases the place when dropped, however the call ends (return,
/// error, panic, or a dropped future). Keys are capped; a new key past the cap first evicts keys
/// nobody holds (nothing in flight, no handle: lossless), and is refused (counted) if none is.
/// For the hot path, resolve a key once with [`key`](Self::key).
///
/// # Examples
///
/// ```
/// use spillway::dubbo::ExecuteLimiter;
///
/// let executes = ExecuteLimiter::new();
/// let first = executes.try_acquire("OrderService.create", 1)?;
/// assert!(executes.try_acquire("OrderService.create", 1).is_err());
/// drop(first);
/// assert!(executes.try_acquire("OrderService.create", 1).is_ok());
/// # Ok::<(), spillway::BlockError>(())
/// ```
///
/// # Memory ordering
///
/// A key's in-flight count is one atomic, taken by compare-and-swap and released by `fetch_sub`,
/// both `AcqRel`: a release happens before the acquire that reuses its place.
pub struct ExecuteLimiter {
    keys: KeyMap<AtomicU64>,
    key_overflows: AtomicU64,
}

/// A place taken under an [`ExecuteLimiter`]; dropping it gives the place back.
#[derive(Debug)]
#[must_use = "the place is given back when the permit is dropped"]
pub struct ExecutePermit {
    in_flight: Arc<AtomicU64>,
}

impl Drop for ExecutePermit {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A pre-resolved key of an [`ExecuteLimiter`] (see [`ExecuteLimiter::key`]).
#[derive(Debug, Clone)]
pub struct ExecuteKey {
    /// The key's interned number (see `intern`), for blocks.
    name: u32,
    in_flight: Arc<AtomicU64>,
}

/// A place taken through an [`ExecuteKey`]; dropping it gives the place back.
#[derive(Debug)]
#[must_use = "the place is given back when the permit is dropped"]
pub struct ExecuteKeyPermit<'a> {
    in_flight: &'a AtomicU64,
}

impl Drop for ExecuteKeyPermit<'_> {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ExecuteKey {
    /// Takes a place if fewer than `max` are in flight (`max` 0: unlimited), with no lookup and
    /// no reference counting.
    ///
    /// # Errors
    ///
    /// A [`BlockKind::Executes`] error (observed = in flight, threshold = `max`) when full.
    #[inline]
    pub fn try_acquire(&self, max: u32) -> Result<ExecuteKeyPermit<'_>, BlockError> {
        match take(&self.in_flight, max) {
            Ok(()) => Ok(ExecuteKeyPermit {
                in_flight: &self.in_flight,
            }),
            Err(seen) => Err(full_key(self.name, seen)),
        }
    }

    /// Calls in flight for this key.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// Dubbo's `beginCount`: one place on `in_flight` if fewer than `max` (0: unlimited) are taken;
/// otherwise the count seen and the effective max.
#[inline]
fn take(in_flight: &AtomicU64, max: u32) -> Result<(), (u64, u32)> {
    let max = if max == 0 { u32::MAX } else { max };
    try_increment(in_flight, |current| current < u64::from(max)).map_err(|seen| (seen, max))
}

/// The refusal of a full key (cold: kept out of the acquire path).
#[cold]
#[inline(never)]
fn full(key: &str, (current, max): (u64, u32)) -> BlockError {
    BlockError::owned(BlockKind::Executes, key, current as f64, f64::from(max))
}

/// [`full`] for a key whose name has interned number `key`.
#[cold]
#[inline(never)]
fn full_key(key: u32, (current, max): (u64, u32)) -> BlockError {
    BlockError::new(BlockKind::Executes, key, current as f64, f64::from(max))
}

impl ExecuteLimiter {
    /// A limiter tracking up to [`DEFAULT_MAX_EXECUTE_KEYS`] keys.
    pub fn new() -> Self {
        Self::with_max_keys(DEFAULT_MAX_EXECUTE_KEYS)
    }

    /// A limiter tracking up to `max_keys` keys.
    pub fn with_max_keys(max_keys: usize) -> Self {
        Self {
            keys: KeyMap::new(max_keys),
            key_overflows: AtomicU64::new(0),
        }
    }

    /// Takes a place for a call of `key` if fewer than `max` are in flight (`max` 0: unlimited).
    ///
    /// # Errors
    ///
    /// A [`BlockKind::Executes`] error (observed = in flight, threshold = `max`) when full, or when
    /// a new key meets the full key cap.
    pub fn try_acquire(&self, key: &str, max: u32) -> Result<ExecutePermit, BlockError> {
        let in_flight = self.counter(key)?;
        match take(&in_flight, max) {
            Ok(()) => Ok(ExecutePermit { in_flight }),
            Err(seen) => Err(full(key, seen)),
        }
    }

    /// A pre-resolved handle on `key`: its acquires skip the key lookup and touch no reference
    /// count (the handle keeps the key from being evicted). The key's name is kept for the life
    /// of the process, for blocks that name it without allocating.
    ///
    /// # Errors
    ///
    /// A [`BlockKind::Executes`] error when `key` is new and the key cap is full.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::dubbo::ExecuteLimiter;
    ///
    /// let executes = ExecuteLimiter::new();
    /// let create = executes.key("OrderService.create")?;
    /// let permit = create.try_acquire(1)?;
    /// assert!(create.try_acquire(1).is_err());
    /// drop(permit);
    /// assert_eq!(create.in_flight(), 0);
    /// # Ok::<(), spillway::BlockError>(())
    /// ```
    pub fn key(&self, key: &str) -> Result<ExecuteKey, BlockError> {
        Ok(ExecuteKey {
            name: crate::intern::intern_numbered(key).number,
            in_flight: self.counter(key)?,
        })
    }

    fn counter(&self, key: &str) -> Result<Arc<AtomicU64>, BlockError> {
        self.keys
            .get_or_insert(key, || AtomicU64::new(0))
            .map_err(|_| {
                self.key_overflows.fetch_add(1, Ordering::Relaxed);
                let cap = self.keys.max_keys() as f64;
                BlockError::owned(BlockKind::Executes, key, cap, cap).without_quota()
            })
    }

    /// Calls of `key` in flight.
    pub fn in_flight(&self, key: &str) -> u64 {
        self.keys
            .with(key, |counter| counter.load(Ordering::Acquire))
            .unwrap_or(0)
    }

    /// Calls refused because a new key met the full key cap.
    pub fn key_overflows(&self) -> u64 {
        self.key_overflows.load(Ordering::Relaxed)
    }
}

impl Default for ExecuteLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ExecuteLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecuteLimiter")
            .field("keys", &self.keys.len())
            .field("max_keys", &self.keys.max_keys())
            .finish_non_exhaustive()
    }
}
