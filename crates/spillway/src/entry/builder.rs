use super::check::{
    check_flow, check_gate, give_back, refusal_error, refuse_short, Caller, GateStop, Held, Verdict,
};
use super::pending::{rebase_probes, OwnedPending, Pending, PendingState, Queue};
use super::places::{release_limited, LIMITED_INBOUND};
use super::{Entry, EntryState, OwnedEntry, TrafficType};
use crate::block::{BlockError, BlockKind};
use crate::breaker::BreakerBlock;
use crate::clock::Clock;
use crate::flow::try_increment;
use crate::flow::{GateRead, ResourceRules};
use crate::resource::{ChildSlot, Resource, ResourceInner};
use crate::spillway::Spillway;
use crate::sync::Ordering;
use crate::system::{SystemBlock, SystemCheck};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Describes an entry before it is attempted: count, origin, entrance, traffic type.
///
/// Made by [`Spillway::entry`] (by name) or [`Resource::entry`] (pre-resolved, no lookup).
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, Spillway, TrafficType};
///
/// let spillway = Spillway::new_with_clock(ManualClock::new());
/// let entry = spillway
///     .entry("GET /search")
///     .count(2)
///     .origin("mobile-app")
///     .traffic(TrafficType::Inbound)
///     .enter()?;
/// drop(entry);
/// assert_eq!(spillway.inbound_stats().total_pass, 2);
/// # Ok::<(), spillway::BlockError>(())
/// ```
#[must_use = "nothing happens until `enter` is called"]
pub struct EntryBuilder<'a> {
    target: Target<'a>,
    count: u32,
    origin: Option<&'a str>,
    entrance: Option<&'a str>,
    traffic: TrafficType,
    prioritized: bool,
}

enum Target<'a> {
    Name(&'a Spillway, &'a str),
    Handle(&'a Resource),
}

/// An entry the flow rules let through, now or after a wait.
#[derive(Debug)]
pub enum Admission<'a> {
    /// Admitted now.
    Ready(Entry<'a>),
    /// Admitted after [`Pending::wait`]: a queue slot is reserved; wait, then
    /// [`Pending::enter`]. Dropping the `Pending` gives the slot back.
    Queued(Pending<'a>),
}

/// Where the gate's check stopped, and what the entry had resolved by then.
struct Stopped<'g> {
    read: GateRead<'g>,
    stop: GateStop,
    now: u64,
    origin: ChildSlot,
    entrance: ChildSlot,
}

impl<'a> EntryBuilder<'a> {
    pub(crate) fn for_name(spillway: &'a Spillway, name: &'a str) -> Self {
        Self::new(Target::Name(spillway, name))
    }

    pub(crate) fn for_resource(resource: &'a Resource) -> Self {
        Self::new(Target::Handle(resource))
    }

    fn new(target: Target<'a>) -> Self {
        Self {
            target,
            count: 1,
            origin: None,
            entrance: None,
            traffic: TrafficType::default(),
            prioritized: false,
        }
    }

    /// Marks the entry as prioritized: when a QPS reject rule would refuse it, it may instead
    /// borrow room from the next buckets of the second window and wait up to the rule's
    /// `occupy_timeout` (Sentinel's occupy mechanism). Its passes are counted in the bucket it
    /// borrowed from, and as occupied passes now.
    pub fn prioritized(mut self) -> Self {
        self.prioritized = true;
        self
    }

    /// How many permits the call takes (default 1; Sentinel's `batchCount`). It counts as that
    /// many passes and completions, and as one entry in flight. 0 counts no permits (the entry is
    /// still in flight until it ends).
    pub fn count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    /// The caller's origin (an application or client name), tracked in its own statistics and
    /// matched against rules' `limit_app`.
    pub fn origin(mut self, origin: &'a str) -> Self {
        self.origin = Some(origin);
        self
    }

    /// The entrance the call came through (Sentinel's context name, for example the inbound
    /// endpoint that leads to this resource), tracked in its own statistics and matched against
    /// `chain` rules.
    pub fn entrance(mut self, entrance: &'a str) -> Self {
        self.entrance = Some(entrance);
        self
    }

    /// Inbound or outbound (default outbound).
    pub fn traffic(mut self, traffic: TrafficType) -> Self {
        self.traffic = traffic;
        self
    }

    /// Shorthand for `traffic(TrafficType::Inbound)`.
    pub fn inbound(self) -> Self {
        self.traffic(TrafficType::Inbound)
    }

