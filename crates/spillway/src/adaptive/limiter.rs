//! The adaptive limiter: admits exactly up to the limit in force, and moves the limit with its
//! algorithm.

use super::algorithm::{ChangeReason, LimitAlgorithm, RttEstimates};
use super::claim::Claim;
use super::inbox::{Ended, Inbox};
use super::lanes::Lanes;
use super::queue::{AdaptiveQueue, Joined, Waiters};
use super::wait_slot::{Shed, WaitSlot};
use crate::clock::{AnyClock, Clock, SystemClock};
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};
use crate::Criticality;
use crossbeam_utils::CachePadded;
use std::fmt;
use std::sync::Arc;

/// The in-flight count's bits of the state word; the limit is in the high half.
const IN_FLIGHT: u64 = u32::MAX as u64;

fn split(state: u64) -> (u32, u32) {
    ((state >> 32) as u32, (state & IN_FLIGHT) as u32)
}

/// An adaptive concurrency limit: at most `limit` calls in flight, the limit moved by a
/// [`LimitAlgorithm`] from the latency of the calls that complete.
///
/// The limit and the in-flight count share one atomic word, and a call is admitted by
/// compare-and-swap on it: an admission never takes the count above the limit in force at that
/// moment, however threads interleave with each other and with limit changes (proven with loom).
/// A limit that falls below the calls already in flight admits nothing until enough of them end.
/// Every completed call's sample reaches the algorithm, one at a time, under a lock: none is
/// lost to a race. The lock is not taken on every release: a sample that cannot move the limit
/// ([`LimitAlgorithm::quiet`]: most samples of a windowed algorithm such as Envoy's, AIMD's
/// in time below half the limit) waits in a small buffer of its own thread, and the next
/// release that takes the lock, or a read of the [`state`](Self::state), feeds every held
/// sample first (proven with loom). A sample is judged by the algorithm's last word on which
/// samples are quiet: one that races another thread's feed that changed it may be held by the
/// old word, and waits for the next feed (at most until its thread's buffer fills, 32
/// samples, or any sample that may move the limit, from any thread).
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{AdaptiveLimiter, Aimd, AimdConfig};
/// use spillway::ManualClock;
///
/// let clock = ManualClock::new();
/// let aimd = Aimd::new(AimdConfig { initial_limit: 2, min_limit: 1, ..Default::default() })?;
/// let limiter = AdaptiveLimiter::with_clock(aimd, clock.clone());
/// let first = limiter.try_acquire().unwrap();
/// let second = limiter.try_acquire().unwrap();
/// let refused = limiter.try_acquire().unwrap_err();
/// assert_eq!((refused.limit, refused.in_flight), (2, 2));
/// clock.advance_millis(5);
/// drop(first); // in time, with the limit in use: AIMD adds 1
/// assert_eq!(limiter.state().limit, 3);
/// second.dropped(); // a timeout: AIMD backs off to (int) (3 x 0.9) = 2
/// assert_eq!(limiter.state().limit, 2);
/// assert_eq!(limiter.state().last_change.as_str(), "dropped");
/// # Ok::<(), spillway::adaptive::AdaptiveError>(())
/// ```
pub struct AdaptiveLimiter {
    /// The limit (high half) and the calls in flight (low half).
    state: CachePadded<AtomicU64>,
    control: Mutex<Control>,
    /// Samples held for the algorithm without the lock (none with a queue, whose waiters need
    /// each sample's latency at once).
    inbox: Option<Inbox>,
    refusals: AtomicU64,
    /// Calls that ended paced by their callers, with no sample (see [`AdaptiveState::paced`]).
    paced: AtomicU64,
    /// What a call is expected to take now, in nanoseconds: an exponential average of the RTTs
    /// of the calls that succeeded (each new one weighs an eighth; 0 before any), set with each
    /// sample, so that the queue can tell a waiter that cannot be done by its deadline without
    /// taking the control lock. An average, not the latest call: one slow call must not refuse
    /// every waiter with a deadline.
    expected_rtt: AtomicU64,
    clock: AnyClock,
    /// The callers waiting for a place, when the rule has a queue.
    waiters: Option<Waiters>,
}

