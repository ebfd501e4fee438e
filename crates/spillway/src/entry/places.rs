//! The places an admission holds on exact in-flight counters under the system and flow rules
//! (concurrency rules, a system rule's `max_concurrency`), named by bit in the low four bits of
//! an entry's `limited` byte (`step::PLACES`), and giving them back.

use crate::resource::{ChildSlot, ResourceInner};
use crate::stats::ResourceNode;
use crate::step::PLACES;
use crate::sync::Ordering;

/// The entry holds a place on the resource node's exact in-flight counter.
pub(crate) const LIMITED_RESOURCE: u8 = 1;
/// ... on the origin node's.
pub(crate) const LIMITED_ORIGIN: u8 = 2;
/// ... on the entrance node's.
pub(crate) const LIMITED_ENTRANCE: u8 = 4;
/// ... on the global inbound node's (a system rule's `max_concurrency`).
pub(crate) const LIMITED_INBOUND: u8 = 8;

const _: () = assert!(
    (LIMITED_RESOURCE | LIMITED_ORIGIN | LIMITED_ENTRANCE | LIMITED_INBOUND) & !PLACES == 0,
    "the places' bits are the low four"
);

/// Gives back the places on exact in-flight counters that `limited` says are held (only
/// [`PLACES`] bits).
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
}
