use super::{CallerTime, EntryState};
use crate::clock::Clock;
use crate::resource::Resource;
use std::fmt;
use std::time::Duration;

/// An admitted call that owns its resource handle: `'static`, for spawned tasks and response
/// futures. Otherwise the same as [`Entry`](crate::Entry), at the cost of one reference count.
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, Spillway};
///
/// let clock = ManualClock::new();
/// let spillway = Spillway::new_with_clock(clock.clone());
/// let entry = spillway.entry("jobs").enter_owned()?;
/// std::thread::spawn(move || {
///     // work...
///     drop(entry);
/// })
/// .join()
/// .unwrap();
/// assert_eq!(spillway.resource("jobs")?.stats().concurrency, 0);
/// # Ok::<(), spillway::BlockError>(())
/// ```
#[must_use = "an entry records its completion when dropped; dropping it at once records an RT of ~0"]
pub struct OwnedEntry {
    pub(crate) resource: Resource,
    pub(crate) state: EntryState,
    /// The time its call waited on its caller, which tells whether its caller paced it.
    pub(crate) caller: CallerTime,
}

impl OwnedEntry {
    pub(crate) fn new(resource: Resource, state: EntryState) -> Self {
        Self {
            resource,
            state,
            caller: CallerTime::NONE,
        }
    }

    /// Marks the call as failed: its completion also counts as an error.
    pub fn mark_error(&mut self) {
        self.state.set_error(true);
    }

    /// Marks the call as dropped (see [`Entry::mark_dropped`](crate::Entry::mark_dropped)).
    pub fn mark_dropped(&mut self) {
        self.state.set_dropped();
    }

    /// Sets whether the call failed.
    pub fn set_error(&mut self, error: bool) {
        self.state.set_error(error);
    }

    /// Marks the call as abandoned (see
    /// [`Entry::mark_abandoned`](crate::Entry::mark_abandoned)): its end frees its place and
    /// counts nothing else.
    pub fn mark_abandoned(&mut self) {
        self.state.set_abandoned();
    }

    /// Whether the call is marked as failed.
    pub fn is_error(&self) -> bool {
        self.state.error()
    }

    /// The resource.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// When the entry was admitted, on the spillway's clock (nanoseconds).
    pub fn started_at_nanos(&self) -> u64 {
        self.state.started_nanos
    }

