//! The breakers' step, last (Sentinel's `DegradeSlot`): every breaker of the resource must let
//! the entry pass; a half-open one gives it a probe place. Every completion of the resource
//! feeds its breakers, whatever the entry took from them.

use super::{BreakerBlock, ResourceBreakers};
use crate::adaptive::Outcome;
use crate::block::{BlockError, BlockKind};
use crate::step::{At, End, Step, Stop};
use std::sync::Arc;

/// The probe places of half-open breakers an entry holds, taken at `decided`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Taken {
    probes: bool,
    decided: u64,
}

impl Step for ResourceBreakers {
    type Taken = Taken;
    type Kept = ();
    const EVERY_EXIT: bool = true;

    #[inline]
    fn take(this: &Arc<Self>, at: &At, taken: &mut Taken) -> Result<(), Stop> {
        match this.try_pass(at.now) {
            Ok(probes) => {
                *taken = Taken {
                    probes,
                    decided: at.now,
                };
                Ok(())
            }
            Err(block) => Err(Stop::Refused(blocked(at.resource, block))),
        }
    }

    fn holds(taken: &Taken) -> bool {
        taken.probes
    }

    fn give_back(&self, taken: &Taken) {
        self.release(taken.decided);
    }

    /// The probe places follow a queued entry to its start, so that its completion is known
    /// as the probe's.
    fn rebase(&self, taken: &mut Taken, now: u64) {
        if taken.probes {
            self.rebase(taken.decided, now);
            taken.decided = now;
        }
    }

    fn keep(_taken: &Taken) -> Option<()> {
        None
    }

    /// Every breaker counts the completion; an abandoned call gives its probe place back, so
    /// that another call probes instead. A call its caller paced is no verdict to a slow-call
    /// breaker (its time is the caller's as much as the service's): to that one it is as if
    /// abandoned.
    fn exit(&self, _kept: (), end: &End) {
        if end.outcome == Outcome::Ignore {
            self.release(end.started);
        } else {
            let rt_micros = (!end.paced).then_some(end.rt_micros);
            self.on_complete(end.started, end.now, rt_micros, end.error);
        }
    }
}

#[cold]
#[inline(never)]
fn blocked(resource_number: u32, block: BreakerBlock) -> BlockError {
    BlockError::new(
        BlockKind::Breaker,
        resource_number,
        block.observed,
        block.threshold,
    )
    .with_rule(block.rule_number)
    .with_retry_after(block.retry_after)
}