/// Why an entry did not get a place at once: refused, or waiting in the queue.
#[derive(Debug)]
pub(crate) enum NoPlace {
    Refused(AdaptiveRefusal),
    /// Refused before it waited: it could not be done by its deadline.
    Expired(AdaptiveRefusal),
    /// Refused: the queue was full of callers that keep their places.
    Full(AdaptiveRefusal),
    Waiting(Arc<WaitSlot>),
}

/// How a caller's wait ended ([`AdaptiveLimiter::stop_waiting`]): the refusal it gets, and
/// whether it is for its deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopped {
    pub(crate) refusal: AdaptiveRefusal,
    pub(crate) deadline: bool,
}

/// What moves the limit, under the lock.
struct Control {
    algorithm: Box<dyn LimitAlgorithm>,
    samples: u64,
    updates: u64,
    last_change: ChangeReason,
}

/// A call an [`AdaptiveLimiter`] refused: the limit and the calls in flight it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveRefusal {
    /// The limit in force.
    pub limit: u32,
    /// Calls in flight (at least the limit).
    pub in_flight: u32,
}

/// How a call ended, for the algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Completed: its RTT is a sample.
    Success,
    /// Dropped (timed out, or refused downstream for overload): a sample that counts as a drop.
    Dropped,
    /// Not a sample (cancelled by its caller, failed before doing any work).
    Ignore,
}

/// What an [`AdaptiveLimiter`] is doing now, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdaptiveState {
    /// The limit in force.
    pub limit: u32,
    /// Calls in flight.
    pub in_flight: u32,
    /// Samples given to the algorithm.
    pub samples: u64,
    /// Times the algorithm changed the limit.
    pub updates: u64,
    /// Calls of a rule's entries that completed paced by their callers (a client that sent
    /// its body or read the answer slowly, see [`OwnedEntry::set_waiting_on_caller`](crate::OwnedEntry::set_waiting_on_caller)), since the
    /// limiter was made: their RTTs were the caller's as much as the service's, so they gave
    /// the algorithm no sample.
    pub paced: u64,
    /// Calls refused at the limit (with a queue: refused because it was full, after waiting
    /// out its timeout, for their deadline, or to make room for a more critical caller).
    pub refusals: u64,
    /// Callers waiting in the queue now (0 without one).
    pub waiting: u64,
    /// Callers that waited out the queue's timeout, since the limiter was made.
    pub queue_timeouts: u64,
    /// Whether the queue hands a freed place to the newest caller now: always in
    /// [`QueueOrder::Lifo`](super::QueueOrder::Lifo), never in `Fifo` or without a queue, and
    /// in [`QueueOrder::Adaptive`](super::QueueOrder::Adaptive) from when it fails a caller
    /// until it is next empty (an overload).
    pub newest_first: bool,
    /// Callers waiting now, by criticality ([`Criticality::rank`], lowest first).
    pub waiting_by_criticality: [u64; 4],
    /// Waiting callers a more critical one (or one of a tenant with fewer waiters) took the
    /// place of in the full queue, since the limiter was made, by criticality.
    pub evicted: [u64; 4],
    /// Callers refused for their deadline (passed while they waited, or too near to be met
    /// at the current latency), since the limiter was made, by criticality.
    pub expired: [u64; 4],
    /// Callers refused at once because the queue was full of callers that keep their places
    /// (as critical or more, or of a tenant with no longer a line), by criticality.
    pub full: [u64; 4],
    /// Why the limit last changed.
    pub last_change: ChangeReason,
    /// The algorithm's RTT estimates.
    pub estimates: RttEstimates,
}

impl AdaptiveLimiter {
    /// A limiter on the system clock, moved by `algorithm`.
    pub fn new(algorithm: impl LimitAlgorithm) -> Self {
        Self::with_clock(algorithm, SystemClock::new())
    }

    /// A limiter reading `clock` (a [`ManualClock`](crate::ManualClock) in tests).
    pub fn with_clock<C: Clock>(algorithm: impl LimitAlgorithm, clock: C) -> Self {
        Self::with_any_clock(Box::new(algorithm), AnyClock::from_clock(clock))
    }

    /// A limiter on a spillway's clock, for a rule.
    pub(crate) fn with_any_clock(algorithm: Box<dyn LimitAlgorithm>, clock: AnyClock) -> Self {
        let limit = algorithm.initial_limit().max(1);
        Self {
            state: CachePadded::new(AtomicU64::new(u64::from(limit) << 32)),
            control: Mutex::new(Control {
                algorithm,
                samples: 0,
                updates: 0,
                last_change: ChangeReason::Initial,
            }),
            inbox: Some(Inbox::new()),
            refusals: AtomicU64::new(0),
            paced: AtomicU64::new(0),
            expected_rtt: AtomicU64::new(0),
            clock,
            waiters: None,
        }
    }

