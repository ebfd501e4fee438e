//! Checking an entry against its resource's flow rules, all or nothing.

use super::guard::short_lines;
use super::places::{release_limited, LIMITED_ENTRANCE, LIMITED_ORIGIN, LIMITED_RESOURCE};
use crate::block::{BlockError, BlockKind};
use crate::flow::{
    try_acquire_on, whole_count, AdmissionRing, Admitted, Controller, Decision, GateRead, GateRule,
    LimitApp, QpsReject, ResourceRules, Slot, Strategy,
};
use crate::resource::{ChildSlot, ResourceInner};
use crate::stats::ResourceNode;
use crate::sync::{cached_thread_slot, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Most queueing (throttle or warm-up + throttle) rules one entry may be queued by.
pub(crate) const MAX_QUEUED: usize = 4;

/// Who is entering: the names and the child-node slots already resolved for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller<'a> {
    pub(crate) prioritized: bool,
    pub(crate) origin: Option<&'a str>,
    pub(crate) origin_slot: ChildSlot,
    pub(crate) entrance: Option<&'a str>,
    pub(crate) entrance_slot: ChildSlot,
}

/// Reservations an admission holds: places on exact in-flight counters, and queue slots.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Held {
    pub(crate) limited: u8,
    /// The entry holds probe places of half-open breakers, taken at `decided`.
    pub(crate) probes: bool,
    pub(crate) decided: u64,
    /// Queue slots taken, with the index of the rule that took each; `None` (one byte to write)
    /// until a queueing rule takes one, so that the common path initialises nothing more.
    queued: Option<Queued>,
    /// Admissions counted by QPS reject rules, likewise `None` until one counts.
    counted: Option<Counted>,
}

/// The queue slots an entry holds.
/// Admissions QPS reject rules counted for one entry (at most `MAX_COUNTED`; further rules read
/// the window instead).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counted {
    admitted: [Admitted; MAX_COUNTED],
    rules: [u8; MAX_COUNTED],
    len: u8,
}

/// Most QPS reject rules of one resource that count their own admissions for one entry.
pub(crate) const MAX_COUNTED: usize = 4;

impl Held {
    fn has_room_to_count(&self) -> bool {
        self.counted
            .as_ref()
            .map_or(true, |counted| usize::from(counted.len) < MAX_COUNTED)
    }

    fn count(&mut self, index: usize, admitted: Admitted) {
        let counted = self.counted.get_or_insert_with(Counted::default);
        counted.admitted[usize::from(counted.len)] = admitted;
        // Validation caps rules per resource well under 256.
        counted.rules[usize::from(counted.len)] = index as u8;
        counted.len += 1;
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Queued {
    slots: [Slot; MAX_QUEUED],
    rules: [u8; MAX_QUEUED],
    len: u8,
}

/// What the flow rules decided (the reservations are in the caller's [`Held`]).
#[derive(Debug)]
pub(crate) enum Verdict {
    Pass,
    Wait(Duration),
    /// A prioritized entry borrowed its passes from a future bucket (Sentinel's occupy): it
    /// waits, then enters without counting a pass now (the borrowed bucket counts it).
    Occupied(Duration),
    Block(Refusal),
}

/// The node a rule reads.
enum Selected<'a> {
    /// One of this resource's nodes, with its `LIMITED_*` bit.
    Own(&'a ResourceNode, u8),
    /// Another resource's node (`relate`), kept alive for the check.
    Related(Arc<ResourceInner>),
}

impl Selected<'_> {
    fn node(&self) -> &ResourceNode {
        match self {
            Selected::Own(node, _) => node,
            Selected::Related(resource) => &resource.node,
        }
    }
}

/// Sentinel's `selectNodeByRequesterAndStrategy`.
fn select<'a>(
    resource: &'a ResourceInner,
    rules: &ResourceRules,
    index: usize,
    caller: &Caller<'_>,
) -> Option<Selected<'a>> {
    let compiled = &rules.rules[index];
    let origin = caller.origin.unwrap_or("");
    let by_origin = match &compiled.rule.limit_app {
        LimitApp::Origin(named) => {
            if named != origin || origin == "default" || origin == "other" {
                return None;
            }
            true
        }
        LimitApp::Default => false,
        LimitApp::Other => {
            if !rules.is_other_origin(origin) {
                return None;
            }
            true
        }
    };
    match &compiled.rule.strategy {
        Strategy::Direct if by_origin => resource
            .origins
            .node(caller.origin_slot)
            .map(|node| Selected::Own(node, LIMITED_ORIGIN)),
        Strategy::Direct => Some(Selected::Own(&resource.node, LIMITED_RESOURCE)),
        Strategy::Relate { .. } => compiled
            .related
            .as_ref()
            .and_then(|weak| weak.upgrade())
            .map(Selected::Related),
        Strategy::Chain { entrance } => {
            if caller.entrance != Some(entrance.as_str()) {
                return None;
            }
            resource
                .entrances
                .node(caller.entrance_slot)
                .map(|node| Selected::Own(node, LIMITED_ENTRANCE))
        }
    }
}

