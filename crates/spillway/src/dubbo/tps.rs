//! Dubbo's `TpsLimitFilter` / `StatItem`: a fixed window of `rate` calls per `interval`.

use crate::block::{BlockError, BlockKind};
use crate::clock::{AnyClock, Clock, SystemClock};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// Dubbo's default TPS interval (`tps.interval`): 60 s.
pub const DEFAULT_TPS_INTERVAL: Duration = Duration::from_secs(60);

/// Default cap on keys a [`TpsLimiter`] tracks.
pub const DEFAULT_MAX_TPS_KEYS: usize = 10_000;

/// A key's limit: `rate` calls per `interval`. A rate of 0 disables the limit for the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TpsConfig {
    /// Calls allowed per window; 0 turns the limit off (and drops the key's state).
    pub rate: u32,
    /// The window's length.
    pub interval: Duration,
}

impl TpsConfig {
    /// `rate` calls per `interval`.
    pub fn new(rate: u32, interval: Duration) -> Self {
        Self { rate, interval }
    }

    /// `rate` calls per Dubbo's default 60 s.
    pub fn per_default_interval(rate: u32) -> Self {
        Self::new(rate, DEFAULT_TPS_INTERVAL)
    }
}

/// A key's window, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TpsState {
    /// The key's configuration.
    pub config: TpsConfig,
    /// Calls still allowed in the current window.
    pub tokens_left: u32,
    /// When the current window started, on the limiter's clock (nanoseconds).
    pub window_start_nanos: u64,
}

/// One key's window (Dubbo's `StatItem`): the reset and the take happen under one lock, so they
/// cannot race into extra admissions (Dubbo's history has such races).
#[derive(Debug)]
struct StatItem {
    config: TpsConfig,
    window: Mutex<Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: u64,
    tokens: u32,
}

impl StatItem {
    fn new(config: TpsConfig, now: u64) -> Self {
        Self {
            config,
            window: Mutex::new(Window {
                start: now,
                tokens: config.rate,
            }),
        }
    }

