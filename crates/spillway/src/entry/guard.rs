use super::held::Held;
use super::places::release_limited;
use crate::adaptive::Outcome;
use crate::clock::Clock;
use crate::kinds::Kept;
use crate::resource::{ChildSlot, ResourceInner};
use crate::stats::{ResourceNode, ShortLine};
use crate::step::{End, MARKS, PLACES};
use crate::sync::{cached_thread_slot, thread_slot};
use std::fmt;

/// What an entry must remember to record its completion.
#[derive(Debug, Clone)]
pub(crate) struct EntryState {
    pub(crate) origin: ChildSlot,
    pub(crate) entrance: ChildSlot,
    pub(crate) started_nanos: u64,
    pub(crate) count: u32,
    /// `INBOUND`, `ERROR` and `DROPPED` (the call was dropped: timed out, or refused downstream
    /// for overload, which an adaptive limit takes as a drop): one byte, so that with the
    /// places and rules it holds an entry's state stays four words (`entry::layout`).
    flags: u8,
    /// What the entry holds until it ends, in one byte so that one test tells a short exit
    /// whether it holds anything: in its low four bits ([`PLACES`]) the system and flow rules'
    /// places on exact in-flight counters (`LIMITED_*`, `places.rs`), in its high four
    /// ([`MARKS`]) which later kinds keep something (`kinds.rs`).
    pub(crate) limited: u8,
    /// The id number of the first rule in shadow mode that would have refused the entry, or
    /// `NO_SHADOW`.
    pub(crate) shadow: u32,
    /// What the later kinds marked in `limited` keep: six bytes, so that the state stays four
    /// words and an entry five (`entry::layout`).
    kept: Kept,
}

/// [`EntryState`] flags: the entry is inbound ...
const INBOUND: u8 = 1;
/// ... its call failed ...
const ERROR: u8 = 2;
/// ... its call was dropped ...
const DROPPED: u8 = 4;
/// ... its call reached no verdict (its caller gave up, or was at fault) ...
const ABANDONED: u8 = 8;
/// ... its call was paced by its caller (see [`EntryState::set_paced`]).
const PACED: u8 = 16;

/// [`EntryState::shadow`] when no shadow rule would have refused the entry.
const NO_SHADOW: u32 = u32::MAX;

/// Runs `$body` with `$node` bound to each node an entry counts in: the resource's, its
/// origin's, its entrance's, and (inbound) the global inbound node. A macro, so that the body is
/// inlined at each: as a closure the compiler called it out of line, four calls an entry.
macro_rules! for_each_node {
    ($resource:expr, $origin:expr, $entrance:expr, $inbound:expr, |$node:ident| $body:expr) => {{
        let resource: &ResourceInner = $resource;
        {
            let $node: &ResourceNode = &resource.node;
            $body;
        }
        let (origin, entrance): (ChildSlot, ChildSlot) = ($origin, $entrance);
        let inbound: bool = $inbound;
        // Most entries have neither an origin nor an entrance, and go out: one test for them.
        if !ChildSlot::both_none(origin, entrance) || inbound {
            if let Some($node) = resource.origins.node(origin) {
                $body;
            }
            if let Some($node) = resource.entrances.node(entrance) {
                $body;
            }
            if inbound {
                let $node: &ResourceNode = &resource.core.inbound;
                $body;
            }
        }
    }};
}