    /// The limiter with a queue of callers that wait for a place (see [`AdaptiveQueue`]).
    pub(crate) fn with_queue(mut self, queue: Option<AdaptiveQueue>) -> Self {
        self.waiters = queue.map(Waiters::new);
        if self.waiters.is_some() {
            self.inbox = None;
        }
        self
    }

    /// Admits a call if fewer than the limit are in flight, by compare-and-swap on the limit and
    /// the count together. The permit's drop (or [`AdaptivePermit::dropped`],
    /// [`AdaptivePermit::ignore`]) ends the call and gives its sample to the algorithm.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveRefusal`] with the limit and the count seen, when at the limit.
    pub fn try_acquire(&self) -> Result<AdaptivePermit<'_>, AdaptiveRefusal> {
        let ticket = self.admit()?;
        Ok(AdaptivePermit {
            limiter: self,
            ticket,
            outcome: Outcome::Success,
        })
    }

    /// [`try_acquire`](Self::try_acquire) as a ticket, for callers that end the call
    /// themselves with [`release`](Self::release) (a simulation, an owned wrapper).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub fn admit(&self) -> Result<Ticket, AdaptiveRefusal> {
        let (limit, in_flight) = self.admit_counted()?;
        Ok(Ticket {
            started_nanos: self.clock.now_nanos(),
            in_flight,
            limit,
        })
    }

    /// The admission itself: the limit seen and the in-flight count after it.
    fn admit_counted(&self) -> Result<(u32, u32), AdaptiveRefusal> {
        self.admit_uncounted().inspect_err(|_| {
            self.refusals.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// An admission below the limit, unless callers wait for a place (they go first): the
    /// limit seen and the in-flight count after it.
    fn admit_uncounted(&self) -> Result<(u32, u32), AdaptiveRefusal> {
        if self
            .waiters
            .as_ref()
            .is_some_and(|waiters| waiters.len() > 0)
        {
            let (limit, in_flight) = split(self.state.load(Ordering::Acquire));
            return Err(AdaptiveRefusal { limit, in_flight });
        }
        self.increment()
    }

    /// One more call in flight, if below the limit.
    fn increment(&self) -> Result<(u32, u32), AdaptiveRefusal> {
        let admitted = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                let (limit, in_flight) = split(state);
                (in_flight < limit).then_some(state + 1)
            });
        match admitted {
            Ok(previous) => {
                let (limit, in_flight) = split(previous);
                Ok((limit, in_flight + 1))
            }
            Err(state) => {
                let (limit, in_flight) = split(state);
                Err(AdaptiveRefusal { limit, in_flight })
            }
        }
    }

    /// Takes a place for an entry (the entry path: the entry's own start time makes the sample
    /// when it ends, see [`end_place`](Self::end_place)). Over the limit, an entry that
    /// `can_wait` joins the queue with its `claim`, if the rule has one and it has room (or a
    /// less critical waiter gives way), unless it could not be done by its deadline.
    pub(crate) fn take_place(&self, can_wait: bool, claim: &Claim) -> Result<(), NoPlace> {
        let Err(refusal) = self.admit_uncounted() else {
            return Ok(());
        };
        if let (true, Some(waiters)) = (can_wait, &self.waiters) {
            let now = self.clock.now_nanos();
            if claim.too_late(now, self.expected_rtt()) {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                waiters.count_expired(claim.criticality);
                return Err(NoPlace::Expired(refusal));
            }
            let mut queue = waiters.lock();
            if let Joined::Waiting(slot) = waiters.join(&mut queue, now, *claim) {
                // A place freed since the check above is handed over now.
                self.hand_over_locked(waiters, &mut queue);
                return Err(NoPlace::Waiting(slot));
            }
            waiters.count_full(claim.criticality);
            self.refusals.fetch_add(1, Ordering::Relaxed);
            return Err(NoPlace::Full(refusal));
        }
        self.refusals.fetch_add(1, Ordering::Relaxed);
        Err(NoPlace::Refused(refusal))
    }

    /// What a call is expected to take now, in nanoseconds (0 before any sample).
    fn expected_rtt(&self) -> u64 {
        self.expected_rtt.load(Ordering::Relaxed)
    }

    /// The queue's settings, when the rule has one.
    pub(crate) fn queue(&self) -> Option<&AdaptiveQueue> {
        self.waiters.as_ref().map(|waiters| &waiters.config)
    }

    /// A caller stops waiting: out of the queue, or, if it was handed a place meanwhile, the
    /// place goes to the next one. A caller the queue refused, or that `timed_out`, is counted
    /// as refused: for its deadline if the queue refused it for that, or if its deadline came
    /// before the queue's timeout (its timer is the earlier of the two). Decided under the
    /// queue's lock, so that a hand-over refusing it at the same moment is counted once.
    pub(crate) fn stop_waiting(&self, slot: &Arc<WaitSlot>, timed_out: bool) -> Stopped {
        let mut deadline = false;
        if let Some(waiters) = &self.waiters {
            let mut queue = waiters.lock();
            let shed = slot.shed();
            let granted = slot.is_granted();
            if !granted {
                waiters.leave(&mut queue, slot);
                // Its time ran out, or its client's patience after more than half the queue's
                // timeout (one that leaves sooner may just have changed its mind): not served
                // in time. The queue marked those it refused itself when it did.
                let now = self.clock.now_nanos();
                let timeout = u64::try_from(waiters.config.timeout.as_nanos()).unwrap_or(u64::MAX);
                let patient = now.saturating_sub(slot.joined) > timeout / 2;
                if shed.is_none() && (timed_out || patient) {
                    waiters.late(&queue);
                }
            }
            drop(queue);
            if granted {
                self.end_place(0, Outcome::Ignore);
            }
            match shed {
                // Counted by the queue, by why.
                Some(why) => {
                    deadline = why == Shed::Expired;
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                }
                None if timed_out => {
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                    let timeout =
                        u64::try_from(waiters.config.timeout.as_nanos()).unwrap_or(u64::MAX);
                    deadline = slot.claim.deadline <= slot.joined.saturating_add(timeout);
                    if deadline {
                        waiters.count_expired(slot.claim.criticality);
                    } else {
                        waiters.count_timeout();
                    }
                }
                None => {}
            }
        }
        let (limit, in_flight) = split(self.state.load(Ordering::Acquire));
        Stopped {
            refusal: AdaptiveRefusal { limit, in_flight },
            deadline,
        }
    }

    /// Hands places free under the limit to waiting callers, in the queue's order.
    fn hand_over(&self) {
        if let Some(waiters) = &self.waiters {
            let mut queue = waiters.lock();
            self.hand_over_locked(waiters, &mut queue);
        }
    }

    /// Hands places free under the limit to waiting callers in the queue's order (the most
    /// critical first, tenants in turn), refusing on the way those that could no longer be
    /// done by their deadline.
    fn hand_over_locked(&self, waiters: &Waiters, queue: &mut Lanes) {
        let now = self.clock.now_nanos();
        let expected = self.expected_rtt();
        while let Some((slot, taken)) = waiters.next(queue) {
            // Its deadline has passed: out, place or no place.
            if slot.claim.too_late(now, 0) {
                waiters.refuse_taken(queue, &slot, Shed::Expired);
                continue;
            }
            if self.increment().is_err() {
                waiters.put_back(queue, slot, taken);
                return;
            }
            // A place is free, but the call could not be done by its deadline at the current
            // latency: the place goes on to the next.
            if slot.claim.too_late(now, expected) {
                self.state.fetch_sub(1, Ordering::AcqRel);
                waiters.refuse_taken(queue, &slot, Shed::Expired);
                continue;
            }
            waiters.grant(queue, &slot, now);
        }
        // Every waiting caller has its place: the queue is empty now.
        waiters.changed(queue);
    }

    /// Ends a place whose call completed paced by its caller: no sample, counted in
    /// [`AdaptiveState::paced`].
    pub(crate) fn end_paced_place(&self) {
        if self.end_place(0, Outcome::Ignore) {
            self.paced.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Gives back a place taken with [`take_place`](Self::take_place): a sample of a call that
    /// started at `started_nanos` (its in-flight count the calls in flight as it ends, itself
    /// included), or none for [`Outcome::Ignore`]. A place given back to a limiter that holds
    /// none (a rule replaced while the entry ran) is not counted: returns whether a place was
    /// given back.
    pub(crate) fn end_place(&self, started_nanos: u64, outcome: Outcome) -> bool {
        let now = self.end_time(outcome);
        let released = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                (state & IN_FLIGHT > 0).then(|| state - 1)
            });
        let Ok(previous) = released else {
            return false;
        };
        if let Some(now) = now {
            self.sample(started_nanos, now, split(previous).1, outcome);
        }
        self.hand_over();
        true
    }

    /// Ends the call of `ticket` now with `outcome`: one fewer in flight, and (unless ignored)
    /// its sample to the algorithm, which may move the limit (a sample that cannot is held and
    /// fed with the next that may, see [`AdaptiveLimiter`]). Each ticket must be released
    /// once.
    pub fn release(&self, ticket: Ticket, outcome: Outcome) {
        self.end(ticket.started_nanos, ticket.in_flight, outcome);
    }

    fn end(&self, started_nanos: u64, in_flight: u32, outcome: Outcome) {
        // The call ends now; its place is given back after the clock is read, so that the
        // in-flight word is touched once, briefly, however slow the read.
        let now = self.end_time(outcome);
        // The count is above 0 while the ticket is held: this never borrows from the limit.
        self.state.fetch_sub(1, Ordering::AcqRel);
        if let Some(now) = now {
            self.sample(started_nanos, now, in_flight, outcome);
        }
        self.hand_over();
    }

    /// When a call that ends with `outcome` ended, if its sample is wanted.
    fn end_time(&self, outcome: Outcome) -> Option<u64> {
        (outcome != Outcome::Ignore).then(|| self.clock.now_nanos())
    }

    /// Gives the algorithm the sample of a call that started at `started_nanos` and ended at
    /// `now`: held in this thread's buffer if it cannot move the limit (and the buffer has
    /// room), fed at once after every held sample otherwise.
    fn sample(&self, started_nanos: u64, now: u64, in_flight: u32, outcome: Outcome) {
        let ended = Ended {
            started_nanos,
            now_nanos: now,
            in_flight,
            dropped: outcome == Outcome::Dropped,
        };
        if (self.inbox.as_ref()).is_some_and(|inbox| inbox.hold_quiet(&ended)) {
            return;
        }
        // A sample that may move the limit (or that found this thread's buffer full, or a
        // limiter with no buffers) is fed now, after every held one.
        let mut control = self.control();
        self.take_held(&mut control);
        self.feed(&mut control, &ended);
        self.publish_quiet(&control);
    }

    /// Feeds the algorithm every call held in the threads' buffers (under the lock).
    fn take_held(&self, control: &mut Control) {
        if let Some(inbox) = &self.inbox {
            inbox.take(|ended| self.feed(control, ended));
        }
    }

    /// Publishes which samples the algorithm says cannot move the limit now (under the lock,
    /// after feeding it), for the buffers to hold.
    fn publish_quiet(&self, control: &Control) {
        if let Some(inbox) = &self.inbox {
            let limit = split(self.state.load(Ordering::Acquire)).0;
            inbox.publish(&control.algorithm.quiet(limit));
        }
    }

    /// Feeds the algorithm the sample of one ended call (under the lock) and applies the limit
    /// it gives.
    fn feed(&self, control: &mut Control, ended: &Ended) {
        let sample = ended.sample();
        control.samples += 1;
        let limit = split(self.state.load(Ordering::Acquire)).0;
        if let Some(update) = control.algorithm.on_sample(&sample, ended.now_nanos, limit) {
            control.updates += 1;
            control.last_change = update.reason;
            self.set_limit(update.limit.max(1));
        }
        if self.waiters.is_some() && !sample.dropped {
            // Under the control lock: one writer.
            let rtt = u64::try_from(sample.rtt.as_nanos()).unwrap_or(u64::MAX);
            let average = self.expected_rtt.load(Ordering::Relaxed);
            let average = if average == 0 {
                rtt
            } else {
                average - average / 8 + rtt / 8
            };
            self.expected_rtt.store(average, Ordering::Relaxed);
        }
    }

    /// Sets the limit, keeping the in-flight count (under the control lock: one writer).
    fn set_limit(&self, limit: u32) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                Some(u64::from(limit) << 32 | (state & IN_FLIGHT))
            });
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        // A panic in an algorithm leaves its state as it was: keep using it.
        self.control
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The lock, with every held sample fed: what a reader of the algorithm sees.
    fn control_fed(&self) -> MutexGuard<'_, Control> {
        let mut control = self.control();
        self.take_held(&mut control);
        self.publish_quiet(&control);
        control
    }

    /// The limit in force and the calls in flight, read together.
    pub(crate) fn limit_and_in_flight(&self) -> (u32, u32) {
        split(self.state.load(Ordering::Acquire))
    }

    /// The limit in force.
    pub fn limit(&self) -> u32 {
        split(self.state.load(Ordering::Acquire)).0
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> u32 {
        split(self.state.load(Ordering::Acquire)).1
    }

    /// Everything, read now (takes the locks briefly, one after the other).
    pub fn state(&self) -> AdaptiveState {
        // The queue's lock is never held with the control's (a hand-over takes it alone).
        let waiting_by_criticality = self.waiters.as_ref().map_or([0; 4], |waiters| {
            let queue = waiters.lock();
            Criticality::ALL.map(|criticality| queue.len_of(criticality) as u64)
        });
        let (evicted, expired, full) = self
            .waiters
            .as_ref()
            .map_or(([0; 4], [0; 4], [0; 4]), Waiters::shed);
        let control = self.control_fed();
        let (limit, in_flight) = split(self.state.load(Ordering::Acquire));
        AdaptiveState {
            limit,
            in_flight,
            samples: control.samples,
            updates: control.updates,
            paced: self.paced.load(Ordering::Relaxed),
            refusals: self.refusals.load(Ordering::Relaxed),
            waiting: self.waiters.as_ref().map_or(0, Waiters::len),
            queue_timeouts: self.waiters.as_ref().map_or(0, Waiters::timeouts),
            newest_first: self.waiters.as_ref().is_some_and(Waiters::newest_first),
            waiting_by_criticality,
            evicted,
            expired,
            full,
            last_change: control.last_change,
            estimates: control.algorithm.estimates(),
        }
    }
}