    fn interval_nanos(&self) -> u64 {
        u64::try_from(self.config.interval.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Dubbo's `isAllowable`: the window restarts (with fresh tokens) at the first call strictly
    /// after `start + interval`; each call takes a token while any remain.
    fn take(&self, now: u64) -> Result<(), Window> {
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        if now > window.start.saturating_add(self.interval_nanos()) {
            *window = Window {
                start: now,
                tokens: self.config.rate,
            };
        }
        if window.tokens == 0 {
            return Err(*window);
        }
        window.tokens -= 1;
        Ok(())
    }

    fn expired(&self, now: u64) -> bool {
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        now > window.start.saturating_add(self.interval_nanos())
    }

    fn state(&self) -> TpsState {
        let window = *self.window.lock().unwrap_or_else(|e| e.into_inner());
        TpsState {
            config: self.config,
            tokens_left: window.tokens,
            window_start_nanos: window.start,
        }
    }
}

/// Dubbo's TPS limit per key (a service, or a service and method): `rate` calls per `interval`
/// in a window that is *not* aligned to the clock: it starts at a key's first call and restarts
/// at the first call after it has run its length.
///
/// The configuration comes with each call, as Dubbo reads it from the URL: a changed rate or
/// interval rebuilds the key's window (fresh tokens, restarting now), and a rate of 0 disables
/// the limit and drops the key's state.
///
/// # Bounded keys
///
/// At most `max_keys` keys are tracked. A new key past the cap first evicts keys whose window has
/// run out (their next call would restart them with fresh tokens anyway, so evicting them loses
/// nothing); if none has, the call is refused with a [`BlockKind::Tps`] error (observed = keys
/// tracked, threshold = the cap) rather than passing unlimited, and counted by
/// [`key_overflows`](Self::key_overflows).
///
/// # Examples
///
/// ```
/// use spillway::dubbo::{TpsConfig, TpsLimiter};
/// use spillway::ManualClock;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let tps = TpsLimiter::new_with_clock(clock.clone());
/// let config = TpsConfig::new(2, Duration::from_secs(1));
/// assert!(tps.try_acquire("OrderService", config).is_ok());
/// assert!(tps.try_acquire("OrderService", config).is_ok());
/// assert!(tps.try_acquire("OrderService", config).is_err());
/// clock.advance(Duration::from_millis(1_001)); // strictly past the window
/// assert!(tps.try_acquire("OrderService", config).is_ok());
/// ```
pub struct TpsLimiter {
    clock: AnyClock,
    max_keys: usize,
    keys: RwLock<Keys>,
    key_overflows: std::sync::atomic::AtomicU64,
}

/// Keys to windows; names hashed with foldhash (fast, seeded per process).
type Keys = HashMap<Arc<str>, Arc<StatItem>, foldhash::fast::RandomState>;

/// A pre-resolved key of a [`TpsLimiter`] under one configuration (see [`TpsLimiter::key`]):
/// its calls skip the key lookup. It shares the key's window with calls by name.
#[derive(Debug, Clone)]
pub struct TpsKey {
    item: Arc<StatItem>,
    name: Arc<str>,
    clock: AnyClock,
}

impl TpsKey {
    /// Takes one call.
    ///
    /// # Errors
    ///
    /// As [`TpsLimiter::try_acquire`] when the window has no token left.
    pub fn try_acquire(&self) -> Result<(), BlockError> {
        let now = self.clock.now_nanos();
        self.item
            .take(now)
            .map_err(|window| refused(&self.name, &self.item, window, now))
    }

    /// The window now.
    pub fn state(&self) -> TpsState {
        self.item.state()
    }
}

/// The refusal of a call that found no token (cold).
#[cold]
#[inline(never)]
fn refused(key: &str, item: &StatItem, window: Window, now: u64) -> BlockError {
    let restart = window.start.saturating_add(item.interval_nanos()) + 1;
    let rate = f64::from(item.config.rate);
    BlockError::owned(BlockKind::Tps, key, rate, rate)
        .with_retry_after(Duration::from_nanos(restart.saturating_sub(now)))
}

impl TpsLimiter {
    /// A limiter on the system clock tracking up to [`DEFAULT_MAX_TPS_KEYS`] keys.
    pub fn new() -> Self {
        Self::new_with_clock(SystemClock::new())
    }

    /// [`new`](Self::new) on `clock`.
    pub fn new_with_clock<C: Clock>(clock: C) -> Self {
        Self::with_max_keys_with_clock(DEFAULT_MAX_TPS_KEYS, clock)
    }

    /// A limiter on `clock` tracking up to `max_keys` keys.
    pub fn with_max_keys_with_clock<C: Clock>(max_keys: usize, clock: C) -> Self {
        Self {
            clock: AnyClock::from_clock(clock),
            max_keys,
            keys: RwLock::new(Keys::default()),
            key_overflows: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Takes one call for `key` under `config`.
    ///
    /// # Errors
    ///
    /// A [`BlockKind::Tps`] error when the key's window has no token left (observed = the
    /// window's rate taken, threshold = the rate, retry after = until the window may restart),
    /// or when a new key finds the key cap full.
    pub fn try_acquire(&self, key: &str, config: TpsConfig) -> Result<(), BlockError> {
        let now = self.clock.now_nanos();
        if config.rate == 0 {
            self.write().remove(key);
            return Ok(());
        }
        // The common case: a known key under an unchanged configuration, taken under the read
        // lock (no reference count touched).
        if let Some(item) = self.read().get(key).filter(|item| item.config == config) {
            return item
                .take(now)
                .map_err(|window| refused(key, item, window, now));
        }
        let item = self.item(key, config, now)?;
        item.take(now)
            .map_err(|window| refused(key, &item, window, now))
    }

    /// A pre-resolved handle on `key` under `config`, for calls that skip the key lookup. Like
    /// a call by name, it rebuilds the key's window if `config` differs from the key's; a
    /// handle held while the configuration changes again keeps the window it was made with.
    ///
    /// # Errors
    ///
    /// A [`BlockKind::Tps`] error when `key` is new and the key cap is full, or when
    /// `config.rate` is 0 (a disabled limit has no window to take from).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::dubbo::{TpsConfig, TpsLimiter};
    /// use spillway::ManualClock;
    /// use std::time::Duration;
    ///
    /// let tps = TpsLimiter::new_with_clock(ManualClock::new());
    /// let orders = tps.key("OrderService", TpsConfig::new(1, Duration::from_secs(1)))?;
    /// assert!(orders.try_acquire().is_ok());
    /// assert!(orders.try_acquire().is_err());
    /// assert_eq!(tps.state("OrderService").unwrap().tokens_left, 0);
    /// # Ok::<(), spillway::BlockError>(())
    /// ```
    pub fn key(&self, key: &str, config: TpsConfig) -> Result<TpsKey, BlockError> {
        if config.rate == 0 {
            return Err(BlockError::owned(BlockKind::Tps, key, 0.0, 0.0));
        }
        let item = self.item(key, config, self.clock.now_nanos())?;
        Ok(TpsKey {
            item,
            name: Arc::from(key),
            clock: self.clock.clone(),
        })
    }

    /// The key's window, read or (re)built for `config`.
    fn item(&self, key: &str, config: TpsConfig, now: u64) -> Result<Arc<StatItem>, BlockError> {
        if let Some(item) = self.read().get(key) {
            if item.config == config {
                return Ok(item.clone());
            }
        }
        let mut keys = self.write();
        match keys.get(key) {
            Some(item) if item.config == config => return Ok(item.clone()),
            Some(_) => {
                // Dubbo: "rate or interval has changed, rebuild".
                let item = Arc::new(StatItem::new(config, now));
                keys.insert(Arc::from(key), item.clone());
                return Ok(item);
            }
            None => {}
        }
        if keys.len() >= self.max_keys {
            keys.retain(|_, item| !item.expired(now));
        }
        if keys.len() >= self.max_keys {
            self.key_overflows
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let cap = self.max_keys as f64;
            return Err(BlockError::owned(BlockKind::Tps, key, cap, cap).without_quota());
        }
        let item = Arc::new(StatItem::new(config, now));
        keys.insert(Arc::from(key), item.clone());
        Ok(item)
    }

    /// The key's window, if it is tracked.
    pub fn state(&self, key: &str) -> Option<TpsState> {
        self.read().get(key).map(|item| item.state())
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls refused because a new key met the full key cap.
    pub fn key_overflows(&self) -> u64 {
        self.key_overflows
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Keys> {
        self.keys.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Keys> {
        self.keys.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for TpsLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for TpsLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TpsLimiter")
            .field("keys", &self.len())
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}
