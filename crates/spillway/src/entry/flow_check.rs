//! The flow step through the rule set: every rule that applies to the caller, in Sentinel's
//! order, all or nothing.

use super::held::Held;
use super::places::{LIMITED_ENTRANCE, LIMITED_ORIGIN, LIMITED_RESOURCE};
use super::refusal::{until_next_bucket, Refusal};
use crate::flow::{
    try_acquire_on, whole_count, AdmissionRing, Controller, Decision, LimitApp, QpsReject,
    ResourceRules, Slot, Strategy,
};
use crate::resource::{ChildSlot, ResourceInner};
use crate::stats::ResourceNode;
use crate::sync::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Who is entering: the names and the child-node slots already resolved for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller<'a> {
    pub(crate) prioritized: bool,
    pub(crate) origin: Option<&'a str>,
    pub(crate) origin_slot: ChildSlot,
    pub(crate) entrance: Option<&'a str>,
    pub(crate) entrance_slot: ChildSlot,
}

/// The node a rule reads.
enum Selected<'a> {
    /// One of this resource's nodes, with its `LIMITED_*` bit.
    Own(&'a ResourceNode, u8),
    /// Another resource's node (`relate`), kept alive for the check.
    Related(Arc<dyn crate::flow::RelatedNode>),
}