impl fmt::Debug for AdaptiveLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (limit, in_flight) = split(self.state.load(Ordering::Relaxed));
        f.debug_struct("AdaptiveLimiter")
            .field("limit", &limit)
            .field("in_flight", &in_flight)
            .finish_non_exhaustive()
    }
}

/// An admission by [`AdaptiveLimiter::admit`], to hand back to
/// [`AdaptiveLimiter::release`] once (it is neither `Clone` nor `Copy`).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a ticket holds a place until it is released"]
pub struct Ticket {
    started_nanos: u64,
    in_flight: u32,
    limit: u32,
}

impl Ticket {
    /// When the call was admitted, on the limiter's clock.
    pub fn started_nanos(&self) -> u64 {
        self.started_nanos
    }

    /// Calls in flight just after this one was admitted, itself included.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The limit in force when it was admitted (at least [`in_flight`](Self::in_flight)).
    pub fn limit(&self) -> u32 {
        self.limit
    }
}

/// A call an [`AdaptiveLimiter`] admitted. Dropping it ends the call as a success; end it with
/// [`dropped`](Self::dropped) on a timeout or an overload refusal downstream, or with
/// [`ignore`](Self::ignore) when its latency says nothing (cancelled, failed before any work).
#[must_use = "a permit ends its call when dropped"]
pub struct AdaptivePermit<'a> {
    limiter: &'a AdaptiveLimiter,
    ticket: Ticket,
    outcome: Outcome,
}

impl AdaptivePermit<'_> {
    /// The admission: its start, the in-flight count and the limit at that moment.
    pub fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    /// Ends the call as dropped.
    pub fn dropped(mut self) {
        self.outcome = Outcome::Dropped;
    }

    /// Ends the call without a sample.
    pub fn ignore(mut self) {
        self.outcome = Outcome::Ignore;
    }
}

impl Drop for AdaptivePermit<'_> {
    fn drop(&mut self) {
        let ticket = &self.ticket;
        self.limiter
            .end(ticket.started_nanos, ticket.in_flight, self.outcome);
    }
}

impl fmt::Debug for AdaptivePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptivePermit")
            .field("ticket", &self.ticket)
            .field("outcome", &self.outcome)
            .finish()
    }
}