/// Why a rule refused an entry, compact: the [`BlockError`] (three times the size) is built
/// only where it is returned, so that it is not copied out through every layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refusal {
    index: usize,
    observed: f64,
    threshold: f64,
    retry_after: Duration,
}

impl Refusal {
    /// The block of rule `index` of `rules`.
    #[inline]
    pub(crate) fn into_error(self, resource: &ResourceInner, rules: &ResourceRules) -> BlockError {
        BlockError::new(
            BlockKind::Flow,
            resource.name_number,
            self.observed,
            self.threshold,
        )
        .with_rule(rules.rules[self.index].id_number)
        .with_retry_after(self.retry_after)
    }
}

/// Checks every rule that applies, in order, recording reservations in `held`. A later block
/// gives back what earlier rules reserved (places in flight, queue slots).
pub(crate) fn check_flow(
    resource: &ResourceInner,
    rules: &ResourceRules,
    caller: &Caller<'_>,
    now: u64,
    count: u32,
    held: &mut Held,
) -> Verdict {
    let mut wait = 0u64;
    for index in 0..rules.rules.len() {
        let Some(selected) = select(resource, rules, index, caller) else {
            continue;
        };
        let compiled = &rules.rules[index];
        let node = selected.node();
        let block = match &*compiled.controller {
            Controller::Reject(controller, ring) => {
                let admissions = ring.map(|ring| resource.rings.get(ring));
                match admit_reject(controller, admissions, &selected, held, index, now, count) {
                    Ok(()) => None,
                    Err(current) => {
                        if caller.prioritized {
                            // Sentinel's DefaultController: borrow from the next buckets if one
                            // frees room within the occupy timeout; later rules are not checked.
                            let timeout = compiled.rule.occupy_timeout;
                            if let Some(wait) =
                                node.try_occupy_next(now, count, controller.count(), timeout)
                            {
                                let wait_nanos = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
                                let at = now.saturating_add(wait_nanos);
                                node.add_waiting(at, u64::from(count));
                                node.add_occupied_pass(now, u64::from(count));
                                if let Some(admissions) =
                                    admissions.filter(|admissions| admissions.is_ready())
                                {
                                    admissions.add(at / node.second_window().bucket_nanos(), count);
                                }
                                return Verdict::Occupied(wait);
                            }
                        }
                        Some((
                            current as f64,
                            controller.count(),
                            until_next_bucket(node, now),
                        ))
                    }
                }
            }
            Controller::WarmUp(controller) => controller
                .check_current(node, now, count)
                .err()
                .map(|(current, allowed)| (current as f64, allowed, until_next_bucket(node, now))),
            Controller::Throttle(controller) => {
                queue(held, &mut wait, index, controller.reserve(now, count)).then(|| {
                    let cost = Duration::from_nanos(controller.cost_nanos(count));
                    (node.pass_qps(now), compiled.rule.count, cost)
                })
            }
            Controller::WarmUpThrottle(controller) => {
                let reserved = controller.reserve(node, now, count);
                queue(held, &mut wait, index, reserved).then(|| {
                    (
                        node.pass_qps(now),
                        compiled.rule.count,
                        until_next_bucket(node, now),
                    )
                })
            }
            Controller::Concurrency { count: limit } => concurrency(&selected, held, *limit, count)
                .map(|in_flight| (in_flight as f64, *limit, until_next_bucket(node, now))),
        };
        if let Some((observed, threshold, retry_after)) = block {
            give_back(resource, rules, caller, held);
            *held = Held::default();
            return Verdict::Block(Refusal {
                index,
                observed,
                threshold,
                retry_after,
            });
        }
    }
    if wait > 0 {
        Verdict::Wait(Duration::from_nanos(wait))
    } else {
        Verdict::Pass
    }
}