    /// The resource: a handle's at once, a name's through the registry. Always inlined: out of
    /// line, it returned the resource through memory, in a `Result` as wide as a block.
    #[inline(always)]
    fn resolve(&self) -> Result<&'a Resource, BlockError> {
        match self.target {
            Target::Name(spillway, name) => spillway.resolve(name),
            Target::Handle(resource) => Ok(resource),
        }
    }

    /// The entry's origin and entrance child nodes (created on first use, within the cap).
    #[inline]
    fn child_slots(&self, inner: &ResourceInner) -> (ChildSlot, ChildSlot) {
        let origin = self
            .origin
            .map_or(ChildSlot::NONE, |o| inner.origins.slot(o));
        let entrance = self
            .entrance
            .map_or(ChildSlot::NONE, |e| inner.entrances.slot(e));
        (origin, entrance)
    }

    /// Checks the rules and counts the outcome. An admission is handed to `ready` (with the
    /// reservations held); a queued admission to `queued` (with the wait and the rules, to give
    /// the reservations back if it is abandoned); a block is counted and returned.
    #[inline]
    fn decide<R>(
        &self,
        resource: &'a Resource,
        ready: impl FnOnce(EntryState) -> R,
        queued: impl FnOnce(Duration, Held, &Arc<ResourceRules>, Queue) -> R,
    ) -> Result<R, BlockError> {
        let inner = &*resource.inner;
        let now = inner.clock.now_nanos();
        let (origin_slot, entrance_slot) = self.child_slots(inner);
        let inbound = self.traffic == TrafficType::Inbound;
        // A macro, not a closure: the compiler outlined the closure, which then returned the
        // state through memory, and the caller's wider copy of it waited on those narrower
        // stores (a store-forwarding stall on every entry).
        macro_rules! admit {
            ($limited:expr) => {
                EntryState::admit(
                    inner,
                    origin_slot,
                    entrance_slot,
                    now,
                    self.count,
                    inbound,
                    $limited,
                    false,
                )
            };
        }
        // Relaxed, like the flow flag below. A system `max_concurrency` takes a place on the
        // inbound node, given back with the others if a later check refuses.
        let mut system_place = 0u8;
        if inbound && inner.core.has_system.load(Ordering::Relaxed) {
            match check_system(inner, now, self.count) {
                Ok(place) => system_place = place,
                Err(error) => {
                    EntryState::refuse(inner, origin_slot, entrance_slot, now, self.count, inbound);
                    return Err(error);
                }
            }
        }
        // Relaxed: a stale flag only delays seeing a rule load by a moment, as a stale rule set
        // would; the rules themselves are read through the ArcSwap.
        let has_flow = inner.has_flow.load(Ordering::Relaxed);
        let has_breakers = inner.has_breakers.load(Ordering::Relaxed);
        if !has_flow && !has_breakers {
            return Ok(ready(admit!(system_place)));
        }
        let guard = has_flow.then(|| inner.flow.load());
        let Some(rules) = guard.as_ref().and_then(|rules| rules.as_ref()) else {
            if let Err(error) = pass_breakers(inner, now, &mut Held::default()) {
                release_limited(inner, origin_slot, entrance_slot, system_place);
                EntryState::refuse(inner, origin_slot, entrance_slot, now, self.count, inbound);
                return Err(error);
            }
            return Ok(ready(admit!(system_place)));
        };
        let gate = (rules.gate.is_some() && !self.prioritized && !has_breakers)
            .then(|| inner.gate.begin())
            .flatten();
        if let Some(read) = gate {
            match check_gate(inner, &read, now, self.count) {
                Ok(()) => return Ok(ready(admit!(system_place))),
                Err(stop) if stop.refused() => {
                    release_limited(inner, origin_slot, entrance_slot, system_place);
                    EntryState::refuse(inner, origin_slot, entrance_slot, now, self.count, inbound);
                    return Err(stop.into_error(inner, &read.rule(stop.rule()), now));
                }
                // A reload is rewriting the gate: the rule set decides.
                Err(_) => {}
            }
        }
        let caller = Caller {
            prioritized: self.prioritized,
            origin: self.origin,
            origin_slot,
            entrance: self.entrance,
            entrance_slot,
        };
        let mut held = Held::default();
        held.limited = system_place;
        let verdict = check_flow(inner, rules, &caller, now, self.count, &mut held);
        if has_breakers && !matches!(verdict, Verdict::Block(_)) {
            // Sentinel's DegradeSlot comes after the FlowSlot; a refusal here gives back what
            // the flow rules reserved.
            if let Err(error) = pass_breakers(inner, now, &mut held) {
                give_back(inner, rules, &caller, &held);
                EntryState::refuse(inner, origin_slot, entrance_slot, now, self.count, inbound);
                return Err(error);
            }
        }
        match verdict {
            Verdict::Pass => Ok(ready(admit!(held.limited))),
            Verdict::Wait(wait) => {
                let queue = Queue {
                    origin: origin_slot,
                    entrance: entrance_slot,
                    occupied: false,
                };
                Ok(queued(wait, held, rules, queue))
            }
            Verdict::Occupied(wait) => {
                let queue = Queue {
                    origin: origin_slot,
                    entrance: entrance_slot,
                    occupied: true,
                };
                Ok(queued(wait, held, rules, queue))
            }
            Verdict::Block(refusal) => {
                EntryState::refuse(inner, origin_slot, entrance_slot, now, self.count, inbound);
                Err(refusal.into_error(inner, rules))
            }
        }
    }

    /// Attempts the entry without waiting: admitted now, queued (with the wait), or refused.
    ///
    /// # Errors
    ///
    /// A [`BlockError`] saying which check refused it and why.
    pub fn try_enter(self) -> Result<Admission<'a>, BlockError> {
        let resource = self.resolve()?;
        let inner = &*resource.inner;
        self.enter_fast(
            resource,
            |state| {
                Ok(Admission::Ready(Entry {
                    resource: inner,
                    state,
                }))
            },
            Err,
            || self.try_enter_checked(resource),
        )
    }

    /// [`try_enter`](Self::try_enter) for a resource with rules to check.
    #[inline(never)]
    fn try_enter_checked(&self, resource: &'a Resource) -> Result<Admission<'a>, BlockError> {
        let inner = &*resource.inner;
        let (count, inbound) = (self.count, self.traffic == TrafficType::Inbound);
        self.decide(
            resource,
            |state| {
                Admission::Ready(Entry {
                    resource: inner,
                    state,
                })
            },
            |wait, held, rules, queue| {
                Admission::Queued(Pending::new(
                    inner,
                    PendingState::new(rules, queue, held, wait, count, inbound),
                ))
            },
        )
    }

    /// Attempts the entry, waiting on the clock if a pacing rule queues it
    /// ([`Clock::sleep`](crate::Clock::sleep): the thread sleeps, a `ManualClock` advances).
    ///
    /// # Errors
    ///
    /// A [`BlockError`] saying which check refused it and why.
    #[inline]
    pub fn enter(self) -> Result<Entry<'a>, BlockError> {
        let resource = self.resolve()?;
        let inner = &*resource.inner;
        self.enter_fast(
            resource,
            |state| {
                Ok(Entry {
                    resource: inner,
                    state,
                })
            },
            Err,
            || self.enter_checked(resource),
        )
    }

    /// The short path of every way in: a resource without rules (and, for inbound traffic, an
    /// instance without system rules) admits at once, and so does one whose rules its gate holds
    /// (every rule a QPS reject that every caller meets), for a caller that borrows nothing,
    /// after the gate's check, inlined here; the rule set is not touched. Anything else, or a
    /// reload that rewrites the gate during the check, goes to `slow`.
    ///
    /// The outcomes are built by the caller's closures, so that each way in returns its own
    /// result without copying it through another (a refusal's error is written once, where it
    /// is returned).
    #[inline(always)]
    fn enter_fast<R>(
        &self,
        resource: &'a Resource,
        admitted: impl FnOnce(EntryState) -> R,
        refused: impl FnOnce(BlockError) -> R,
        slow: impl FnOnce() -> R,
    ) -> R {
        let inner = &*resource.inner;
        let inbound = self.traffic == TrafficType::Inbound;
        // Relaxed flags, as in `decide`.
        let has_flow = inner.has_flow.load(Ordering::Relaxed);
        let others = inner.has_breakers.load(Ordering::Relaxed)
            || (inbound && inner.core.has_system.load(Ordering::Relaxed));
        if others {
            return slow();
        }
        let gate = match (has_flow, self.prioritized) {
            (false, _) => None,
            (true, false) => match inner.gate.begin() {
                Some(read) => Some(read),
                None => return slow(),
            },
            (true, true) => return slow(),
        };
        let now = inner.clock.now_nanos();
        let (origin, entrance) = self.child_slots(inner);
        if let Some(read) = gate {
            if let Err(stop) = check_gate(inner, &read, now, self.count) {
                // Most refusals count on the thread's lines inline (see `refuse_short`).
                if stop.refused()
                    && ChildSlot::both_none(origin, entrance)
                    && refuse_short(inner, now, self.count, inbound)
                {
                    let rule = read.rule(stop.rule());
                    return refusal(inner, stop.current(), rule.count, rule.id, now, refused);
                }
                let stopped = Stopped {
                    read,
                    stop,
                    now,
                    origin,
                    entrance,
                };
                return self.stopped_at_gate(inner, stopped, refused, slow);
            }
        }
        admitted(EntryState::admit(
            inner, origin, entrance, now, self.count, inbound, 0, false,
        ))
    }

    /// [`enter_fast`](Self::enter_fast) when the gate's check stopped and `refuse_short` could
    /// not count the refusal: a rule refused (the refusal is counted on every node of the entry
    /// and returned), or a reload rewrote the gate meanwhile (the rule set decides).
    #[inline(never)]
    fn stopped_at_gate<R>(
        &self,
        inner: &ResourceInner,
        stopped: Stopped<'_>,
        refused: impl FnOnce(BlockError) -> R,
        slow: impl FnOnce() -> R,
    ) -> R {
        if !stopped.stop.refused() {
            return slow();
        }
        let inbound = self.traffic == TrafficType::Inbound;
        let (now, origin, entrance) = (stopped.now, stopped.origin, stopped.entrance);
        EntryState::refuse(inner, origin, entrance, now, self.count, inbound);
        let rule = stopped.read.rule(stopped.stop.rule());
        refused(stopped.stop.into_error(inner, &rule, now))
    }

    /// [`enter`](Self::enter) for a resource with rules to check.
    #[inline(never)]
    fn enter_checked(&self, resource: &'a Resource) -> Result<Entry<'a>, BlockError> {
        let inner = &*resource.inner;
        let (count, inbound) = (self.count, self.traffic == TrafficType::Inbound);
        self.decide(
            resource,
            |state| Entry {
                resource: inner,
                state,
            },
            |wait, held, _rules, queue| {
                inner.clock.sleep(wait);
                let now = inner.clock.now_nanos();
                rebase_probes(inner, &held, now);
                let state = EntryState::admit(
                    inner,
                    queue.origin,
                    queue.entrance,
                    now,
                    count,
                    inbound,
                    held.limited,
                    queue.occupied,
                );
                Entry {
                    resource: inner,
                    state,
                }
            },
        )
    }

    /// [`enter`](Self::enter), returning an owned (`'static`) entry.
    ///
    /// # Errors
    ///
    /// A [`BlockError`] saying which check refused it and why.
    pub fn enter_owned(self) -> Result<OwnedEntry, BlockError> {
        let resource = self.resolve()?.clone();
        let entry = self.enter()?;
        let state = entry.state.clone();
        // The owned entry completes the admission: this guard must not.
        std::mem::forget(entry);
        Ok(OwnedEntry { resource, state })
    }
}