impl EntryState {
    /// Counts an admission: concurrency + 1 and `count` passes, on every node of the entry, in
    /// Sentinel's order. An entry that borrowed its passes (`occupied`) counts no pass now.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn admit(
        resource: &ResourceInner,
        origin: ChildSlot,
        entrance: ChildSlot,
        now: u64,
        count: u32,
        inbound: bool,
        limited: u8,
        occupied: bool,
    ) -> Self {
        let slot = thread_slot();
        let passes = if occupied { 0 } else { u64::from(count) };
        for_each_node!(resource, origin, entrance, inbound, |node| {
            node.record_admission(slot, now, passes);
        });
        Self {
            origin,
            entrance,
            started_nanos: now,
            count,
            flags: if inbound { INBOUND } else { 0 },
            limited,
            shadow: NO_SHADOW,
            kept: Kept::default(),
        }
    }

    /// The state, noting from what the admission holds the shadow rule that would have refused
    /// the entry, if any, and what the later kinds keep until it ends.
    #[inline(always)]
    pub(crate) fn with_held(mut self, held: &Held) -> Self {
        if let Some(rule) = held.shadow() {
            self.shadow = rule;
        }
        let (marks, kept) = held.later.keep();
        self.limited |= marks;
        self.kept = kept;
        self
    }

    /// Whether the entry is inbound.
    #[inline(always)]
    pub(crate) fn inbound(&self) -> bool {
        self.flags & INBOUND != 0
    }

    /// Whether the call failed.
    #[inline(always)]
    pub(crate) fn error(&self) -> bool {
        self.flags & ERROR != 0
    }

    /// Marks the call as failed or not.
    #[inline(always)]
    pub(crate) fn set_error(&mut self, error: bool) {
        self.flags = if error {
            self.flags | ERROR
        } else {
            self.flags & !ERROR
        };
    }

    /// Whether the call was dropped.
    #[inline(always)]
    pub(crate) fn dropped(&self) -> bool {
        self.flags & DROPPED != 0
    }

    /// Marks the call as dropped.
    #[inline(always)]
    pub(crate) fn set_dropped(&mut self) {
        self.flags |= DROPPED;
    }

    /// Whether the call reached no verdict on what it protects.
    #[inline(always)]
    pub(crate) fn abandoned(&self) -> bool {
        self.flags & ABANDONED != 0
    }

    /// Marks the call as abandoned: it ends without a completion.
    #[inline(always)]
    pub(crate) fn set_abandoned(&mut self) {
        self.flags |= ABANDONED;
    }

    /// Marks the call as paced by its caller (it waited on its caller for much of its time,
    /// see [`OwnedEntry::set_waiting_on_caller`](crate::OwnedEntry::set_waiting_on_caller)):
    /// its end counts as any other's in the statistics, and gives no latency evidence: no
    /// sample to the adaptive limits, no verdict to the slow-call breakers.
    #[inline(always)]
    pub(crate) fn set_paced(&mut self) {
        self.flags |= PACED;
    }

    /// Whether the call was paced by its caller.
    #[inline(always)]
    pub(crate) fn paced(&self) -> bool {
        self.flags & PACED != 0
    }

    /// The id of the first rule in shadow mode that would have refused the entry.
    pub(crate) fn shadow_rule(&self) -> Option<&'static str> {
        if self.shadow == NO_SHADOW {
            return None;
        }
        crate::intern::name_of(self.shadow)
    }

    /// Counts a refusal of `count` permits on every node of the entry.
    #[inline(never)]
    pub(crate) fn refuse(
        resource: &ResourceInner,
        origin: ChildSlot,
        entrance: ChildSlot,
        now: u64,
        count: u32,
        inbound: bool,
    ) {
        let slot = thread_slot();
        let count = u64::from(count);
        for_each_node!(resource, origin, entrance, inbound, |node| {
            node.record_block(slot, now, count);
        });
    }

    /// Records the completion: RT in microseconds (saturating at zero should the clock read
    /// behind the start), completion and error counts, concurrency - 1, and the places held on
    /// exact in-flight counters. Called once per admission, by the drop of the one guard that
    /// holds the state ([`Entry`] or [`OwnedEntry`](crate::OwnedEntry)).
    ///
    /// Most exits take [`complete_short`](Self::complete_short), inlined where the guard drops:
    /// keep it free of calls, so that it needs no registers saved. Inbound exits take their own
    /// short path, out of line: keep it apart from the outbound one, whose every exit would
    /// otherwise save the registers the inbound one keeps live.
    #[inline(always)]
    pub(crate) fn complete(&self, resource: &ResourceInner) {
        if self.inbound() {
            self.complete_inbound(resource);
        } else if !self.complete_short(resource) {
            self.complete_long(resource);
        }
    }

    /// The exit of an outbound entry that counts on the resource's node alone and holds no
    /// place, on an instance whose clock reads inline, when the thread's line holds the current
    /// bucket: the completion on that line. Otherwise writes nothing and returns false.
    #[inline(always)]
    fn complete_short(&self, resource: &ResourceInner) -> bool {
        let Some((now, slot)) = self.short_exit(resource) else {
            return false;
        };
        let Some(line) = resource.node.short_line(slot, now) else {
            return false;
        };
        let (rt_micros, count, errors) = self.outcome(now);
        line.exit(rt_micros, count, errors);
        true
    }

    /// [`complete`](Self::complete) of an inbound entry: the completion on the thread's lines
    /// of the resource's node and the global inbound node, as in `complete_short`, or else the
    /// long path.
    #[inline(never)]
    fn complete_inbound(&self, resource: &ResourceInner) {
        let every_exit = resource.core.inbound_rules.sees_every_exit();
        if let Some((now, slot)) = self.short_exit(resource).filter(|_| !every_exit) {
            if let Some((line, Some(global))) = short_lines(resource, slot, now, true) {
                let (rt_micros, count, errors) = self.outcome(now);
                line.exit(rt_micros, count, errors);
                global.exit(rt_micros, count, errors);
                return;
            }
        }
        self.complete_long(resource);
    }

    /// The call answered now (see [`OwnedEntry::answered`](crate::OwnedEntry::answered)),
    /// having waited on its caller as `caller` says: the half-open breakers of its resource
    /// that can tell its probe's verdict now decide it. An abandoned call decides nothing; one
    /// its caller paced so far, nothing for a slow-call breaker. The clock is read only when a
    /// breaker of the resource is half-open.
    #[inline(never)]
    pub(crate) fn answered(&self, resource: &ResourceInner, caller: &super::CallerTime) {
        if self.abandoned() || !resource.slots.sees_every_exit() {
            return;
        }
        let reach = resource.reach(self.inbound());
        let started = self.started_nanos;
        Kept::answered(reach, |breakers| {
            let now = resource.clock.now_nanos();
            let rt_micros = now.saturating_sub(started) / 1_000;
            let paced = !caller.is_none() && caller.paced(started, now);
            breakers.on_answer(started, now, rt_micros, self.error(), paced);
        });
    }

    /// The time and the thread's slot for a short exit: an entry with neither an origin nor an
    /// entrance, that holds nothing, on a resource with no rules every exit reaches (breakers),
    /// whose clock reads inline.
    #[inline(always)]
    fn short_exit(&self, resource: &ResourceInner) -> Option<(u64, usize)> {
        // Relaxed, as the rule flags on entry.
        if self.limited != 0
            || self.flags & ABANDONED != 0
            || !ChildSlot::both_none(self.origin, self.entrance)
            || resource.slots.sees_every_exit()
        {
            return None;
        }
        Some((resource.clock.now_nanos_inline()?, cached_thread_slot()?))
    }

    /// The RT in microseconds, the completions and the errors of an exit at `now`.
    #[inline(always)]
    fn outcome(&self, now: u64) -> (u64, u64, u64) {
        let rt_micros = now.saturating_sub(self.started_nanos) / 1_000;
        let count = u64::from(self.count);
        (rt_micros, count, if self.error() { count } else { 0 })
    }

    /// [`complete`](Self::complete) on every node of the entry, through the window's slow steps.
    /// An abandoned entry (see [`Entry::mark_abandoned`]) only gives back what it holds: one
    /// fewer in flight on every node and every place, and nothing counted or learned (its end
    /// says nothing about what the entry protects); a half-open breaker's probe place goes
    /// back, so that another call probes instead.
    #[cold]
    #[inline(never)]
    fn complete_long(&self, resource: &ResourceInner) {
        let now = resource.clock.now_nanos();
        let slot = thread_slot();
        let rt_micros = now.saturating_sub(self.started_nanos) / 1_000;
        let count = u64::from(self.count);
        let (error, abandoned) = (self.error(), self.abandoned());
        for_each_node!(
            resource,
            self.origin,
            self.entrance,
            self.inbound(),
            |node| {
                if abandoned {
                    node.decrease_concurrency();
                } else {
                    node.record_exit(slot, now, rt_micros, count, error);
                }
            }
        );
        release_limited(resource, self.origin, self.entrance, self.limited & PLACES);
        let reach = resource.reach(self.inbound());
        // Relaxed, as the rule flags on entry.
        if self.limited & MARKS != 0 || reach.sees_every_exit() {
            let end = End {
                started: self.started_nanos,
                now,
                paced: self.paced(),
                rt_micros,
                count: self.count,
                error,
                // An abandoned call's end is no sample; a dropped one counts as a drop.
                outcome: if abandoned {
                    Outcome::Ignore
                } else if self.dropped() {
                    Outcome::Dropped
                } else {
                    Outcome::Success
                },
            };
            self.kept.exit(reach, self.limited, &end);
        }
    }
}

