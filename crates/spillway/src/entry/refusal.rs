//! Refusals: the compact reason a rule refused, the block built from it where it is returned,
//! and the refusal counted on the entry's nodes.

use super::guard::short_lines;
use super::EntryState;
use crate::block::{BlockError, BlockKind};
use crate::flow::ResourceRules;
use crate::resource::{ChildSlot, ResourceInner};
use crate::stats::ResourceNode;
use crate::sync::cached_thread_slot;
use std::time::Duration;

/// Why a flow rule refused an entry, compact: the [`BlockError`] (three times the size) is built
/// only where it is returned, so that it is not copied out through every layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refusal {
    pub(crate) index: usize,
    pub(crate) observed: f64,
    pub(crate) threshold: f64,
    /// When a retry may pass, if the rule can tell (a concurrency rule cannot: a place frees
    /// when a call ends).
    pub(crate) retry_after: Option<Duration>,
}

impl Refusal {
    /// The block of rule `index` of `rules`.
    #[inline]
    pub(crate) fn into_error(self, resource: &ResourceInner, rules: &ResourceRules) -> BlockError {
        let error = BlockError::new(
            BlockKind::Flow,
            resource.name_number,
            self.observed,
            self.threshold,
        )
        .with_rule(rules.rules[self.index].id_number);
        match self.retry_after {
            Some(after) => error.with_retry_after(after),
            None => error,
        }
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

/// Counts a refusal of `count` permits on every node of an entry: on the thread's lines inline
/// when that takes no slow step (see [`refuse_short`]), else through the window.
#[inline(always)]
pub(crate) fn count_refusal(
    resource: &ResourceInner,
    origin: ChildSlot,
    entrance: ChildSlot,
    now: u64,
    count: u32,
    inbound: bool,
) {
    if !(ChildSlot::both_none(origin, entrance) && refuse_short(resource, now, count, inbound)) {
        EntryState::refuse(resource, origin, entrance, now, count, inbound);
    }
}

/// Counts a refusal of an entry with neither an origin nor an entrance (on the resource's node
/// and, inbound, the global inbound node) on the thread's lines, if that takes no slow step;
/// otherwise returns false, with nothing written. It makes no call, so that the path it is
/// inlined on needs no registers saved (as `EntryState::complete_short`).
///
/// The caller builds the block ([`refusal_error`]) out of line, into its result: never build it
/// here and return it, which writes it field by field and copies it with wider loads, a
/// store-forwarding stall on every refusal.
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

/// Time until the second window's current bucket ends (when the oldest counts start to leave).
#[inline]
pub(crate) fn until_next_bucket(node: &ResourceNode, now: u64) -> Duration {
    Duration::from_nanos(nanos_to_next_bucket(node, now))
}

/// [`until_next_bucket`] in nanoseconds.
#[inline]
pub(crate) fn nanos_to_next_bucket(node: &ResourceNode, now: u64) -> u64 {
    let window = node.second_window();
    // The window's cursor knows the current bucket: no division.
    let next = (window.current_id(now) + 1).saturating_mul(window.bucket_nanos());
    next.saturating_sub(now)
}
