//! The decision pipeline: the one sequence every entry goes through, whichever way it comes in
//! ([`enter`](super::EntryBuilder::enter), [`try_enter`](super::EntryBuilder::try_enter), owned
//! or not).
//!
//! 1. **Resolve** the resource (a handle's at once, a name's through the registry) and the
//!    caller's origin and entrance nodes: `builder.rs`.
//! 2. **System** (inbound entries, when system rules are loaded): Sentinel's `SystemSlot`
//!    against the global inbound node; a `max_concurrency` takes its place here. This file.
//! 3. **Flow**: the resource's flow rules, all or nothing. When the resource's gate holds every
//!    rule (QPS reject rules every caller meets) and nothing follows, the gate decides on a short
//!    path (`gate_check.rs`); otherwise, or while a reload rewrites the gate, the rule set does
//!    (`flow_check.rs`). Rules in shadow mode count what they would refuse and refuse nothing.
//! 4. **The later kinds**, out of line, in the order of their list (`kinds.rs`; each kind's
//!    step, a [`Step`](crate::step::Step), is in its own module): the **cluster rules** (limits
//!    shared with other processes, decided from what this process holds: `cluster/step.rs`),
//!    for an entry with a key its **per-key rules** (`keyed/step.rs`), the **adaptive limits**
//!    (the resource's, then the one on all inbound traffic: `adaptive/step.rs`), the
//!    **breakers** (Sentinel's `DegradeSlot`: `breaker/step.rs`). Over an adaptive limit with a
//!    queue, an entry that can wait is handed back waiting for a place (`waiting.rs`), and goes
//!    on from the next step once it has one.
//! 5. **Admit, queue or refuse**: an admission counts on every node of the entry
//!    (`guard.rs`); a queued one waits for its slot (`pending.rs`); a refusal gives back what
//!    the earlier steps took (`held.rs`), is counted (`refusal.rs`) and returned as a
//!    [`BlockError`].
//! 6. **Exit**: the [`Entry`](super::Entry)'s drop records the completion, gives back its
//!    places, and tells each later kind that kept something, or that sees every exit
//!    (`guard.rs`).
//!
//! A step with nothing to check costs one flag test; a resource without rules admits after
//! the flags alone.

use super::builder::EntryBuilder;
use super::flow_check::{check_flow, Caller};
use super::gate_check::check_gate;
use super::held::{give_back, Held};
use super::pending::{Queue, Queued};
use super::places::{release_limited, LIMITED_INBOUND};
use super::refusal::{count_refusal, refusal_error};
use super::{EntryState, TrafficType};
use crate::block::{BlockError, BlockKind};
use crate::clock::Clock;
use crate::flow::{try_increment, Decision};
use crate::resource::{Resource, ResourceInner};
use crate::step::{At, Stop};
use crate::sync::Ordering;
use crate::system::{SystemBlock, SystemCheck};

/// Which steps have something to check, read from the resource's flags. Relaxed: a stale flag
/// only delays seeing a rule load by a moment, as a stale rule set would; the rules themselves
/// are read through their `ArcSwap`s.
#[derive(Clone, Copy)]
struct Steps {
    system: bool,
    flow: bool,
    /// A kind checked after the flow rules has rules here (`kinds.rs`): out of line.
    later: bool,
}

impl Steps {
    #[inline(always)]
    fn of(resource: &ResourceInner, inbound: bool) -> Self {
        Self {
            system: inbound && resource.core.has_system.load(Ordering::Relaxed),
            flow: resource.flow.present(),
            later: resource.reach(inbound).any(),
        }
    }
}

