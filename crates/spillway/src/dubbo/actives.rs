//! Dubbo's `ActiveLimitFilter`: a concurrency limit per key where a caller over the limit waits,
//! up to a timeout, for a slot.

mod slots;
mod wait;

#[cfg(all(test, spillway_loom))]
mod loom_slots;
#[cfg(all(test, not(spillway_loom)))]
mod tests;

pub use wait::{ActivePermit, ActiveWait};

use super::key_map::KeyMap;
use crate::block::{BlockError, BlockKind};
use crate::clock::{AnyClock, Clock, SystemClock};
use crate::sync::{AtomicU64, Ordering};
use slots::{Slots, Take};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Default cap on callers waiting per key of an [`ActiveLimiter`].
pub const DEFAULT_MAX_ACTIVE_WAITERS: u32 = 1_024;

/// Default cap on keys an [`ActiveLimiter`] tracks.
pub const DEFAULT_MAX_ACTIVE_KEYS: usize = 10_000;

/// Dubbo's `actives`: at most `max` calls in flight per key (a service, or a service and method),
/// where a caller over the limit waits up to its timeout for a slot.
///
/// Where Dubbo waits on a monitor (`synchronized`, `wait`, `notify`: a thread per waiter, no
/// order, and a `notify` that a timed-out waiter can swallow), this limiter keeps a queue:
///
/// - **FIFO.** Waiters are served oldest first, and a newcomer never takes a slot while anyone
///   waits. A released slot is handed straight to the oldest waiter, so nobody can take it in
///   between.
/// - **Bounded.** At most `max_waiters` wait per key (default [`DEFAULT_MAX_ACTIVE_WAITERS`]);
///   beyond that a caller is refused at once with [`BlockKind::ActivesQueueFull`].
/// - **Blocking and async.** [`acquire`](Self::acquire) blocks the thread (parking it through the
///   limiter's [`Clock`], so a [`ManualClock`](crate::ManualClock) makes it instant);
///   [`acquire_or_queue`](Self::acquire_or_queue) returns an [`ActiveWait`] future that any
///   executor can await, and `spillway_tower::acquire_active` awaits it on a tokio timer.
/// - **Nothing lost.** A waiter that times out or is dropped leaves the queue; if a slot was
///   handed to it in the meantime, the slot goes on to the next waiter.
/// - **Explained.** A refusal after waiting is a [`BlockKind::Actives`] error that says how long
///   the caller waited ([`BlockError::waited`]), the calls in flight and the limit.
///
/// Like Dubbo, `max` comes with each call and 0 means unlimited (counted, never refused). Waiters
/// with different `max` for one key keep their order: the oldest is served first, when the calls
/// in flight drop below its own `max`. Keys are capped as [`ExecuteLimiter`](super::ExecuteLimiter)'s
/// are (lossless eviction of keys nobody holds).
///
/// # Examples
///
/// ```
/// use spillway::dubbo::ActiveLimiter;
/// use spillway::{BlockKind, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let actives = ActiveLimiter::new_with_clock(clock.clone());
/// let first = actives.acquire("OrderService.create", 1, Duration::from_secs(1))?;
/// // Full: the next caller waits its full second (on a manual clock, instantly) and gives up.
/// let err = actives.acquire("OrderService.create", 1, Duration::from_secs(1)).unwrap_err();
/// assert_eq!(err.kind(), BlockKind::Actives);
/// assert_eq!(err.waited(), Some(Duration::from_secs(1)));
/// assert_eq!((err.observed(), err.threshold()), (1.0, 1.0));
/// drop(first);
/// assert!(actives.acquire("OrderService.create", 1, Duration::from_secs(1)).is_ok());
/// # Ok::<(), spillway::BlockError>(())
/// ```
///
/// # Memory ordering
///
/// A key's calls in flight and waiters share one atomic word, changed by compare-and-swap
/// (`AcqRel`). Joining the queue, handing a slot to a waiter and leaving the queue happen under
/// the key's mutex; the waiter count in the word changes only under it. A grant sets the
/// waiter's flag (`Release`) under the mutex; the waiter reads it with `Acquire`.
pub struct ActiveLimiter {
    clock: AnyClock,
    max_waiters: u32,
    keys: KeyMap<KeyState>,
    key_overflows: AtomicU64,
}

/// Builds an [`ActiveLimiter`] (see [`ActiveLimiter::builder`]).
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ActiveLimiterBuilder {
    clock: AnyClock,
    max_waiters: u32,
    max_keys: usize,
}

impl ActiveLimiterBuilder {
    /// Callers allowed to wait per key (default [`DEFAULT_MAX_ACTIVE_WAITERS`]); 0 means nobody
    /// waits and a full key refuses at once.
    pub fn max_waiters(mut self, max_waiters: u32) -> Self {
        self.max_waiters = max_waiters;
        self
    }

