//! The places an admission holds on exact in-flight counters (concurrency rules, a system
//! rule's `max_concurrency`, adaptive limits), named by bit, and giving them back.

use crate::adaptive::{InstalledAdaptive, Outcome};
use crate::resource::{ChildSlot, ResourceInner};
use crate::stats::ResourceNode;
use crate::sync::Ordering;

/// The entry holds a place on the resource node's exact in-flight counter.
pub(crate) const LIMITED_RESOURCE: u8 = 1;
/// ... on the origin node's.
pub(crate) const LIMITED_ORIGIN: u8 = 2;
/// ... on the entrance node's.
pub(crate) const LIMITED_ENTRANCE: u8 = 4;
/// ... on the global inbound node's (a system rule's `max_concurrency`).
pub(crate) const LIMITED_INBOUND: u8 = 8;
/// ... under the resource's adaptive limit.
pub(crate) const LIMITED_ADAPTIVE: u8 = 16;
/// ... under the adaptive limit on all inbound traffic.
pub(crate) const LIMITED_ADAPTIVE_INBOUND: u8 = 32;
/// ... on the resource's cluster rules that hold passes until the entry ends (which: the entry
/// state's `cluster` bits).
pub(crate) const LIMITED_CLUSTER: u8 = 64;
/// ... on the resource's per-key concurrency rules (which, and the key: the entry state's
/// `keyed` and `key`).
pub(crate) const LIMITED_KEYED: u8 = 128;
/// Both adaptive places.
pub(crate) const LIMITED_ADAPTIVE_ANY: u8 = LIMITED_ADAPTIVE | LIMITED_ADAPTIVE_INBOUND;

/// Gives back the adaptive places `limited` says are held, each with the sample of a call that
/// started at `started` (none for [`Outcome::Ignore`]).
pub(crate) fn end_adaptive(resource: &ResourceInner, limited: u8, started: u64, outcome: Outcome) {
    if limited & LIMITED_ADAPTIVE != 0 {
        if let Some(adaptive) = resource.slots.load::<InstalledAdaptive>().as_ref() {
            adaptive.limiter.end_place(started, outcome);
        }
    }
    if limited & LIMITED_ADAPTIVE_INBOUND != 0 {
        if let Some(adaptive) = resource.core.inbound_adaptive.load().as_ref() {
            adaptive.limiter.end_place(started, outcome);
        }
    }
}

/// Gives back the places on exact in-flight counters that `limited` says are held.
#[inline]
pub(crate) fn release_limited(
    resource: &ResourceInner,
    origin: ChildSlot,
    entrance: ChildSlot,
    limited: u8,
) {
    // Most entries hold no place: decide that without a call.
    if limited != 0 {
        release_places(resource, origin, entrance, limited);
    }
}

#[inline(never)]
fn release_places(resource: &ResourceInner, origin: ChildSlot, entrance: ChildSlot, limited: u8) {
    let release = |node: Option<&ResourceNode>| {
        if let Some(node) = node {
            node.limited().fetch_sub(1, Ordering::AcqRel);
        }
    };
    if limited & LIMITED_RESOURCE != 0 {
        release(Some(&resource.node));
    }
    if limited & LIMITED_ORIGIN != 0 {
        release(resource.origins.node(origin));
    }
    if limited & LIMITED_ENTRANCE != 0 {
        release(resource.entrances.node(entrance));
    }
    if limited & LIMITED_INBOUND != 0 {
        release(Some(&resource.core.inbound));
    }
    // Given back without a sample: the call did not run.
    end_adaptive(resource, limited, 0, Outcome::Ignore);
}