impl<'a> EntryBuilder<'a> {
    /// Runs the pipeline for `resource`: an admission is handed to `ready`, a queued one
    /// (paced, or waiting for a place if it `can_wait`) to `queued`, a refusal (already
    /// counted) to `refused`. Each way in builds its own result in these closures, so that
    /// none is copied through another.
    #[inline(always)]
    pub(super) fn run<R>(
        &self,
        resource: &'a Resource,
        can_wait: bool,
        ready: impl FnOnce(EntryState) -> R,
        queued: impl FnOnce(Queued<'_>) -> R,
        refused: impl FnOnce(BlockError) -> R,
    ) -> R {
        // 1. Resolve (the resource was resolved by the caller).
        let inner = &*resource.inner;
        let inbound = self.traffic == TrafficType::Inbound;
        let steps = Steps::of(inner, inbound);
        let now = inner.clock.now_nanos();
        let (origin, entrance) = self.child_slots(inner);
        let count = self.count;
        // An admission, counted on every node of the entry, holding the places `$held` says. A
        // macro, not a closure: the compiler outlined the closure, which then returned the state
        // through memory, and the caller's wider copy of it waited on those narrower stores.
        macro_rules! admit {
            ($limited:expr) => {
                EntryState::admit(
                    inner, origin, entrance, now, count, inbound, $limited, false,
                )
            };
        }

        // 2. System.
        let mut place = 0;
        if steps.system {
            match check_system(inner, now, count) {
                Ok(taken) => place = taken,
                Err(error) => {
                    count_refusal(inner, origin, entrance, now, count, inbound);
                    return refused(error);
                }
            }
        }
        // No flow rule and no later kind's rule: admitted.
        if !steps.flow && !steps.later {
            return ready(admit!(place));
        }

        // 3. Flow: the gate's short path when it holds every rule and no other step follows,
        // else the rule set.
        let mut guard = None;
        if steps.flow {
            if !steps.later && !self.prioritized {
                if let Some(read) = inner.flow.gate() {
                    match check_gate(inner, &read, now, count) {
                        Ok(()) => return ready(admit!(place)),
                        Err(stop) if stop.refused() => {
                            release_limited(inner, origin, entrance, place);
                            count_refusal(inner, origin, entrance, now, count, inbound);
                            let rule = read.rule(stop.rule());
                            return refusal(
                                inner,
                                stop.current(),
                                rule.count,
                                rule.id,
                                now,
                                refused,
                            );
                        }
                        // A reload is rewriting the gate: the rule set decides.
                        Err(_) => {}
                    }
                }
            }
            guard = Some(inner.flow.load());
        }
        let mut held = Held::holding(place);
        // Gives back what is held, counts the refusal, and returns the block.
        macro_rules! refuse {
            ($rules:expr, $error:expr) => {{
                give_back(inner, $rules, origin, entrance, inbound, &held);
                count_refusal(inner, origin, entrance, now, count, inbound);
                return refused($error);
            }};
        }
        let rules = guard.as_ref().and_then(|guard| guard.as_ref());
        let mut queue_for = None;
        if let Some(rules) = rules {
            let caller = Caller {
                prioritized: self.prioritized,
                origin: self.origin,
                origin_slot: origin,
                entrance: self.entrance,
                entrance_slot: entrance,
            };
            match check_flow(inner, rules, &caller, now, count, &mut held) {
                Ok(Decision::Wait(wait)) => queue_for = Some((wait, false)),
                Ok(Decision::Occupied(wait)) => queue_for = Some((wait, true)),
                // A pass (a refusal comes as its reason, below).
                Ok(_) => {}
                Err(refusal) => refuse!(Some(rules), refusal.into_error(inner, rules)),
            }
        }

        // The later kinds, in order: cluster and per-key rules, adaptive limits, breakers.
        let mut place = None;
        if steps.later {
            let at = At {
                resource: inner.name_number,
                now,
                count,
                keys: self.keys,
                can_wait,
                claim: self.claim.starting_at(now),
            };
            match held.later.take(inner.reach(inbound), &at, 0) {
                Ok(()) => {}
                Err(Stop::Refused(error)) => refuse!(rules.map(|rules| &**rules), error),
                Err(Stop::Waiting(wait)) => place = Some(wait),
            }
            // A per-key pacing rule queued the entry (admitted, or waiting for a place after
            // it): it waits for the longest queue.
            let wait = held.later.wait();
            if !wait.is_zero() {
                let (flow_wait, occupied) = queue_for.unwrap_or_default();
                queue_for = Some((flow_wait.max(wait), occupied));
            }
        }

        // 5. Admit or queue.
        if queue_for.is_none() && place.is_none() {
            return ready(admit!(held.limited).with_held(&held));
        }
        let (wait, occupied) = queue_for.unwrap_or_default();
        queued(Queued {
            wait,
            paced: queue_for.is_some(),
            place,
            decided: now,
            held,
            rules,
            queue: Queue {
                origin,
                entrance,
                occupied,
            },
        })
    }
}

/// The block of a gate rule (see [`refusal_error`]), handed to `refused`. Keep it out of line
/// (a call with its arguments in registers, that saves none): the block must be written once,
/// straight into the caller's result. Inlined, the compiler builds it in a temporary and copies
/// it with loads wider than the stores before them: a store-forwarding stall on every refusal.
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

/// Step 2, Sentinel's `SystemSlot`: the system rules, against the global inbound node. A
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