/// A QPS reject rule's check. On the resource's own node (a rule every caller meets) the rule
/// counts its admissions itself and admits by compare-and-swap, recorded in `held` to give back
/// if a later rule refuses; elsewhere it reads the node's pass QPS, as Sentinel does. `Err`
/// carries the truncated pass QPS that refused.
#[inline]
fn admit_reject(
    controller: &QpsReject,
    admissions: Option<&AdmissionRing>,
    selected: &Selected<'_>,
    held: &mut Held,
    index: usize,
    now: u64,
    count: u32,
) -> Result<(), i64> {
    let node = selected.node();
    let window = node.second_window();
    let counts_all = matches!(selected, Selected::Own(_, LIMITED_RESOURCE));
    if let Some(admissions) = admissions {
        if counts_all && held.has_room_to_count() && admissions.ready(window, now) {
            let current = window.current_id(now);
            let whole = whole_count(controller.count());
            let admitted = admissions.admit(window, current, count, controller.count(), whole)?;
            held.count(index, admitted);
            return Ok(());
        }
    }
    controller.check_current(node, now, count)
}

/// Why [`check_gate`] stopped: rule `rule` refused the entry, seeing the truncated pass QPS
/// `current`; or (`rule == CHANGED`) a reload rewrote the gate during the check, and nothing is
/// held. Two words, so that it stays in registers: an enum here was built in memory and read
/// back wider than it was written, a store-forwarding stall on every refusal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GateStop {
    rule: usize,
    current: i64,
}

impl GateStop {
    const CHANGED: usize = usize::MAX;

    /// Whether a rule refused the entry (otherwise the rule set must decide).
    #[inline]
    pub(crate) fn refused(&self) -> bool {
        self.rule != Self::CHANGED
    }

    /// The block, built where it is returned, with the numbers of the rule that refused (the
    /// gate's rule number [`rule`](Self::rule)).
    #[inline]
    pub(crate) fn into_error(
        self,
        resource: &ResourceInner,
        rule: &GateRule,
        now: u64,
    ) -> BlockError {
        refusal_error(resource, self.current, rule.count, rule.id, now)
    }

    /// Which of the gate's rules refused.
    #[inline]
    pub(crate) fn rule(&self) -> usize {
        self.rule
    }

    /// The truncated pass QPS the refusing rule saw.
    #[inline]
    pub(crate) fn current(&self) -> i64 {
        self.current
    }
}

/// The block of a gate rule (count `threshold`, id number `rule_id`) that saw the truncated
/// pass QPS `current`.
#[inline(always)]
pub(crate) fn refusal_error(
    resource: &ResourceInner,
    current: i64,
    threshold: f64,
    rule_id: u32,
    now: u64,
) -> BlockError {
    BlockError::new(
        BlockKind::Flow,
        resource.name_number,
        current as f64,
        threshold,
    )
    .with_retry_after_nanos(nanos_to_next_bucket(&resource.node, now))
    .with_rule(rule_id)
}

