//! The callers waiting in an adaptive limit's queue, in a lane per criticality: a freed place
//! goes to the most critical lane with a waiter. Within a lane, tenants are spread over
//! [`BUCKETS`] buckets (each tenant hashes to two and joins the shorter, as shuffle sharding
//! does), the buckets with waiters take turns, and within a bucket the queue's order (FIFO,
//! LIFO or adaptive) decides. Memory is fixed by the number of waiters and buckets, whatever
//! the number of tenants.

use super::wait_slot::{End, WaitSlot};
use crate::Criticality;
use std::collections::VecDeque;
use std::sync::Arc;

/// Buckets of one lane. A tenant shares both of its buckets with a heavy tenant with a chance
/// of about (2/64)² = 1 in 1,000 per heavy tenant; only then does it wait behind one.
pub(crate) const BUCKETS: usize = 64;

/// One lane per criticality.
const LANES: usize = Criticality::ALL.len();

/// The waiting callers, by criticality, bucket and order.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    lanes: [Lane; LANES],
    len: usize,
}

/// One criticality's waiters.
#[derive(Debug, Default)]
struct Lane {
    /// [`BUCKETS`] queues, made at the lane's first waiter.
    buckets: Vec<VecDeque<Arc<WaitSlot>>>,
    /// The buckets with waiters, in the order of their turns.
    turns: VecDeque<u16>,
    len: usize,
}

impl Lane {
    fn ensure(&mut self) {
        if self.buckets.is_empty() {
            self.buckets = (0..BUCKETS).map(|_| VecDeque::new()).collect();
        }
    }

    /// Forgets `bucket`'s turn once it has no waiter.
    fn emptied(&mut self, bucket: usize) {
        if self.buckets[bucket].is_empty() {
            self.turns.retain(|&turn| usize::from(turn) != bucket);
        }
    }
}

/// Where [`Lanes::pop`] took a waiter from, to put it back there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    lane: usize,
    bucket: u16,
    end: End,
    /// Whether its bucket, still holding waiters, went to the back of the turns.
    requeued: bool,
}

