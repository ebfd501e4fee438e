//! One circuit breaker: its state machine, its sliding statistics, and its half-open probes.

use super::{BreakerRule, BreakerStrategy};
use crate::intern::{intern, intern_numbered, Interned};
use crate::stats::{SlidingWindow, WindowConfig};
use arc_swap::ArcSwap;
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

/// A breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls pass and are counted.
    Closed,
    /// Calls are refused until the retry timeout has passed.
    Open,
    /// A limited number of probe calls pass; their outcome closes or reopens the breaker.
    HalfOpen,
}

impl BreakerState {
    /// A short lowercase name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    fn from_u8(value: u8) -> Self {
        match value {
            CLOSED => BreakerState::Closed,
            OPEN => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            BreakerState::Closed => CLOSED,
            BreakerState::Open => OPEN,
            BreakerState::HalfOpen => HALF_OPEN,
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

/// A breaker changed state.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BreakerEvent {
    /// The rule's id.
    pub rule_id: &'static str,
    /// The resource it guards.
    pub resource: &'static str,
    /// The state it left.
    pub from: BreakerState,
    /// The state it entered.
    pub to: BreakerState,
    /// When, on the spillway's clock (nanoseconds).
    pub at_nanos: u64,
    /// On opening: the value that crossed the threshold (a ratio or a count; 1.0 when a probe
    /// failed, as in Sentinel).
    pub observed: Option<f64>,
}

/// Called on every state change, after the change (never under the breaker's lock).
pub type BreakerListener = Arc<dyn Fn(&BreakerEvent) + Send + Sync>;

/// The listeners shared by every breaker of a spillway.
#[derive(Default)]
pub(crate) struct Listeners(RwLock<Vec<BreakerListener>>);

impl Listeners {
    pub(crate) fn add(&self, listener: BreakerListener) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(listener);
    }

    fn notify(&self, events: &[BreakerEvent]) {
        if events.is_empty() {
            return;
        }
        let listeners = self.0.read().unwrap_or_else(|e| e.into_inner()).clone();
        for event in events {
            for listener in &listeners {
                listener(event);
            }
        }
    }
}

impl fmt::Debug for Listeners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.0.read().map_or(0, |l| l.len());
        f.debug_tuple("Listeners").field(&count).finish()
    }
}

/// A refusal by an open (or fully probing half-open) breaker.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BreakerBlock {
    /// The rule's id.
    pub rule_id: &'static str,
    /// The breaker's state when it refused.
    pub state: BreakerState,
    /// The value that opened it (a ratio or a count).
    pub observed: f64,
    /// The strategy's threshold.
    pub threshold: f64,
    /// When a call may pass again (when the breaker may probe, or a probe's place frees).
    pub retry_after: Duration,
    /// The rule id's interned number, for the block error.
    pub(crate) rule_number: u32,
}

/// What the mutex guards: everything but the state's fast-path copy and the window.
#[derive(Debug)]
struct Inner {
    /// Open: when it may move to half-open.
    next_retry: u64,
    /// Half-open: the probes out now.
    leases: Vec<Lease>,
    /// Half-open: probes let through this round (given-back ones excluded), and succeeded.
    issued: u32,
    succeeded: u32,
    /// The value that last opened it.
    tripped_by: f64,
}

/// A probe out: when it was let through (its identity) and when its lease ends.
#[derive(Debug, Clone, Copy)]
struct Lease {
    admitted: u64,
    deadline: u64,
}