/// The block of a gate rule (see [`refusal_error`]), handed to `refused`: out of line (a call
/// with its arguments in registers, that saves none), so that the block is written once, into
/// the caller's result. Inlined, it was built in a temporary and copied into the result with
/// loads wider than its stores, which then waited for those stores to reach the cache.
#[inline(never)]
fn refusal<R>(
    inner: &ResourceInner,
    current: i64,
    threshold: f64,
    rule_id: u32,
    now: u64,
    refused: impl FnOnce(BlockError) -> R,
) -> R {
    refused(refusal_error(inner, current, threshold, rule_id, now))
}

/// Sentinel's `DegradeSlot`: the resource's breakers; probe places taken are noted in `held`.
#[inline(never)]
fn pass_breakers(inner: &ResourceInner, now: u64, held: &mut Held) -> Result<(), BlockError> {
    let breakers = inner.breakers.load();
    let Some(breakers) = breakers.as_ref() else {
        return Ok(());
    };
    match breakers.try_pass(now) {
        Ok(probe) => {
            held.probes = probe;
            held.decided = now;
            Ok(())
        }
        Err(block) => Err(breaker_blocked(inner, block)),
    }
}

#[cold]
#[inline(never)]
fn breaker_blocked(inner: &ResourceInner, block: BreakerBlock) -> BlockError {
    BlockError::new(
        BlockKind::Breaker,
        inner.name_number,
        block.observed,
        block.threshold,
    )
    .with_rule(block.rule_number)
    .with_retry_after(block.retry_after)
}

