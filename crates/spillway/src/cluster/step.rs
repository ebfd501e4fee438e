//! The cluster rules' step, after the flow rules: each rule takes its passes from what this
//! process holds of the shared limit, all or nothing; a limit on concurrency keeps them until
//! the entry ends.

use super::{ResourceCluster, SharedRefusal};
use crate::block::{BlockError, BlockKind};
use crate::step::{At, End, Step, Stop};
use std::sync::Arc;

/// The passes an entry's cluster rules took: the rules' bits (by position on the resource)
/// and the count each took, and which of those rules hold them until the entry ends. Given
/// back through the resource's rules as installed then (as adaptive places and breaker probes
/// are): a reload that reorders a resource's concurrency rules while entries are in flight
/// gives their passes to the rule now at their place.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Taken {
    rules: u8,
    count: u32,
    /// The bits of `rules` whose passes are held until the entry ends.
    until_exit: u8,
}

impl Step for ResourceCluster {
    type Taken = Taken;
    /// The bits of the rules whose passes the entry holds until it ends.
    type Kept = u8;

    /// Takes `count` from every rule in order; at the first refusal, gives back what the
    /// earlier ones took and refuses with the rule's id.
    fn take(this: &Arc<Self>, at: &At, taken: &mut Taken) -> Result<(), Stop> {
        for (bit, rule) in this.rules.iter().enumerate() {
            match rule.limit.try_take(at.count) {
                Ok(()) => {
                    taken.rules |= 1 << bit;
                    taken.count = at.count;
                    taken.until_exit = taken.rules & this.until_exit;
                }
                Err(refusal) => {
                    this.give_back(taken);
                    *taken = Taken::default();
                    return Err(Stop::Refused(blocked(at.resource, rule.id_number, refusal)));
                }
            }
        }
        Ok(())
    }

    fn holds(taken: &Taken) -> bool {
        taken.rules != 0
    }

    fn give_back(&self, taken: &Taken) {
        for (bit, rule) in self.rules.iter().enumerate() {
            if taken.rules & (1 << bit) != 0 {
                rule.limit.give_back(taken.count);
            }
        }
    }

    fn keep(taken: &Taken) -> Option<u8> {
        (taken.until_exit != 0).then_some(taken.until_exit)
    }

    fn exit(&self, kept: u8, end: &End) {
        self.give_back(&Taken {
            rules: kept,
            count: end.count,
            until_exit: kept,
        });
    }
}

/// The block of a refusal by the cluster rule of id number `rule`.
#[cold]
#[inline(never)]
fn blocked(resource_number: u32, rule: u32, refusal: SharedRefusal) -> BlockError {
    let error = BlockError::new(
        BlockKind::Cluster,
        resource_number,
        refusal.observed,
        refusal.threshold,
    )
    .with_rule(rule);
    match refusal.retry_after {
        Some(after) => error.with_retry_after(after),
        None => error,
    }
}