/// Counts a refusal of an entry with neither an origin nor an entrance (on the resource's node
/// and, inbound, the global inbound node) on the thread's lines, if that takes no slow step;
/// otherwise returns false, with nothing written. It makes no call, so that the path it is
/// inlined on needs no registers saved (as `EntryState::complete_short`).
///
/// The caller builds the block ([`refusal_error`]) out of line, into its result: built here and
/// returned in an `Option`, it was written field by field and then copied with wider loads,
/// which waited for those stores to reach the cache (a refusal took 25 ns instead of 15).
#[inline(always)]
pub(crate) fn refuse_short(resource: &ResourceInner, now: u64, count: u32, inbound: bool) -> bool {
    let Some(slot) = cached_thread_slot() else {
        return false;
    };
    let Some((line, global)) = short_lines(resource, slot, now, inbound) else {
        return false;
    };
    line.block(u64::from(count));
    if let Some(global) = global {
        global.block(u64::from(count));
    }
    true
}

/// [`check_flow`] for rules a gate holds (QPS reject rules that every caller meets, each
/// counting on a ring of the resource), for callers that are not prioritized: the same decisions
/// (each rule counts its admission; a refusal gives back what the earlier ones counted), on a
/// path short enough to stay inlined, with a result small enough to stay in registers.
#[inline(always)]
pub(crate) fn check_gate(
    resource: &ResourceInner,
    read: &GateRead<'_>,
    now: u64,
    count: u32,
) -> Result<(), GateStop> {
    let first = admit_gate_rule(resource, read, 0, now, count)?;
    if read.len() > 1 {
        return check_gate_rest(resource, read, first, now, count);
    }
    Ok(())
}

/// [`check_gate`]'s rules after the first, with what the first counted.
#[inline(never)]
fn check_gate_rest(
    resource: &ResourceInner,
    read: &GateRead<'_>,
    first: Admitted,
    now: u64,
    count: u32,
) -> Result<(), GateStop> {
    let mut counted = [first; MAX_COUNTED];
    for index in 1..read.len() {
        match admit_gate_rule(resource, read, index, now, count) {
            Ok(admitted) => counted[index] = admitted,
            Err(stop) => {
                for (earlier, &admitted) in counted[..index].iter().enumerate() {
                    if admitted.count > 0 {
                        resource
                            .rings
                            .get(read.rule(earlier).ring)
                            .give_back(admitted);
                    }
                }
                return Err(stop);
            }
        }
    }
    Ok(())
}

/// Checks rule `index` of the gate, counting its admission on its ring.
#[inline(always)]
fn admit_gate_rule(
    resource: &ResourceInner,
    read: &GateRead<'_>,
    index: usize,
    now: u64,
    count: u32,
) -> Result<Admitted, GateStop> {
    let rule = read.rule(index);
    if !read.unchanged() {
        return Err(GateStop {
            rule: GateStop::CHANGED,
            current: 0,
        });
    }
    let node = &resource.node;
    let window = node.second_window();
    let admissions = resource.rings.get(rule.ring);
    let result = if admissions.ready(window, now) {
        let bucket = window.current_id(now);
        admissions.admit(window, bucket, count, rule.count, rule.whole_count)
    } else {
        // A window with more buckets than a ring covers: Sentinel's read of the window.
        QpsReject::new(rule.count)
            .check_current(node, now, count)
            .map(|()| Admitted::default())
    };
    result.map_err(|current| GateStop {
        rule: index,
        current,
    })
}

/// Gives back an admission rule `index` (a QPS reject rule) counted for a refused entry.
fn give_back_admission(
    resource: &ResourceInner,
    rules: &ResourceRules,
    index: usize,
    admitted: Admitted,
) {
    if let Controller::Reject(_, Some(ring)) = &*rules.rules[index].controller {
        if admitted.count > 0 {
            resource.rings.get(*ring).give_back(admitted);
        }
    }
}