/// Sentinel's `SystemSlot`: the system rules, against the global inbound node. A
/// `max_concurrency` is checked last and exactly: the entry's place is taken in the same step
/// (`Ok(LIMITED_INBOUND)`), so that at most that many inbound entries are in flight.
#[inline(never)]
fn check_system(inner: &ResourceInner, now: u64, count: u32) -> Result<u8, BlockError> {
    let core = &inner.core;
    let rules = core.system.load();
    rules
        .check_reads(&core.inbound, &*core.probe, now, count, false)
        .map_err(|block| system_blocked(inner, block))?;
    let Some((max, rule)) = rules.max_concurrency() else {
        return Ok(0);
    };
    match try_increment(core.inbound.limited(), |in_flight| in_flight < max) {
        Ok(()) => Ok(LIMITED_INBOUND),
        Err(in_flight) => Err(system_blocked(
            inner,
            SystemBlock::new(SystemCheck::Concurrency, rule, in_flight as f64, max as f64),
        )),
    }
}

#[cold]
#[inline(never)]
fn system_blocked(inner: &ResourceInner, block: SystemBlock) -> BlockError {
    BlockError::new(
        BlockKind::System(block.check),
        inner.name_number,
        block.observed,
        block.threshold,
    )
    .with_rule(block.rule_number)
}