    /// Keys tracked at most (default [`DEFAULT_MAX_ACTIVE_KEYS`]).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The clock that times waits (default [`SystemClock`]).
    pub fn clock<C: Clock>(mut self, clock: C) -> Self {
        self.clock = AnyClock::from_clock(clock);
        self
    }

    /// The limiter.
    pub fn build(self) -> ActiveLimiter {
        ActiveLimiter {
            clock: self.clock,
            max_waiters: self.max_waiters,
            keys: KeyMap::new(self.max_keys),
            key_overflows: AtomicU64::new(0),
        }
    }
}

/// One key: its name (for errors) and its slots.
#[derive(Debug)]
struct KeyState {
    name: Box<str>,
    slots: Slots,
}

/// A pre-resolved key of an [`ActiveLimiter`] (see [`ActiveLimiter::key`]): its calls skip the
/// key lookup. Cheap to clone; it keeps the key from being evicted.
#[derive(Debug, Clone)]
pub struct ActiveKey {
    state: Arc<KeyState>,
    clock: AnyClock,
    max_waiters: u32,
}

/// A key's state, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActiveState {
    /// Calls holding a slot.
    pub in_flight: u32,
    /// Callers waiting for one.
    pub waiters: u32,
}

/// The outcome of [`ActiveKey::acquire_or_queue`]: a slot now, or a place in the queue.
#[derive(Debug)]
#[must_use = "a ready permit or a queued wait holds its place until dropped"]
pub enum ActiveAdmission {
    /// A slot was free.
    Ready(ActivePermit),
    /// The caller is in the queue: await the [`ActiveWait`] (under a timer), or block on
    /// [`ActiveWait::wait`].
    Queued(ActiveWait),
}

impl ActiveLimiter {
    /// A limiter on the [`SystemClock`] with the default caps.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A limiter on `clock` with the default caps.
    pub fn new_with_clock<C: Clock>(clock: C) -> Self {
        Self::builder().clock(clock).build()
    }

    /// A builder for the caps and the clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::dubbo::ActiveLimiter;
    ///
    /// let actives = ActiveLimiter::builder().max_waiters(64).max_keys(1_000).build();
    /// assert!(actives.try_acquire("OrderService.create", 10).is_ok());
    /// ```
    pub fn builder() -> ActiveLimiterBuilder {
        ActiveLimiterBuilder {
            clock: AnyClock::from_clock(SystemClock::new()),
            max_waiters: DEFAULT_MAX_ACTIVE_WAITERS,
            max_keys: DEFAULT_MAX_ACTIVE_KEYS,
        }
    }

    /// A pre-resolved handle on `key`.
    ///
    /// # Errors
    ///
    /// A [`BlockKind::Actives`] error when `key` is new and every tracked key is held (observed
    /// and threshold: the key cap).
    pub fn key(&self, key: &str) -> Result<ActiveKey, BlockError> {
        let state = self
            .keys
            .get_or_insert(key, || KeyState {
                name: key.into(),
                slots: Slots::new(),
            })
            .map_err(|_| {
                self.key_overflows.fetch_add(1, Ordering::Relaxed);
                let cap = self.keys.max_keys() as f64;
                BlockError::owned(BlockKind::Actives, key, cap, cap).without_quota()
            })?;
        Ok(ActiveKey {
            state,
            clock: self.clock.clone(),
            max_waiters: self.max_waiters,
        })
    }

    /// Takes a slot of `key` only if one is free now and nobody waits (see
    /// [`ActiveKey::try_acquire`]).
    ///
    /// # Errors
    ///
    /// As [`ActiveKey::try_acquire`], or when the key cap is full.
    pub fn try_acquire(&self, key: &str, max: u32) -> Result<ActivePermit, BlockError> {
        self.key(key)?.try_acquire(max)
    }

    /// Takes a slot of `key`, blocking up to `timeout` for one (see [`ActiveKey::acquire`]).
    ///
    /// # Errors
    ///
    /// As [`ActiveKey::acquire`], or when the key cap is full.
    pub fn acquire(
        &self,
        key: &str,
        max: u32,
        timeout: Duration,
    ) -> Result<ActivePermit, BlockError> {
        self.key(key)?.acquire(max, timeout)
    }

    /// Takes a slot of `key` or joins its queue (see [`ActiveKey::acquire_or_queue`]).
    ///
    /// # Errors
    ///
    /// As [`ActiveKey::acquire_or_queue`], or when the key cap is full.
    pub fn acquire_or_queue(
        &self,
        key: &str,
        max: u32,
        timeout: Duration,
    ) -> Result<ActiveAdmission, BlockError> {
        self.key(key)?.acquire_or_queue(max, timeout)
    }

    /// `key`'s calls in flight and waiters, if the key is tracked.
    pub fn state(&self, key: &str) -> Option<ActiveState> {
        self.keys.with(key, |state| state_of(&state.slots))
    }

    /// Calls refused because a new key met the full key cap.
    pub fn key_overflows(&self) -> u64 {
        self.key_overflows.load(Ordering::Relaxed)
    }
}

