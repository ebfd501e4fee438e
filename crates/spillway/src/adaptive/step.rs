//! The adaptive limits' step, after the per-key rules: a place under the resource's limit, then
//! under the limit on all inbound traffic; over a full limit with a queue, an entry that can
//! wait joins it. The place is kept until the entry ends, whose RT is the limit's sample.

use super::{AdaptiveRefusal, InstalledAdaptive, NoPlace, Outcome};
use crate::block::{BlockError, BlockKind};
use crate::step::{At, End, PlaceWait, Step, Stop};
use std::sync::Arc;

impl Step for InstalledAdaptive {
    /// Whether the entry holds a place.
    type Taken = bool;
    /// The place is the mark alone.
    type Kept = ();

    #[inline]
    fn take(this: &Arc<Self>, at: &At, taken: &mut bool) -> Result<(), Stop> {
        match this.limiter.take_place(at.can_wait, &at.claim) {
            Ok(()) => {
                *taken = true;
                Ok(())
            }
            Err(NoPlace::Refused(refusal)) => {
                Err(Stop::Refused(blocked(at.resource, this, refusal)))
            }
            Err(NoPlace::Full(refusal)) => Err(Stop::Refused(
                blocked(at.resource, this, refusal).with_criticality(at.claim.criticality),
            )),
            Err(NoPlace::Expired(refusal)) => Err(Stop::Refused(
                blocked_as(BlockKind::Deadline, at.resource, this, refusal)
                    .with_criticality(at.claim.criticality),
            )),
            Err(NoPlace::Waiting(slot)) => Err(Stop::Waiting(PlaceWait {
                slot,
                adaptive: Arc::clone(this),
                position: 0,
            })),
        }
    }

    fn holds(taken: &bool) -> bool {
        *taken
    }

    /// Gives the place back without a sample: the call did not run.
    fn give_back(&self, _taken: &bool) {
        self.limiter.end_place(0, Outcome::Ignore);
    }

    fn granted(taken: &mut bool) {
        *taken = true;
    }

    fn keep(taken: &bool) -> Option<()> {
        taken.then_some(())
    }

    /// The call ran: its RT is a sample for the limit, or a drop (nothing if abandoned, or if
    /// its caller paced it: its RT is the caller's as much as the service's).
    fn exit(&self, _kept: (), end: &End) {
        match end.outcome {
            Outcome::Success if end.paced => self.limiter.end_paced_place(),
            outcome => {
                self.limiter.end_place(end.started, outcome);
            }
        }
    }
}

/// The block of a refusal by `adaptive`, with no time to retry after: a place frees when a
/// call ends, whenever that is.
#[cold]
#[inline(never)]
pub(crate) fn blocked(
    resource_number: u32,
    adaptive: &InstalledAdaptive,
    refusal: AdaptiveRefusal,
) -> BlockError {
    blocked_as(BlockKind::Adaptive, resource_number, adaptive, refusal)
}

/// [`blocked`] as a block of `kind` ([`BlockKind::Deadline`] for a caller refused for its
/// deadline).
#[cold]
#[inline(never)]
pub(crate) fn blocked_as(
    kind: BlockKind,
    resource_number: u32,
    adaptive: &InstalledAdaptive,
    refusal: AdaptiveRefusal,
) -> BlockError {
    BlockError::new(
        kind,
        resource_number,
        f64::from(refusal.in_flight),
        f64::from(refusal.limit),
    )
    .with_rule(adaptive.id_number)
}
