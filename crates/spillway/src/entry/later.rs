//! Steps 4 and 5 of the pipeline, and the cluster and per-key rules before them: out of line,
//! since most entries skip them all; also where an entry that waited for a place under an
//! adaptive limit resumes.

use super::held::Held;
use super::places::{LIMITED_ADAPTIVE, LIMITED_ADAPTIVE_INBOUND};
use crate::adaptive::{AdaptiveRefusal, InstalledAdaptive, NoPlace, WaitSlot};
use crate::block::{BlockError, BlockKind};
use crate::breaker::{BreakerBlock, ResourceBreakers};
use crate::cluster::ResourceCluster;
use crate::keyed::ResourceKeyed;
use crate::resource::ResourceInner;
use crate::sync::Ordering;
use std::sync::Arc;

/// Where steps 4 and 5 begin: at the start, or, for an entry that waited for a place, after
/// the limit that gave it one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resume {
    Start,
    InboundAdaptive,
    Breakers,
}

/// Why steps 4 and 5 did not pass an entry.
pub(super) enum Later {
    Refused(BlockError),
    /// Waiting in an adaptive limit's queue.
    Waiting(PlaceWait),
}

/// An entry waiting for a place under an adaptive limit: its slot in the queue, the limit
/// (as installed when it joined), and the place's `LIMITED_*` bit.
#[derive(Debug)]
pub(crate) struct PlaceWait {
    pub(super) slot: Arc<WaitSlot>,
    pub(super) adaptive: Arc<InstalledAdaptive>,
    pub(super) limited: u8,
}

/// The cluster rules and the per-key rules (for an entry with keys), then steps 4 and 5,
/// from `from`, out of line (most entries skip them all): the adaptive limits, then the
/// breakers; what each takes is noted in `held`.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn later_steps(
    inner: &ResourceInner,
    inbound: bool,
    now: u64,
    count: u32,
    held: &mut Held,
    can_wait: bool,
    from: Resume,
    keys: crate::keyed::Keys,
) -> Result<(), Later> {
    if from == Resume::Start && inner.slots.has::<ResourceCluster>() {
        if let Some(cluster) = inner.slots.load::<ResourceCluster>().as_ref() {
            cluster
                .take(count, &mut held.cluster)
                .map_err(|(rule, refusal)| {
                    Later::Refused(crate::cluster::blocked(inner.name_number, rule, refusal))
                })?;
        }
    }
    if from == Resume::Start && keys.any() && inner.slots.has::<ResourceKeyed>() {
        if let Some(keyed) = inner.slots.load::<ResourceKeyed>().as_ref() {
            keyed
                .take(keys, count, now, &mut held.keyed)
                .map_err(|rule| Later::Refused(crate::keyed::blocked(inner.name_number, rule)))?;
        }
    }
    if from == Resume::Start && inner.slots.has::<InstalledAdaptive>() {
        if let Some(adaptive) = inner.slots.load::<InstalledAdaptive>().as_ref() {
            take_adaptive(inner, adaptive, LIMITED_ADAPTIVE, can_wait, held)?;
        }
    }
    if from != Resume::Breakers
        && inbound
        && inner.core.has_inbound_adaptive.load(Ordering::Relaxed)
    {
        if let Some(adaptive) = inner.core.inbound_adaptive.load().as_ref() {
            take_adaptive(inner, adaptive, LIMITED_ADAPTIVE_INBOUND, can_wait, held)?;
        }
    }
    if inner.slots.has::<ResourceBreakers>() {
        pass_breakers(inner, now, held).map_err(Later::Refused)?;
    }
    Ok(())
}

/// Step 4, for one adaptive limit: a place, noted in `held` as `limited` (and given back with
/// it if a later check refuses), or a refusal, or a wait in the limit's queue.
#[inline]
fn take_adaptive(
    inner: &ResourceInner,
    adaptive: &Arc<InstalledAdaptive>,
    limited: u8,
    can_wait: bool,
    held: &mut Held,
) -> Result<(), Later> {
    match adaptive.limiter.take_place(can_wait) {
        Ok(()) => {
            held.limited |= limited;
            Ok(())
        }
        Err(NoPlace::Refused(refusal)) => {
            Err(Later::Refused(adaptive_blocked(inner, adaptive, refusal)))
        }
        Err(NoPlace::Waiting(slot)) => Err(Later::Waiting(PlaceWait {
            slot,
            adaptive: Arc::clone(adaptive),
            limited,
        })),
    }
}

#[cold]
#[inline(never)]
pub(super) fn adaptive_blocked(
    inner: &ResourceInner,
    adaptive: &InstalledAdaptive,
    refusal: AdaptiveRefusal,
) -> BlockError {
    let error = BlockError::new(
        BlockKind::Adaptive,
        inner.name_number,
        f64::from(refusal.in_flight),
        f64::from(refusal.limit),
    )
    .with_rule(adaptive.id_number);
    match adaptive.limiter.latest_rtt() {
        Some(rtt) => error.with_retry_after(rtt),
        None => error,
    }
}

/// Step 5, Sentinel's `DegradeSlot`: the resource's breakers; probe places taken are noted in
/// `held`.
#[inline]
fn pass_breakers(inner: &ResourceInner, now: u64, held: &mut Held) -> Result<(), BlockError> {
    let breakers = inner.slots.load::<ResourceBreakers>();
    let Some(breakers) = breakers.as_ref() else {
        return Ok(());
    };
    match breakers.try_pass(now) {
        Ok(probe) => {
            held.probes = probe;
            held.decided = now;
            Ok(())
        }
        Err(block) => Err(breaker_blocked(inner, block)),
    }
}

#[cold]
#[inline(never)]
fn breaker_blocked(inner: &ResourceInner, block: BreakerBlock) -> BlockError {
    BlockError::new(
        BlockKind::Breaker,
        inner.name_number,
        block.observed,
        block.threshold,
    )
    .with_rule(block.rule_number)
    .with_retry_after(block.retry_after)
}