impl Default for ActiveLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ActiveLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActiveLimiter")
            .field("keys", &self.keys.len())
            .field("max_keys", &self.keys.max_keys())
            .field("max_waiters", &self.max_waiters)
            .finish_non_exhaustive()
    }
}

fn state_of(slots: &Slots) -> ActiveState {
    ActiveState {
        in_flight: slots.in_flight(),
        waiters: slots.waiters(),
    }
}

impl ActiveKey {
    /// Takes a slot if fewer than `max` calls hold one (`max` 0: unlimited) and nobody waits: a
    /// newcomer never takes a slot from a waiter.
    ///
    /// # Errors
    ///
    /// A [`BlockKind::Actives`] error (observed = in flight, threshold = `max`, no wait) when no
    /// slot is free to take.
    pub fn try_acquire(&self, max: u32) -> Result<ActivePermit, BlockError> {
        match self.state.slots.try_take(max) {
            Ok(()) => Ok(self.permit()),
            Err(in_flight) => Err(self.refusal(in_flight, max)),
        }
    }

    /// Takes a slot, blocking the thread up to `timeout` (on the limiter's clock) for one;
    /// Dubbo's `ActiveLimitFilter`. A zero `timeout` never waits.
    ///
    /// # Errors
    ///
    /// A [`BlockKind::Actives`] error when no slot came within `timeout`, with the time waited
    /// ([`BlockError::waited`]), the calls in flight and `max`; a
    /// [`BlockKind::ActivesQueueFull`] error when the queue was full.
    pub fn acquire(&self, max: u32, timeout: Duration) -> Result<ActivePermit, BlockError> {
        match self.acquire_or_queue(max, timeout)? {
            ActiveAdmission::Ready(permit) => Ok(permit),
            ActiveAdmission::Queued(wait) => wait.wait(),
        }
    }

    /// Takes a slot if one is free now and nobody waits; otherwise joins the back of the queue,
    /// to wait until the limiter's clock reaches now + `timeout`. Nothing blocks here: the
    /// [`ActiveWait`] returned is a future (cancellation-safe: dropping it leaves the queue) and
    /// can also block the thread ([`ActiveWait::wait`]). A zero `timeout` never queues.
    ///
    /// # Errors
    ///
    /// A [`BlockKind::ActivesQueueFull`] error (observed = waiters, threshold = the cap) when the
    /// queue is full; a [`BlockKind::Actives`] error (waited zero) when `timeout` is zero and no
    /// slot is free.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::dubbo::{ActiveAdmission, ActiveLimiter};
    /// use std::time::Duration;
    ///
    /// let actives = ActiveLimiter::new();
    /// let key = actives.key("OrderService.create")?;
    /// let held = key.try_acquire(1)?;
    /// let ActiveAdmission::Queued(wait) = key.acquire_or_queue(1, Duration::from_secs(1))? else {
    ///     unreachable!("the only slot is held");
    /// };
    /// assert_eq!(key.state().waiters, 1);
    /// drop(held); // handed straight to the waiter
    /// let permit = wait.wait()?; // ready: does not block
    /// assert_eq!((key.state().in_flight, key.state().waiters), (1, 0));
    /// # drop(permit);
    /// # Ok::<(), spillway::BlockError>(())
    /// ```
    pub fn acquire_or_queue(
        &self,
        max: u32,
        timeout: Duration,
    ) -> Result<ActiveAdmission, BlockError> {
        if timeout.is_zero() {
            return match self.state.slots.try_take(max) {
                Ok(()) => Ok(ActiveAdmission::Ready(self.permit())),
                Err(in_flight) => Err(self.refusal(in_flight, max).with_waited(Duration::ZERO)),
            };
        }
        let started = self.clock.now_nanos();
        match self.state.slots.take_or_queue(max, self.max_waiters) {
            Take::Taken => Ok(ActiveAdmission::Ready(self.permit())),
            Take::Queued(waiter) => Ok(ActiveAdmission::Queued(ActiveWait::new(
                self.clone(),
                waiter,
                max,
                started,
                timeout,
            ))),
            Take::QueueFull(waiters) => Err(BlockError::owned(
                BlockKind::ActivesQueueFull,
                self.name(),
                f64::from(waiters),
                f64::from(self.max_waiters),
            )),
        }
    }

    /// The key's calls in flight and waiters.
    pub fn state(&self) -> ActiveState {
        state_of(&self.state.slots)
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.state.name
    }

    fn permit(&self) -> ActivePermit {
        ActivePermit::new(self.state.clone())
    }

    /// The refusal of a call that found no slot (cold: kept out of the acquire path).
    #[cold]
    #[inline(never)]
    fn refusal(&self, in_flight: u32, max: u32) -> BlockError {
        BlockError::owned(
            BlockKind::Actives,
            self.name(),
            f64::from(in_flight),
            f64::from(max),
        )
    }
}