/// Records a queueing decision and the slot it took; `true` if it blocks.
fn queue(
    held: &mut Held,
    wait: &mut u64,
    index: usize,
    reserved: (Decision, Option<Slot>),
) -> bool {
    let (decision, slot) = reserved;
    if let Some(slot) = slot {
        // Validation caps queueing rules per resource at MAX_QUEUED.
        let queued = held.queued.get_or_insert_with(Queued::default);
        queued.slots[usize::from(queued.len)] = slot;
        queued.rules[usize::from(queued.len)] = index as u8;
        queued.len += 1;
    }
    match decision {
        Decision::Pass => false,
        Decision::Wait(duration) => {
            *wait = (*wait).max(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
            false
        }
        Decision::Block => true,
    }
}

/// Exact concurrency check and count. Returns the in-flight count seen if it blocks.
fn concurrency(selected: &Selected<'_>, held: &mut Held, limit: f64, count: u32) -> Option<u64> {
    match selected {
        Selected::Own(node, bit) => {
            let counter = node.limited();
            if held.limited & bit != 0 {
                // This entry already holds a place here (an earlier rule on the same node): check
                // the others in flight against this rule too.
                let others = counter.load(Ordering::Acquire).saturating_sub(1);
                return ((others as f64 + f64::from(count)) > limit).then_some(others);
            }
            match try_acquire_on(counter, limit, count) {
                Ok(()) => {
                    held.limited |= bit;
                    None
                }
                Err(in_flight) => Some(in_flight),
            }
        }
        // Another resource's concurrency is read, not counted (Sentinel's semantics).
        Selected::Related(resource) => {
            let in_flight = resource.node.concurrency().max(0) as u64;
            ((in_flight as f64 + f64::from(count)) > limit).then_some(in_flight)
        }
    }
}

/// Time until the second window's current bucket ends (when the oldest counts start to leave).
#[inline]
fn until_next_bucket(node: &ResourceNode, now: u64) -> Duration {
    Duration::from_nanos(nanos_to_next_bucket(node, now))
}

/// [`until_next_bucket`] in nanoseconds.
#[inline]
fn nanos_to_next_bucket(node: &ResourceNode, now: u64) -> u64 {
    let window = node.second_window();
    // The window's cursor knows the current bucket: no division.
    let next = (window.current_id(now) + 1).saturating_mul(window.bucket_nanos());
    next.saturating_sub(now)
}

/// Releases every reservation in `held`.
#[inline]
pub(crate) fn give_back(
    resource: &ResourceInner,
    rules: &ResourceRules,
    caller: &Caller<'_>,
    held: &Held,
) {
    // Most refused entries hold nothing: decide that without a call.
    if held.limited != 0 || held.probes || held.queued.is_some() || held.counted.is_some() {
        give_back_held(resource, rules, caller, held);
    }
}

#[inline(never)]
fn give_back_held(
    resource: &ResourceInner,
    rules: &ResourceRules,
    caller: &Caller<'_>,
    held: &Held,
) {
    release_limited(
        resource,
        caller.origin_slot,
        caller.entrance_slot,
        held.limited,
    );
    if held.probes {
        if let Some(breakers) = resource.breakers.load().as_ref() {
            breakers.release(held.decided);
        }
    }
    if let Some(counted) = &held.counted {
        let taken = usize::from(counted.len);
        for (&index, &admitted) in counted.rules[..taken]
            .iter()
            .zip(&counted.admitted[..taken])
        {
            give_back_admission(resource, rules, usize::from(index), admitted);
        }
    }
    let Some(queued) = &held.queued else {
        return;
    };
    let taken = usize::from(queued.len);
    for (&index, &slot) in queued.rules[..taken].iter().zip(&queued.slots[..taken]) {
        let compiled = &rules.rules[usize::from(index)];
        // Only the last slot of a schedule can be given back; an earlier one stays unused.
        match &*compiled.controller {
            Controller::Throttle(throttle) => {
                throttle.give_back(slot);
            }
            Controller::WarmUpThrottle(throttle) => {
                throttle.give_back(slot);
            }
            _ => {}
        }
    }
}