/// The thread's short lines (see [`ResourceNode::short_line`]) of an entry with neither an
/// origin nor an entrance: the resource's, and the global inbound node's if `inbound`. `None`
/// if either takes a slow step.
#[inline(always)]
pub(crate) fn short_lines(
    resource: &ResourceInner,
    slot: usize,
    now: u64,
    inbound: bool,
) -> Option<(ShortLine<'_>, Option<ShortLine<'_>>)> {
    let line = resource.node.short_line(slot, now)?;
    if !inbound {
        return Some((line, None));
    }
    let global = resource.core.inbound.short_line(slot, now)?;
    Some((line, Some(global)))
}

/// An admitted call. Dropping it (or calling [`exit`](Self::exit)) records the completion:
/// response time in microseconds, one completion, an error if it was marked, one fewer in flight.
///
/// It borrows the [`Resource`](crate::Resource) or [`Spillway`](crate::Spillway) it came from, so
/// it costs no reference counting; use [`OwnedEntry`](crate::OwnedEntry) where a `'static` value
/// is needed (spawned tasks, response futures).
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, Spillway};
///
/// let clock = ManualClock::new();
/// let spillway = Spillway::new_with_clock(clock.clone());
/// let resource = spillway.resource("payments")?;
/// let mut entry = resource.entry().enter()?;
/// clock.advance_millis(40);
/// if true { // the call failed
///     entry.mark_error();
/// }
/// entry.exit();
/// assert_eq!(resource.stats().error_qps, 1.0);
/// # Ok::<(), spillway::BlockError>(())
/// ```
#[must_use = "an entry records its completion when dropped; dropping it at once records an RT of ~0"]
pub struct Entry<'a> {
    pub(crate) resource: &'a ResourceInner,
    pub(crate) state: EntryState,
}