/// The two buckets of `tenant` (0, no tenant: bucket 0 only).
fn candidates(tenant: u64) -> (u16, u16) {
    if tenant == 0 {
        return (0, 0);
    }
    let pick = |hash: u64| ((u128::from(hash) * BUCKETS as u128) >> 64) as u16;
    let first = pick(tenant.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let second = pick(tenant.rotate_left(29).wrapping_mul(0xC2B2_AE3D_27D4_EB4F));
    let second = if second == first {
        (first + 1) % BUCKETS as u16
    } else {
        second
    };
    (first, second)
}

fn take(queue: &mut VecDeque<Arc<WaitSlot>>, end: End) -> Option<Arc<WaitSlot>> {
    match end {
        End::Front => queue.pop_front(),
        End::Back => queue.pop_back(),
    }
}

impl Lanes {
    /// Callers waiting.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Callers of `criticality` waiting.
    pub(crate) fn len_of(&self, criticality: Criticality) -> usize {
        self.lanes[criticality.rank()].len
    }

    /// The bucket a waiter of `tenant` joins in `criticality`'s lane: the shorter of its two
    /// (the first on a tie).
    pub(crate) fn bucket_for(&self, criticality: Criticality, tenant: u64) -> u16 {
        let (first, second) = candidates(tenant);
        let lane = &self.lanes[criticality.rank()];
        if lane.buckets.is_empty() {
            return first;
        }
        let length = |bucket: u16| lane.buckets[usize::from(bucket)].len();
        if length(second) < length(first) {
            second
        } else {
            first
        }
    }

    /// Adds `slot` at the back of its bucket, which takes a turn if it had none.
    pub(crate) fn push(&mut self, slot: Arc<WaitSlot>) {
        let lane = &mut self.lanes[slot.claim.criticality.rank()];
        lane.ensure();
        let bucket = slot.bucket;
        let queue = &mut lane.buckets[usize::from(bucket)];
        if queue.is_empty() {
            lane.turns.push_back(bucket);
        }
        queue.push_back(slot);
        lane.len += 1;
        self.len += 1;
    }

    /// The next waiter: from the most critical lane with one, the bucket whose turn it is,
    /// at `end` of that bucket. The bucket's next turn comes after the others'.
    pub(crate) fn pop(&mut self, end: End) -> Option<(Arc<WaitSlot>, Taken)> {
        let rank = (0..LANES).rev().find(|&rank| self.lanes[rank].len > 0)?;
        let lane = &mut self.lanes[rank];
        let bucket = lane.turns.pop_front()?;
        let queue = &mut lane.buckets[usize::from(bucket)];
        let slot = take(queue, end)?;
        let requeued = !queue.is_empty();
        if requeued {
            lane.turns.push_back(bucket);
        }
        lane.len -= 1;
        self.len -= 1;
        let taken = Taken {
            lane: rank,
            bucket,
            end,
            requeued,
        };
        Some((slot, taken))
    }

    /// Puts back the waiter the last [`pop`](Self::pop) took, where it was, its bucket's turn
    /// first again (nothing may change the lanes in between).
    pub(crate) fn put_back(&mut self, slot: Arc<WaitSlot>, taken: Taken) {
        let lane = &mut self.lanes[taken.lane];
        if taken.requeued {
            lane.turns.pop_back();
        }
        lane.turns.push_front(taken.bucket);
        let queue = &mut lane.buckets[usize::from(taken.bucket)];
        match taken.end {
            End::Front => queue.push_front(slot),
            End::Back => queue.push_back(slot),
        }
        lane.len += 1;
        self.len += 1;
    }

    /// Takes `slot` out, if it still waits here; whether it did.
    pub(crate) fn remove(&mut self, slot: &Arc<WaitSlot>) -> bool {
        let lane = &mut self.lanes[slot.claim.criticality.rank()];
        if lane.buckets.is_empty() {
            return false;
        }
        let bucket = usize::from(slot.bucket);
        let queue = &mut lane.buckets[bucket];
        let Some(at) = queue.iter().position(|waiting| Arc::ptr_eq(waiting, slot)) else {
            return false;
        };
        queue.remove(at);
        lane.emptied(bucket);
        lane.len -= 1;
        self.len -= 1;
        true
    }

    /// Makes room in a full queue for a waiter of `criticality` that would join `bucket`:
    /// takes out, from `end` of a bucket, the waiter that goes instead, if one does. That is a
    /// waiter of the least critical lane with one, if it is less critical than the newcomer
    /// (from its longest bucket); in the newcomer's own lane, one of its longest bucket if the
    /// newcomer's bucket, with the newcomer, would still be shorter (a tenant that floods
    /// gives way to one that does not). `None`: the newcomer is refused.
    pub(crate) fn evict_for(
        &mut self,
        criticality: Criticality,
        bucket: u16,
        end: End,
    ) -> Option<Arc<WaitSlot>> {
        let lowest = (0..LANES).find(|&rank| self.lanes[rank].len > 0)?;
        let rank = criticality.rank();
        if lowest > rank {
            return None;
        }
        let lane = &mut self.lanes[lowest];
        // The longest bucket, the first of them on a tie.
        let (longest, length) =
            lane.buckets
                .iter()
                .map(VecDeque::len)
                .enumerate()
                .fold(
                    (0, 0),
                    |best, (at, len)| if len > best.1 { (at, len) } else { best },
                );
        if lowest == rank && lane.buckets[usize::from(bucket)].len() + 1 >= length {
            return None;
        }
        let victim = take(&mut lane.buckets[longest], end)?;
        lane.emptied(longest);
        lane.len -= 1;
        self.len -= 1;
        Some(victim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adaptive::claim::Claim;

    fn slot(lanes: &Lanes, criticality: Criticality, tenant: u64) -> Arc<WaitSlot> {
        let claim = Claim {
            criticality,
            tenant,
            ..Claim::default()
        };
        Arc::new(WaitSlot::new(
            claim,
            lanes.bucket_for(criticality, tenant),
            0,
        ))
    }

    fn tenant_of(slot: &WaitSlot) -> u64 {
        slot.claim.tenant
    }

    #[test]
    fn the_most_critical_lane_goes_first_and_tenants_take_turns() {
        let mut lanes = Lanes::default();
        for tenant in [1, 1, 1, 2] {
            let waiting = slot(&lanes, Criticality::Critical, tenant);
            lanes.push(waiting);
        }
        let urgent = slot(&lanes, Criticality::CriticalPlus, 9);
        lanes.push(urgent);
        let shed = slot(&lanes, Criticality::Sheddable, 1);
        lanes.push(shed);
        assert_eq!(lanes.len(), 6);
        assert_eq!(lanes.len_of(Criticality::Critical), 4);
        let mut order = Vec::new();
        while let Some((waiting, _)) = lanes.pop(End::Front) {
            order.push((waiting.claim.criticality, tenant_of(&waiting)));
        }
        // Tenant 1's three spread over its two buckets: the turns go 1, 1, 2, 1 or 1, 2, 1, 1;
        // tenant 2 never waits behind all three.
        let critical: Vec<u64> = order[1..5].iter().map(|(_, tenant)| *tenant).collect();
        assert_eq!(order[0], (Criticality::CriticalPlus, 9));
        assert_eq!(order[5], (Criticality::Sheddable, 1));
        assert!(critical[..3].contains(&2), "{critical:?}");
        assert!(lanes.is_empty());
    }

    #[test]
    fn a_waiter_put_back_is_next_again_and_a_removed_one_is_gone() {
        let mut lanes = Lanes::default();
        let (a, b, c) = (
            slot(&lanes, Criticality::Critical, 0),
            slot(&lanes, Criticality::Critical, 0),
            slot(&lanes, Criticality::Critical, 7),
        );
        lanes.push(Arc::clone(&a));
        lanes.push(Arc::clone(&b));
        lanes.push(Arc::clone(&c));
        let (first, taken) = lanes.pop(End::Front).unwrap();
        assert!(Arc::ptr_eq(&first, &a));
        lanes.put_back(first, taken);
        let (again, _) = lanes.pop(End::Front).unwrap();
        assert!(Arc::ptr_eq(&again, &a));
        // Then the other bucket's turn: c, then b.
        assert!(lanes.remove(&c));
        assert!(!lanes.remove(&c));
        let (next, _) = lanes.pop(End::Front).unwrap();
        assert!(Arc::ptr_eq(&next, &b));
        assert!(lanes.pop(End::Front).is_none());
    }

    #[test]
    fn a_full_queue_sheds_the_least_critical_and_the_longest_bucket() {
        let mut lanes = Lanes::default();
        // A flooding tenant's four, two in each of its buckets.
        for _ in 0..4 {
            let waiting = slot(&lanes, Criticality::Sheddable, 5);
            lanes.push(waiting);
        }
        // A critical newcomer takes a sheddable waiter's place; a sheddable one of a quiet
        // tenant takes the flooding tenant's; nobody takes a critical waiter's.
        let victim = lanes
            .evict_for(Criticality::Critical, 0, End::Back)
            .unwrap();
        assert_eq!(victim.claim.criticality, Criticality::Sheddable);
        let quiet = lanes.bucket_for(Criticality::Sheddable, 6);
        let evicted = lanes
            .evict_for(Criticality::Sheddable, quiet, End::Back)
            .unwrap();
        assert_eq!(tenant_of(&evicted), 5);
        // Its buckets now hold one each: a newcomer of its own gives way to no one.
        let flooding = lanes.bucket_for(Criticality::Sheddable, 5);
        assert!(lanes
            .evict_for(Criticality::Sheddable, flooding, End::Back)
            .is_none());
        assert_eq!(lanes.len(), 2);
        let mut only_critical = Lanes::default();
        let critical = slot(&only_critical, Criticality::Critical, 1);
        only_critical.push(critical);
        assert!(only_critical
            .evict_for(Criticality::Sheddable, 0, End::Back)
            .is_none());
        // In its own lane, a newcomer whose bucket would be as long as the longest is refused.
        let mut own = Lanes::default();
        let one = slot(&own, Criticality::Critical, 0);
        own.push(one);
        assert!(own.evict_for(Criticality::Critical, 0, End::Back).is_none());
        assert_eq!(own.len(), 1);
    }
}