impl Selected<'_> {
    fn node(&self) -> &ResourceNode {
        match self {
            Selected::Own(node, _) => node,
            Selected::Related(resource) => resource.node(),
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

/// What the flow rules decided: [`Decision::Pass`], [`Decision::Wait`] or
/// [`Decision::Occupied`], with the reservations in the caller's [`Held`]; or the refusal.
pub(crate) type FlowOutcome = Result<Decision, Refusal>;

/// What one rule said: go (after `wait` nanoseconds, 0 for now), or it refuses.
enum RuleOutcome {
    Go { wait: u64, occupied: bool },
    Refuse(Refusal),
}

/// Checks every rule that applies, in order, recording reservations in `held`. A refusal gives
/// back what earlier rules reserved (places in flight, queue slots, counted admissions). A rule
/// in shadow mode never refuses: what it would refuse is counted on it, and the first such rule
/// is noted in `held`.
pub(crate) fn check_flow(
    resource: &ResourceInner,
    rules: &ResourceRules,
    caller: &Caller<'_>,
    now: u64,
    count: u32,
    held: &mut Held,
) -> FlowOutcome {
    let mut wait = 0u64;
    for index in 0..rules.rules.len() {
        let Some(selected) = select(resource, rules, index, caller) else {
            continue;
        };
        let compiled = &rules.rules[index];
        let shadow = compiled.rule.shadow;
        match check_rule(resource, rules, index, &selected, caller, now, count, held) {
            RuleOutcome::Go { wait: 0, .. } => {}
            RuleOutcome::Go {
                wait: borrowed,
                occupied: true,
            } => return Ok(Decision::Occupied(Duration::from_nanos(borrowed))),
            // A shadow throttle keeps its schedule but makes nobody wait.
            RuleOutcome::Go { .. } if shadow => {}
            RuleOutcome::Go {
                wait: rule_wait, ..
            } => wait = wait.max(rule_wait),
            RuleOutcome::Refuse(_) if shadow => {
                compiled.counters.count_shadow_refusal();
                held.note_shadow(compiled.id_number);
            }
            RuleOutcome::Refuse(refusal) => return Err(refusal),
        }
    }
    Ok(if wait > 0 {
        Decision::Wait(Duration::from_nanos(wait))
    } else {
        Decision::Pass
    })
}

/// Checks rule `index` on the node it selected.
#[allow(clippy::too_many_arguments)]
fn check_rule(
    resource: &ResourceInner,
    rules: &ResourceRules,
    index: usize,
    selected: &Selected<'_>,
    caller: &Caller<'_>,
    now: u64,
    count: u32,
    held: &mut Held,
) -> RuleOutcome {
    let compiled = &rules.rules[index];
    let node = selected.node();
    let refuse = |observed: f64, threshold: f64, retry_after: Option<Duration>| {
        RuleOutcome::Refuse(Refusal {
            index,
            observed,
            threshold,
            retry_after,
        })
    };
    let go = RuleOutcome::Go {
        wait: 0,
        occupied: false,
    };
    // A pacing rule's threshold is the rate it paces at now (a warm-up's current one), read
    // only for a refusal.
    let mut paced =
        |reserved, rate: &dyn Fn() -> f64, retry_after| match queue(held, index, reserved) {
            Some(wait) => RuleOutcome::Go {
                wait,
                occupied: false,
            },
            None => refuse(node.pass_qps(now), rate(), Some(retry_after)),
        };
    match &*compiled.controller {
        Controller::Reject(controller, ring) => {
            let admissions = ring.map(|ring| resource.flow.ring(ring));
            let Err(current) =
                admit_reject(controller, admissions, selected, held, index, now, count)
            else {
                return go;
            };
            if caller.prioritized && !compiled.rule.shadow {
                // Sentinel's DefaultController: borrow from the next buckets if one frees room
                // within the occupy timeout; later rules are not checked.
                let timeout = compiled.rule.occupy_timeout;
                if let Some(wait) = controller.occupy(node, now, count, timeout) {
                    let wait_nanos = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
                    if let Some(admissions) = admissions.filter(|admissions| admissions.is_ready())
                    {
                        let at = now.saturating_add(wait_nanos);
                        admissions.add(at / node.second_window().bucket_nanos(), count);
                    }
                    return RuleOutcome::Go {
                        wait: wait_nanos,
                        occupied: true,
                    };
                }
            }
            refuse(
                current as f64,
                controller.count(),
                Some(until_next_bucket(node, now)),
            )
        }
        Controller::WarmUp(controller) => match controller.check_current(node, now, count) {
            Ok(()) => go,
            Err((current, allowed)) => {
                refuse(current as f64, allowed, Some(until_next_bucket(node, now)))
            }
        },
        // A pacing rule: a slot now or after a wait, or a refusal with a retry-after hint.
        Controller::Throttle(controller) => paced(
            controller.reserve(now, count),
            &|| compiled.rule.count,
            Duration::from_nanos(controller.cost_nanos(count)),
        ),
        Controller::WarmUpThrottle(controller) => {
            let reserved = controller.reserve(node, now, count);
            paced(
                reserved,
                &|| controller.allowed_qps(),
                until_next_bucket(node, now),
            )
        }
        Controller::Concurrency { count: limit } => {
            match concurrency(selected, held, *limit, count, compiled.rule.shadow) {
                None => go,
                // No time to retry after: a place frees when a call ends, whenever that is.
                Some(in_flight) => refuse(in_flight as f64, *limit, None),
            }
        }
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
    let counts_all = matches!(selected, Selected::Own(_, LIMITED_RESOURCE));
    if let Some(admissions) = admissions {
        if counts_all && held.has_room_to_count() {
            let whole = whole_count(controller.count());
            let admitted = admissions.admit_on(node, now, count, controller.count(), whole)?;
            held.count(index, admitted);
            return Ok(());
        }
    }
    controller.check_current(node, now, count)
}

/// Records a queueing rule's decision and the slot it took: the wait in nanoseconds (0 to go
/// now), or `None` if it refuses.
fn queue(held: &mut Held, index: usize, reserved: (Decision, Option<Slot>)) -> Option<u64> {
    let (decision, slot) = reserved;
    if let Some(slot) = slot {
        held.queue(index, slot);
    }
    match decision {
        Decision::Pass => Some(0),
        Decision::Wait(duration) | Decision::Occupied(duration) => {
            Some(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX))
        }
        Decision::Block => None,
    }
}

/// Exact concurrency check and count. Returns the in-flight count seen if it refuses. A shadow
/// rule takes no place: it reads how many are in flight on its node.
fn concurrency(
    selected: &Selected<'_>,
    held: &mut Held,
    limit: f64,
    count: u32,
    shadow: bool,
) -> Option<u64> {
    let over = |in_flight: u64| (in_flight as f64 + f64::from(count)) > limit;
    match selected {
        Selected::Own(node, _) if shadow => {
            let in_flight = node.concurrency().max(0) as u64;
            over(in_flight).then_some(in_flight)
        }
        Selected::Own(node, bit) => {
            let counter = node.limited();
            if held.limited & bit != 0 {
                // This entry already holds a place here (an earlier rule on the same node): check
                // the others in flight against this rule too.
                let others = counter.load(Ordering::Acquire).saturating_sub(1);
                return over(others).then_some(others);
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
            let in_flight = resource.node().concurrency().max(0) as u64;
            over(in_flight).then_some(in_flight)
        }
    }
}