impl Entry<'_> {
    /// Marks the call as failed: its completion also counts as an error.
    pub fn mark_error(&mut self) {
        self.state.set_error(true);
    }

    /// Sets whether the call failed.
    pub fn set_error(&mut self, error: bool) {
        self.state.set_error(error);
    }

    /// Marks the call as dropped: it timed out, or was refused downstream for overload. An
    /// adaptive limit ([`AdaptiveRule`](crate::adaptive::AdaptiveRule)) takes its end as a drop
    /// (AIMD and Vegas shrink on one) rather than as a latency sample. It does not mark an error;
    /// [`mark_error`](Self::mark_error) does.
    pub fn mark_dropped(&mut self) {
        self.state.set_dropped();
    }

    /// Marks the call as abandoned: it reached no verdict on what the entry protects, because
    /// its caller gave up or was at fault (a malformed or cut-short request body, say). Its end
    /// gives back its place (one fewer in flight, and its places on concurrency limits) and
    /// counts nothing else: no completion, no response time, no error, and no sample for the
    /// breakers or the adaptive limits. Its pass stays counted.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let clock = ManualClock::new();
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// let resource = spillway.resource("uploads")?;
    /// let mut entry = resource.entry().enter()?;
    /// clock.advance_millis(900);
    /// entry.mark_abandoned(); // the client sent a malformed body
    /// entry.exit();
    /// let stats = resource.stats();
    /// assert_eq!((stats.pass_qps, stats.success_qps, stats.error_qps), (1.0, 0.0, 0.0));
    /// assert_eq!(stats.concurrency, 0);
    /// # Ok::<(), spillway::BlockError>(())
    /// ```
    pub fn mark_abandoned(&mut self) {
        self.state.set_abandoned();
    }

    /// Whether the call is marked as failed.
    pub fn is_error(&self) -> bool {
        self.state.error()
    }

    /// Says the call has answered, a failure or not as marked now: see
    /// [`OwnedEntry::answered`](crate::OwnedEntry::answered).
    pub fn answered(&self) {
        self.state.answered(self.resource, &super::CallerTime::NONE);
    }

    /// The resource's name.
    pub fn resource_name(&self) -> &str {
        &self.resource.name
    }

    /// When the entry was admitted, on the spillway's clock (nanoseconds).
    pub fn started_at_nanos(&self) -> u64 {
        self.state.started_nanos
    }

    /// The id of the first flow rule in shadow mode that would have refused this entry, if any
    /// (see [`FlowRule::with_shadow`](crate::flow::FlowRule::with_shadow)): the entry was
    /// admitted anyway.
    pub fn shadow_rule(&self) -> Option<&'static str> {
        self.state.shadow_rule()
    }

    /// Ends the entry now (the same as dropping it).
    pub fn exit(self) {}
}

impl Drop for Entry<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.state.complete(self.resource);
    }
}

impl fmt::Debug for Entry<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("resource", &self.resource.name)
            .field("state", &self.state)
            .finish()
    }
}
