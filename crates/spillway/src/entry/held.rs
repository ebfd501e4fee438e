//! What an admission holds until it ends or is given back: the system and flow rules' places
//! on exact in-flight counters, queue slots and admissions counted on rings, and what the later
//! kinds' steps took (`kinds::Taken`).

use super::places::release_limited;
use crate::flow::{Admitted, Controller, ResourceRules, Slot};
use crate::kinds::Taken;
use crate::resource::{ChildSlot, ResourceInner};

pub(crate) use crate::entry_caps::{MAX_COUNTED, MAX_QUEUED};

/// Reservations an admission holds: places on exact in-flight counters, and queue slots.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Held {
    /// `LIMITED_*` bits of the system and flow rules' places held (see `places.rs`).
    pub(crate) limited: u8,
    /// Queue slots taken, with the index of the rule that took each; `None` (one byte to write)
    /// until a queueing rule takes one, so that the common path initialises nothing more.
    queued: Option<Queued>,
    /// Admissions counted by QPS reject rules, likewise `None` until one counts.
    counted: Option<Counted>,
    /// The id number of the first rule in shadow mode that would have refused the entry, plus
    /// one (0: none), so that the default is all zeros.
    shadow: u32,
    /// What the later kinds' steps took.
    pub(crate) later: Taken,
}

/// Admissions QPS reject rules counted for one entry (at most `MAX_COUNTED`; further rules read
/// the window instead).
#[derive(Debug, Default, Clone, Copy)]
struct Counted {
    admitted: [Admitted; MAX_COUNTED],
    rules: [u8; MAX_COUNTED],
    len: u8,
}

/// The queue slots an entry holds.
#[derive(Debug, Default, Clone, Copy)]
struct Queued {
    slots: [Slot; MAX_QUEUED],
    rules: [u8; MAX_QUEUED],
    len: u8,
}

impl Held {
    /// Holding the places `limited` says (`LIMITED_*` bits), and nothing else yet.
    #[inline(always)]
    pub(crate) fn holding(limited: u8) -> Self {
        Self {
            limited,
            ..Self::default()
        }
    }

    /// Whether one more QPS reject rule may count its admission here.
    pub(crate) fn has_room_to_count(&self) -> bool {
        self.counted
            .as_ref()
            .is_none_or(|counted| usize::from(counted.len) < MAX_COUNTED)
    }

    /// Notes the admission rule `index` counted on its ring.
    pub(crate) fn count(&mut self, index: usize, admitted: Admitted) {
        let counted = self.counted.get_or_insert_with(Counted::default);
        counted.admitted[usize::from(counted.len)] = admitted;
        // Validation caps rules per resource well under 256.
        counted.rules[usize::from(counted.len)] = index as u8;
        counted.len += 1;
    }

    /// Notes the queue slot rule `index` reserved.
    pub(crate) fn queue(&mut self, index: usize, slot: Slot) {
        // Validation caps queueing rules per resource at MAX_QUEUED.
        let queued = self.queued.get_or_insert_with(Queued::default);
        queued.slots[usize::from(queued.len)] = slot;
        queued.rules[usize::from(queued.len)] = index as u8;
        queued.len += 1;
    }

    /// Notes that the shadow rule with id number `rule` would have refused the entry (the
    /// first one noted stays).
    pub(crate) fn note_shadow(&mut self, rule: u32) {
        if self.shadow == 0 {
            self.shadow = rule.wrapping_add(1);
        }
    }

    /// The id number of the first shadow rule that would have refused the entry.
    #[inline(always)]
    pub(crate) fn shadow(&self) -> Option<u32> {
        self.shadow.checked_sub(1)
    }

    /// Whether anything is held.
    #[inline]
    fn holds_anything(&self) -> bool {
        self.limited != 0 || self.queued.is_some() || self.counted.is_some() || self.later.holds()
    }
}

/// Releases every reservation in `held`, of an entry with these child slots (inbound or not),
/// that the rules `rules` (if any) and the later kinds made.
#[inline]
pub(crate) fn give_back(
    resource: &ResourceInner,
    rules: Option<&ResourceRules>,
    origin: ChildSlot,
    entrance: ChildSlot,
    inbound: bool,
    held: &Held,
) {
    // Most refused entries hold nothing: decide that without a call.
    if held.holds_anything() {
        give_back_held(resource, rules, origin, entrance, inbound, held);
    }
}

#[inline(never)]
fn give_back_held(
    resource: &ResourceInner,
    rules: Option<&ResourceRules>,
    origin: ChildSlot,
    entrance: ChildSlot,
    inbound: bool,
    held: &Held,
) {
    release_limited(resource, origin, entrance, held.limited);
    held.later.give_back(resource.reach(inbound));
    let Some(rules) = rules else {
        return;
    };
    if let Some(counted) = &held.counted {
        let taken = usize::from(counted.len);
        for (&index, &admitted) in counted.rules[..taken]
            .iter()
            .zip(&counted.admitted[..taken])
        {
            if let Controller::Reject(_, Some(ring)) = &*rules.rules[usize::from(index)].controller
            {
                if admitted.count > 0 {
                    resource.flow.ring(*ring).give_back(admitted);
                }
            }
        }
    }
    if let Some(queued) = &held.queued {
        let taken = usize::from(queued.len);
        for (&index, &slot) in queued.rules[..taken].iter().zip(&queued.slots[..taken]) {
            // Only the last slot of a schedule can be given back; an earlier one stays unused.
            match &*rules.rules[usize::from(index)].controller {
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
}