impl<'a> EntryBuilder<'a> {
    /// [`try_enter`](Self::try_enter), returning an owned (`'static`) admission: for response
    /// futures and spawned tasks that wait out a queueing rule.
    ///
    /// # Errors
    ///
    /// A [`BlockError`] saying which check refused it and why.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::{Behavior, FlowRule};
    /// use spillway::{ManualClock, OwnedAdmission, Spillway};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// spillway.load_flow_rules(vec![FlowRule::qps("pace", "export", 10.0)
    ///     .with_behavior(Behavior::Throttle { max_queueing_time: Duration::from_secs(1) })])?;
    /// let _first = spillway.entry("export").try_enter_owned()?;
    /// let OwnedAdmission::Queued(pending) = spillway.entry("export").try_enter_owned()? else {
    ///     unreachable!("paced 100 ms apart")
    /// };
    /// let pending = std::thread::spawn(move || pending).join().unwrap(); // 'static
    /// clock.advance(pending.wait());
    /// let entry = pending.enter();
    /// # drop(entry);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_enter_owned(self) -> Result<OwnedAdmission, BlockError> {
        let resource = self.resolve()?;
        self.enter_fast(
            resource,
            |state| {
                Ok(OwnedAdmission::Ready(OwnedEntry {
                    resource: resource.clone(),
                    state,
                }))
            },
            Err,
            || self.try_enter_owned_checked(resource),
        )
    }

    /// [`try_enter_owned`](Self::try_enter_owned) for a resource with rules to check.
    #[inline(never)]
    fn try_enter_owned_checked(
        &self,
        resource: &'a Resource,
    ) -> Result<OwnedAdmission, BlockError> {
        let (count, inbound) = (self.count, self.traffic == TrafficType::Inbound);
        self.decide(
            resource,
            |state| {
                OwnedAdmission::Ready(OwnedEntry {
                    resource: resource.clone(),
                    state,
                })
            },
            |wait, held, rules, queue| {
                OwnedAdmission::Queued(OwnedPending::new(
                    resource.clone(),
                    PendingState::new(rules, queue, held, wait, count, inbound),
                ))
            },
        )
    }
}

/// An owned [`Admission`]: see [`EntryBuilder::try_enter_owned`].
#[derive(Debug)]
pub enum OwnedAdmission {
    /// Admitted now.
    Ready(OwnedEntry),
    /// Admitted after [`OwnedPending::wait`]; dropping it gives the slot back.
    Queued(OwnedPending),
}

impl fmt::Debug for EntryBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.target {
            Target::Name(_, name) => name,
            Target::Handle(resource) => resource.name(),
        };
        f.debug_struct("EntryBuilder")
            .field("resource", &name)
            .field("count", &self.count)
            .field("origin", &self.origin)
            .field("entrance", &self.entrance)
            .field("traffic", &self.traffic)
            .field("prioritized", &self.prioritized)
            .finish()
    }
}
