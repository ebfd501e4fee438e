//! The flow step's short path: the rules a resource's gate holds (QPS reject rules that every
//! caller meets, each counting its admissions on a ring), checked without the rule set.

use crate::entry_caps::MAX_COUNTED;
use crate::flow::{Admitted, GateRead};
use crate::resource::ResourceInner;

/// Why [`check_gate`] stopped: rule `rule` refused the entry, seeing the truncated pass QPS
/// `current`; or (`rule == CHANGED`) a reload rewrote the gate during the check, and nothing is
/// held. Keep it two words (a struct, not an enum), so that it is returned in registers rather
/// than built in memory and read back wider than it was written (`entry::layout` asserts it).
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

/// [`check_flow`](super::flow_check::check_flow) for rules a gate holds (QPS reject rules that every caller meets, each
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
                            .flow
                            .ring(read.rule(earlier).ring)
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
    let result = resource.flow.ring(rule.ring).admit_on(
        &resource.node,
        now,
        count,
        rule.count,
        rule.whole_count,
    );
    result.map_err(|current| GateStop {
        rule: index,
        current,
    })
}