    /// Counts `time` as time the call waited on its caller rather than on what the entry
    /// protects (a client that sent its request body slowly, say), as
    /// [`set_waiting_on_caller`](Self::set_waiting_on_caller) counts it.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
    /// use spillway::{ManualClock, Spillway};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// let aimd = AdaptiveAlgorithm::Aimd(AimdConfig::default());
    /// spillway.load_adaptive_rules(vec![AdaptiveRule::resource("a", "uploads", aimd)])?;
    /// let mut entry = spillway.entry("uploads").enter_owned()?;
    /// clock.advance_millis(6_000); // the client sent its body slowly, past AIMD's 5 s
    /// entry.add_caller_wait(Duration::from_millis(5_990));
    /// entry.exit();
    /// // Paced by its client: no sample, no backoff; its whole time in the statistics (at
    /// // most 5 s, as any RT).
    /// let state = spillway.adaptive_state("a").unwrap();
    /// assert_eq!((state.samples, state.limit), (0, 20));
    /// assert_eq!(spillway.resource("uploads")?.stats().avg_rt_micros, 5_000_000.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_caller_wait(&mut self, time: Duration) {
        let nanos = u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
        self.caller.add(nanos);
    }

    /// Says whether the call is waiting on its caller from now on: from `true` until `false`
    /// (or the entry's end). For a response body handed out frame by frame: the time between
    /// handing one frame out and being asked for the next is the reader's, not the service's.
    /// Saying what is already so changes nothing.
    ///
    /// A call that waited on its caller for more than a quarter of its time (and more than
    /// 250 µs) was paced by its caller, and its response time says as much about its caller
    /// as about the service: its end counts in the statistics as any other's (its whole
    /// response time), but it is no latency sample for an adaptive limit and no verdict for a
    /// slow-call breaker (to a half-open one it gives its probe place back). Neither a slow
    /// client nor one that times its bytes against the service's work can then move a limit
    /// with it. Errors still count for error breakers, and a drop as a drop.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::breaker::{BreakerRule, BreakerState, BreakerStrategy};
    /// use spillway::{ManualClock, Spillway};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// let slow = BreakerStrategy::SlowCallRatio {
    ///     max_rt: Duration::from_millis(100),
    ///     slow_ratio_threshold: 0.5,
    /// };
    /// spillway.load_breaker_rules(vec![BreakerRule::new("b", "downloads", slow,
    ///     Duration::from_secs(10)).with_min_request_amount(1)])?;
    /// let mut entry = spillway.entry("downloads").enter_owned()?;
    /// clock.advance_millis(10); // the service's time to its first bytes
    /// entry.set_waiting_on_caller(true);
    /// clock.advance_millis(5_000); // a slow reader
    /// entry.set_waiting_on_caller(false);
    /// assert_eq!(entry.caller_wait(), Duration::from_millis(5_000));
    /// entry.exit();
    /// assert_eq!(spillway.breaker_state("b"), Some(BreakerState::Closed));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_waiting_on_caller(&mut self, waiting: bool) {
        if waiting == self.caller.waiting() {
            return;
        }
        let now = self.resource.inner.clock.now_nanos();
        if waiting {
            self.caller.begin(now);
        } else {
            self.caller.end(now);
        }
    }

    /// The time the call has waited on its caller so far (see
    /// [`add_caller_wait`](Self::add_caller_wait) and
    /// [`set_waiting_on_caller`](Self::set_waiting_on_caller)), an open wait up to now
    /// included.
    pub fn caller_wait(&self) -> Duration {
        if self.caller.is_none() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.caller.at(self.resource.inner.clock.now_nanos()))
    }

    /// Says the call has answered (its response head came, say, while its body may take long
    /// yet), a failure or not as it is marked now ([`set_error`](Self::set_error) first). A
    /// half-open breaker whose probe this call is decides the probe now: an error breaker by
    /// its error (the probe fails if the call is marked an error), a slow-call breaker by its
    /// time so far (slow if past `max_rt`; Sentinel's probe is decided by its whole time). So
    /// a probe whose answer is long, a download or a stream or one its client reads slowly,
    /// neither holds the breaker half-open for its length nor outlasts `probe_timeout` (which
    /// would count it as failed). Its end still counts as any other's: its completion, its
    /// error (marked later too, if its body fails) and its time, in the statistics and the
    /// breakers' windows.
    /// Saying it again decides nothing more; an abandoned call decides nothing; a call its
    /// caller paced so far (a slow upload: see
    /// [`set_waiting_on_caller`](Self::set_waiting_on_caller)) is no verdict for a slow-call
    /// breaker, as at its end.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::breaker::{BreakerRule, BreakerState, BreakerStrategy};
    /// use spillway::{ManualClock, Spillway};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// let errors = BreakerStrategy::ErrorCount { threshold: 0 };
    /// spillway.load_breaker_rules(vec![BreakerRule::new("b", "events", errors,
    ///     Duration::from_secs(10)).with_min_request_amount(1)])?;
    /// let mut failed = spillway.entry("events").enter_owned()?;
    /// failed.mark_error();
    /// failed.exit();
    /// assert_eq!(spillway.breaker_state("b"), Some(BreakerState::Open));
    /// clock.advance_millis(10_000);
    /// // The probe: a stream of events for a minute, whose head says it is well.
    /// let probe = spillway.entry("events").enter_owned()?;
    /// clock.advance_millis(20);
    /// probe.answered();
    /// assert_eq!(spillway.breaker_state("b"), Some(BreakerState::Closed));
    /// clock.advance_millis(60_000);
    /// probe.exit();
    /// assert_eq!(spillway.breaker_state("b"), Some(BreakerState::Closed));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn answered(&self) {
        self.state.answered(&self.resource.inner, &self.caller);
    }

    /// Ends the entry now (the same as dropping it).
    pub fn exit(self) {}

    /// The id of the first flow rule in shadow mode that would have refused this entry, if any
    /// (see [`Entry::shadow_rule`](crate::Entry::shadow_rule)).
    pub fn shadow_rule(&self) -> Option<&'static str> {
        self.state.shadow_rule()
    }
}

impl Drop for OwnedEntry {
    fn drop(&mut self) {
        let inner = &self.resource.inner;
        if !self.caller.is_none()
            && self
                .caller
                .paced(self.state.started_nanos, inner.clock.now_nanos())
        {
            self.state.set_paced();
        }
        self.state.complete(inner);
    }
}

impl fmt::Debug for OwnedEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedEntry")
            .field("resource", &self.resource.name())
            .field("state", &self.state)
            .finish()
    }
}