/// A circuit breaker: Sentinel's `CircuitBreaker` for one [`BreakerRule`], with a sliding
/// window and a half-open state that cannot wedge.
///
/// Usable on its own, with time passed in: [`try_pass`](Self::try_pass) before a call,
/// [`on_complete`](Self::on_complete) after it (with the time the call was admitted), or
/// [`release`](Self::release) if an admitted call never ran. A
/// [`Spillway`](crate::Spillway) does all three for the breakers of its resources.
///
/// # Examples
///
/// ```
/// use spillway::breaker::{BreakerRule, BreakerState, BreakerStrategy, CircuitBreaker};
/// use std::time::Duration;
///
/// let rule = BreakerRule::new("e", "api", BreakerStrategy::ErrorCount { threshold: 1 },
///     Duration::from_secs(5)).with_min_request_amount(2);
/// let breaker = CircuitBreaker::new(rule);
/// let t = 1_000_000_000;
/// for _ in 0..2 {
///     assert!(breaker.try_pass(t).is_ok());
///     breaker.on_complete(t, t, 1_000, true); // failed calls
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// let block = breaker.try_pass(t).unwrap_err();
/// assert_eq!(block.retry_after, Duration::from_secs(5));
/// // After the retry timeout, one probe passes; its success closes the breaker.
/// let later = t + 5_000_000_000;
/// assert_eq!(breaker.try_pass(later), Ok(true));
/// breaker.on_complete(later, later, 1_000, false);
/// assert_eq!(breaker.state(), BreakerState::Closed);
/// ```
pub struct CircuitBreaker {
    rule: BreakerRule,
    id: Interned,
    resource: &'static str,
    retry_nanos: u64,
    probe_nanos: u64,
    window_config: WindowConfig,
    state: AtomicU8,
    window: ArcSwap<SlidingWindow>,
    inner: Mutex<Inner>,
    listeners: Arc<Listeners>,
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl CircuitBreaker {
    /// A closed breaker for `rule`, with no listener.
    ///
    /// The rule should have passed [`validate_breaker_rules`](super::validate_breaker_rules); an
    /// unusable window (fewer than 2 buckets, an interval that does not split) falls back on
    /// the default window of 1 s in 10 buckets.
    pub fn new(rule: BreakerRule) -> Self {
        Self::with_listeners(rule, Arc::default())
    }

    pub(crate) fn with_listeners(rule: BreakerRule, listeners: Arc<Listeners>) -> Self {
        let window_config =
            WindowConfig::new(rule.stat_buckets.max(2) as usize, rule.stat_interval)
                .or_else(|_| WindowConfig::new(10, Duration::from_secs(1)))
                .unwrap_or_else(|_| WindowConfig::sentinel_second())
                .with_stripes(2);
        Self {
            id: intern_numbered(&rule.id),
            resource: intern(&rule.resource),
            retry_nanos: nanos(rule.retry_timeout),
            probe_nanos: nanos(rule.effective_probe_timeout()).max(1),
            window: ArcSwap::from_pointee(SlidingWindow::new(window_config)),
            window_config,
            state: AtomicU8::new(CLOSED),
            inner: Mutex::new(Inner {
                next_retry: 0,
                leases: Vec::new(),
                issued: 0,
                succeeded: 0,
                tripped_by: 0.0,
            }),
            listeners,
            rule,
        }
    }

    /// Adds a listener of this breaker's state changes (a spillway's breakers share the
    /// spillway's listeners instead: [`Spillway::on_breaker_state_change`](crate::Spillway::on_breaker_state_change)).
    pub fn add_listener(&self, listener: impl Fn(&BreakerEvent) + Send + Sync + 'static) {
        self.listeners.add(Arc::new(listener));
    }

    /// The rule.
    pub fn rule(&self) -> &BreakerRule {
        &self.rule
    }

    /// The state now (an open breaker whose retry timeout has passed reads open until a call
    /// moves it to half-open).
    pub fn state(&self) -> BreakerState {
        BreakerState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Completions and bad ones (slow or errors, as the strategy counts) in the window now.
    pub fn window_counts(&self, now: u64) -> (u64, u64) {
        let snapshot = self.window.load().snapshot(now);
        (snapshot.success, snapshot.error)
    }

    /// Whether a call admitted at `now` may pass: `Ok(false)` closed, `Ok(true)` as a half-open
    /// probe (report its end with [`on_complete`](Self::on_complete) or
    /// [`release`](Self::release)).
    ///
    /// # Errors
    ///
    /// A [`BreakerBlock`] while open, or half-open with every probe out.
    #[inline]
    pub fn try_pass(&self, now: u64) -> Result<bool, BreakerBlock> {
        if self.state.load(Ordering::Acquire) == CLOSED {
            return Ok(false);
        }
        self.try_pass_slow(now)
    }

    #[cold]
    fn try_pass_slow(&self, now: u64) -> Result<bool, BreakerBlock> {
        let mut events = Vec::new();
        let result = {
            let mut inner = self.lock();
            self.expire_probes(&mut inner, now, &mut events);
            match self.state() {
                BreakerState::Closed => Ok(false),
                BreakerState::Open if now >= inner.next_retry => {
                    self.set_state(BreakerState::HalfOpen, now, None, &mut events);
                    inner.leases.clear();
                    inner.issued = 0;
                    inner.succeeded = 0;
                    Ok(self.lease(&mut inner, now))
                }
                BreakerState::Open => {
                    Err(self.block(&inner, BreakerState::Open, inner.next_retry - now))
                }
                BreakerState::HalfOpen if inner.issued < self.rule.half_open_probes => {
                    Ok(self.lease(&mut inner, now))
                }
                BreakerState::HalfOpen => {
                    let first_deadline = inner
                        .leases
                        .iter()
                        .map(|lease| lease.deadline)
                        .min()
                        .unwrap_or(now);
                    Err(self.block(
                        &inner,
                        BreakerState::HalfOpen,
                        first_deadline.saturating_sub(now),
                    ))
                }
            }
        };
        self.listeners.notify(&events);
        result
    }

    /// Records the end of a call admitted at `admitted_at` (the `now` its
    /// [`try_pass`](Self::try_pass) was given), at `now`, that took `rt_micros` and did or did
    /// not fail. A half-open probe's end decides: a failure (slow or an error, as the
    /// strategy counts) reopens the breaker, and the last of `half_open_probes` successes
    /// closes it.
    pub fn on_complete(&self, admitted_at: u64, now: u64, rt_micros: u64, error: bool) {
        let bad = self.is_bad(rt_micros, error);
        // Completions are filed as successes, the bad ones also as errors.
        self.window.load().add_completion(now, 0, 1, u64::from(bad));
        let mut events = Vec::new();
        if self.state.load(Ordering::Acquire) == CLOSED {
            if let Some(observed) = self.crossed(now) {
                let mut inner = self.lock();
                if self.state() == BreakerState::Closed {
                    self.open(&mut inner, now, observed, &mut events);
                }
            }
        } else {
            let mut inner = self.lock();
            self.decide_probe(&mut inner, admitted_at, now, bad, &mut events);
        }
        self.listeners.notify(&events);
    }

    /// A call admitted at `admitted_at` answered at `now`, after `rt_micros`, a failure or
    /// not (its response head, say, while its body may take long yet): if it is a half-open
    /// probe, it is decided now rather than at its end: by its error for an error strategy,
    /// and for a slow-call one by its time to the answer (slow if it is slow already, good
    /// otherwise; Sentinel's probe is decided by its whole time). So a probe whose answer is
    /// long (a download, a stream, or a client that reads it slowly) neither holds the breaker
    /// half-open for its length nor outlasts `probe_timeout`, which would reopen it (a client
    /// that took the probe and read it a byte a second kept a slow-call breaker open for as
    /// long as it liked, in an attack). Its completion still counts in the window when it
    /// ends.
    pub fn on_answer(&self, admitted_at: u64, now: u64, rt_micros: u64, error: bool) {
        if self.state.load(Ordering::Acquire) != HALF_OPEN {
            return;
        }
        let bad = self.is_bad(rt_micros, error);
        let mut events = Vec::new();
        let mut inner = self.lock();
        self.decide_probe(&mut inner, admitted_at, now, bad, &mut events);
        drop(inner);
        self.listeners.notify(&events);
    }

    /// Whether a call of `rt_micros` that did or did not fail is a bad one, as the strategy
    /// counts.
    fn is_bad(&self, rt_micros: u64, error: bool) -> bool {
        match self.rule.strategy {
            BreakerStrategy::SlowCallRatio { max_rt, .. } => {
                rt_micros > u64::try_from(max_rt.as_micros()).unwrap_or(u64::MAX)
            }
            BreakerStrategy::ErrorRatio { .. } | BreakerStrategy::ErrorCount { .. } => error,
        }
    }

    /// Not closed: the call admitted at `admitted_at`, if it is a half-open probe whose lease
    /// has not run out by `now`, was `bad` or not. A bad one reopens the breaker, and the last
    /// of `half_open_probes` good ones closes it.
    fn decide_probe(
        &self,
        inner: &mut Inner,
        admitted_at: u64,
        now: u64,
        bad: bool,
        events: &mut Vec<BreakerEvent>,
    ) {
        self.expire_probes(inner, now, events);
        let probe = inner
            .leases
            .iter()
            .position(|lease| lease.admitted == admitted_at);
        let Some(at) = probe.filter(|_| self.state() == BreakerState::HalfOpen) else {
            return;
        };
        inner.leases.swap_remove(at);
        if bad {
            self.open(inner, now, 1.0, events);
        } else {
            inner.succeeded += 1;
            if inner.succeeded >= self.rule.half_open_probes {
                self.window
                    .store(Arc::new(SlidingWindow::new(self.window_config)));
                self.set_state(BreakerState::Closed, now, None, events);
            }
        }
    }

    /// Whether the strategy counts calls by their response time (the slow-call ratio), rather
    /// than by their errors.
    pub(crate) fn counts_time(&self) -> bool {
        matches!(self.rule.strategy, BreakerStrategy::SlowCallRatio { .. })
    }

    /// Gives back the probe place of a call admitted at `admitted_at` that never ran (refused
    /// by a later rule, or abandoned while queued). A no-op for calls that were no probe.
    pub fn release(&self, admitted_at: u64) {
        if self.state.load(Ordering::Acquire) != HALF_OPEN {
            return;
        }
        let mut inner = self.lock();
        if let Some(at) = inner
            .leases
            .iter()
            .position(|lease| lease.admitted == admitted_at)
        {
            inner.leases.swap_remove(at);
            inner.issued -= 1;
        }
    }

    /// A probe let through at `from` starts its call at `to` (it waited in a queue): its
    /// completion will be reported with `to`. Its lease still ends where it did.
    pub(crate) fn rebase(&self, from: u64, to: u64) {
        if self.state.load(Ordering::Acquire) != HALF_OPEN {
            return;
        }
        let mut inner = self.lock();
        if let Some(lease) = inner.leases.iter_mut().find(|lease| lease.admitted == from) {
            lease.admitted = to;
        }
    }

    /// The value that crosses the strategy's threshold in the window now, if one does (and the
    /// window holds at least `min_request_amount` completions). Sentinel's comparisons.
    fn crossed(&self, now: u64) -> Option<f64> {
        let (total, bad) = self.window_counts(now);
        if total < self.rule.min_request_amount || total == 0 {
            return None;
        }
        match self.rule.strategy {
            BreakerStrategy::SlowCallRatio {
                slow_ratio_threshold,
                ..
            } => {
                let ratio = bad as f64 / total as f64;
                (ratio > slow_ratio_threshold || (ratio == slow_ratio_threshold && ratio == 1.0))
                    .then_some(ratio)
            }
            BreakerStrategy::ErrorRatio { threshold } => {
                let ratio = bad as f64 / total as f64;
                (ratio > threshold).then_some(ratio)
            }
            BreakerStrategy::ErrorCount { threshold } => (bad > threshold).then_some(bad as f64),
        }
    }

    fn threshold(&self) -> f64 {
        match self.rule.strategy {
            BreakerStrategy::SlowCallRatio {
                slow_ratio_threshold,
                ..
            } => slow_ratio_threshold,
            BreakerStrategy::ErrorRatio { threshold } => threshold,
            BreakerStrategy::ErrorCount { threshold } => threshold as f64,
        }
    }

    /// Half-open: a probe whose lease ran out failed, at its deadline.
    fn expire_probes(&self, inner: &mut Inner, now: u64, events: &mut Vec<BreakerEvent>) {
        if self.state() != BreakerState::HalfOpen {
            return;
        }
        let expired = inner
            .leases
            .iter()
            .map(|lease| lease.deadline)
            .filter(|&deadline| deadline <= now)
            .min();
        if let Some(expired) = expired {
            self.open(inner, expired, 1.0, events);
        }
    }

    fn lease(&self, inner: &mut Inner, now: u64) -> bool {
        inner.issued += 1;
        inner.leases.push(Lease {
            admitted: now,
            deadline: now.saturating_add(self.probe_nanos),
        });
        true
    }

    fn open(&self, inner: &mut Inner, at: u64, observed: f64, events: &mut Vec<BreakerEvent>) {
        inner.next_retry = at.saturating_add(self.retry_nanos);
        inner.tripped_by = observed;
        inner.leases.clear();
        self.set_state(BreakerState::Open, at, Some(observed), events);
    }

    fn set_state(
        &self,
        to: BreakerState,
        at: u64,
        observed: Option<f64>,
        events: &mut Vec<BreakerEvent>,
    ) {
        let from = BreakerState::from_u8(self.state.swap(to.to_u8(), Ordering::AcqRel));
        if from != to {
            events.push(BreakerEvent {
                rule_id: self.id.name,
                resource: self.resource,
                from,
                to,
                at_nanos: at,
                observed,
            });
        }
    }

    fn block(&self, inner: &Inner, state: BreakerState, retry_after: u64) -> BreakerBlock {
        BreakerBlock {
            rule_id: self.id.name,
            rule_number: self.id.number,
            state,
            observed: inner.tripped_by,
            threshold: self.threshold(),
            retry_after: Duration::from_nanos(retry_after),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("rule", &self.rule.id)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}
