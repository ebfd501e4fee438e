//! The rule kinds a resource checks after its flow rules, as one list: where the instance keeps
//! each kind's rules as loaded ([`Sets`]), where a resource keeps its own ([`Slots`], with one
//! flag bit per kind, so that a resource with none of a kind pays one relaxed load and a bit
//! test), how a load reaches every resource ([`Kind`]), and the kinds' steps in an entry's
//! path, in order ([`Taken`], [`Kept`]: each kind's [`Step`] is in its own module).
//!
//! A new kind implements [`Kind`] here and takes a field in [`Sets`] and in [`Slots`] and its
//! flag in `FLAGS`; and its place in the steps' order: a position, a field in [`Taken`] (and in
//! [`Kept`] if it keeps more than a mark until the entry ends), a line in each of the list's
//! loops (in [`Taken::granted`] too if it has a queue), and its term in `EVERY_EXIT`. Loading
//! it is [`Spillway::replace_rules`](crate::Spillway), reading a resource's rules is
//! [`Slots::load`].
//!
//! Room is full today: the four marks are the cluster rules', the per-key rules', and the two
//! adaptive limits', and [`Kept`]'s six bytes are the cluster and per-key rules'. A kind that
//! keeps nothing until the exit (a breaker keeps nothing: it sees every exit) fits as it is; one
//! that keeps something needs the entry's state to make room (`entry/guard.rs`).

use crate::adaptive::{AdaptiveRuleSet, InstalledAdaptive};
use crate::breaker::{BreakerRuleSet, ResourceBreakers};
use crate::cluster::{ClusterRuleSet, ResourceCluster};
use crate::keyed::{KeyedRuleSet, ResourceKeyed};
use crate::step::{At, End, Step, Stop, MARKS};
use arc_swap::{ArcSwap, ArcSwapOption, Guard};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A kind of rule a resource holds installed, checked after its flow rules.
pub(crate) trait Kind: Send + Sync + Sized + 'static {
    /// The kind's bit in a resource's flags (one bit per kind).
    const FLAG: u8;
    /// The kind's rules as the instance loaded them.
    type Set: Send + Sync + 'static;
    /// The rules `set` installs on `resource`, if any.
    fn of(set: &Self::Set, resource: &str) -> Option<Arc<Self>>;
    /// Where the instance keeps the kind's rules.
    fn loaded(sets: &Sets) -> &ArcSwap<Self::Set>;
    /// Where a resource keeps its rules of the kind.
    fn slot(slots: &Slots) -> &ArcSwapOption<Self>;
}

/// Each kind's rules as the instance loaded them, replaced whole by a load.
#[derive(Debug, Default)]
pub(crate) struct Sets {
    breakers: ArcSwap<BreakerRuleSet>,
    adaptive: ArcSwap<AdaptiveRuleSet>,
    cluster: ArcSwap<ClusterRuleSet>,
    keyed: ArcSwap<KeyedRuleSet>,
}

impl Sets {
    /// The kind's rules as loaded now.
    pub(crate) fn get<K: Kind>(&self) -> Guard<Arc<K::Set>> {
        K::loaded(self).load()
    }

    /// Replaces the kind's rules as loaded (installing them on resources is the caller's).
    pub(crate) fn store<K: Kind>(&self, set: Arc<K::Set>) {
        K::loaded(self).store(set);
    }
}

/// A resource's rules of every kind checked after its flow rules, each swapped whole by a load,
/// and a flag bit per kind it has.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    /// The `Kind::FLAG` bits of the kinds the resource has rules of: one load tells an entry
    /// whether it may skip every later step.
    flags: AtomicU8,
    breakers: ArcSwapOption<ResourceBreakers>,
    adaptive: ArcSwapOption<InstalledAdaptive>,
    cluster: ArcSwapOption<ResourceCluster>,
    keyed: ArcSwapOption<ResourceKeyed>,
}

impl Slots {
    /// The slots of a new resource named `resource`, holding what `sets` installs on it.
    pub(crate) fn new(sets: &Sets, resource: &str) -> Self {
        let slots = Self::default();
        slots.install::<ResourceBreakers>(sets, resource);
        slots.install::<InstalledAdaptive>(sets, resource);
        slots.install::<ResourceCluster>(sets, resource);
        slots.install::<ResourceKeyed>(sets, resource);
        slots
    }

    /// Installs what the kind's loaded rules hold for `resource`.
    fn install<K: Kind>(&self, sets: &Sets, resource: &str) {
        self.set::<K>(K::of(&sets.get::<K>(), resource));
    }

    /// Whether the resource has rules of the kind. Relaxed, as every rule flag: a stale answer
    /// only delays seeing a load by a moment.
    #[inline(always)]
    pub(crate) fn has<K: Kind>(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & K::FLAG != 0
    }

    /// Whether the resource has rules of any kind here (relaxed, likewise).
    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        self.flags.load(Ordering::Relaxed) != 0
    }

    /// The resource's rules of the kind, as installed now.
    #[inline(always)]
    pub(crate) fn load<K: Kind>(&self) -> Guard<Option<Arc<K>>> {
        K::slot(self).load()
    }

    /// The resource's rules of the kind, held past a load.
    pub(crate) fn load_full<K: Kind>(&self) -> Option<Arc<K>> {
        K::slot(self).load_full()
    }

    /// Installs the resource's rules of the kind (under the instance's rules lock). The flag is
    /// set after the rules when adding and cleared before them when removing, so that an entry
    /// that sees the flag finds rules, or at worst none (and passes, as with no flag).
    pub(crate) fn set<K: Kind>(&self, installed: Option<Arc<K>>) {
        let slot = K::slot(self);
        if installed.is_some() {
            slot.store(installed);
            self.flags.fetch_or(K::FLAG, Ordering::Release);
        } else {
            self.flags.fetch_and(!K::FLAG, Ordering::Release);
            slot.store(None);
        }
    }
}

impl Kind for ResourceBreakers {
    const FLAG: u8 = 1;
    type Set = BreakerRuleSet;
    fn of(set: &BreakerRuleSet, resource: &str) -> Option<Arc<Self>> {
        set.by_resource.get(resource).cloned()
    }
    fn loaded(sets: &Sets) -> &ArcSwap<BreakerRuleSet> {
        &sets.breakers
    }
    fn slot(slots: &Slots) -> &ArcSwapOption<Self> {
        &slots.breakers
    }
}

impl Kind for InstalledAdaptive {
    const FLAG: u8 = 2;
    type Set = AdaptiveRuleSet;
    fn of(set: &AdaptiveRuleSet, resource: &str) -> Option<Arc<Self>> {
        set.by_resource.get(resource).cloned()
    }
    fn loaded(sets: &Sets) -> &ArcSwap<AdaptiveRuleSet> {
        &sets.adaptive
    }
    fn slot(slots: &Slots) -> &ArcSwapOption<Self> {
        &slots.adaptive
    }
}

impl Kind for ResourceCluster {
    const FLAG: u8 = 4;
    type Set = ClusterRuleSet;
    fn of(set: &ClusterRuleSet, resource: &str) -> Option<Arc<Self>> {
        set.by_resource.get(resource).cloned()
    }
    fn loaded(sets: &Sets) -> &ArcSwap<ClusterRuleSet> {
        &sets.cluster
    }
    fn slot(slots: &Slots) -> &ArcSwapOption<Self> {
        &slots.cluster
    }
}

impl Kind for ResourceKeyed {
    const FLAG: u8 = 8;
    type Set = KeyedRuleSet;
    fn of(set: &KeyedRuleSet, resource: &str) -> Option<Arc<Self>> {
        set.by_resource.get(resource).cloned()
    }
    fn loaded(sets: &Sets) -> &ArcSwap<KeyedRuleSet> {
        &sets.keyed
    }
    fn slot(slots: &Slots) -> &ArcSwapOption<Self> {
        &slots.keyed
    }
}

/// Each step's position in the entry's path: the order the steps run in, and where an entry
/// that waited in a step's queue goes on (the next position).
const CLUSTER: u8 = 0;
const KEYED: u8 = 1;
const ADAPTIVE: u8 = 2;
/// The adaptive limit on all inbound traffic (in the instance's inbound slots).
const INBOUND_ADAPTIVE: u8 = 3;
const BREAKERS: u8 = 4;

/// The mark, in an entry's `limited` byte, of the kind at `position` keeping something until
/// the entry ends: the high four bits ([`MARKS`]), so the first four positions may keep.
/// Evaluated at compile time (`const { mark(..) }`), where a fifth fails the build.
const fn mark(position: u8) -> u8 {
    let mark = 0x10 << position;
    assert!(mark & MARKS == mark && position < 4, "no mark left");
    mark
}

/// Every kind's flag: each its own bit, so that a kind never reads another's (`kinds/tests.rs`).
#[cfg(test)]
const FLAGS: [u8; 4] = [
    ResourceBreakers::FLAG,
    InstalledAdaptive::FLAG,
    ResourceCluster::FLAG,
    ResourceKeyed::FLAG,
];

/// The `Kind::FLAG` bits of the kinds every exit reaches.
const EVERY_EXIT: u8 = every_exit::<ResourceCluster>()
    | every_exit::<ResourceKeyed>()
    | every_exit::<InstalledAdaptive>()
    | every_exit::<ResourceBreakers>();

const fn every_exit<K: Kind + Step>() -> u8 {
    if K::EVERY_EXIT {
        K::FLAG
    } else {
        0
    }
}

/// The longer of two waits, either of which may be none (folded away where a kind never
/// paces).
#[inline(always)]
fn longer(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Where an entry's steps find their rules: its resource's slots and, for an inbound entry,
/// the instance's slots for all inbound traffic.
#[derive(Clone, Copy)]
pub(crate) struct Reach<'a> {
    pub(crate) resource: &'a Slots,
    pub(crate) inbound: Option<&'a Slots>,
}

impl Reach<'_> {
    /// Whether any step has rules to check (relaxed, as every rule flag).
    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        self.resource.any() || self.inbound.is_some_and(Slots::any)
    }

    /// Whether every exit must reach a kind here (relaxed, likewise).
    #[inline(always)]
    pub(crate) fn sees_every_exit(&self) -> bool {
        self.resource.sees_every_exit() || self.inbound.is_some_and(Slots::sees_every_exit)
    }
}

impl Slots {
    /// Whether every exit must reach a kind here (relaxed, as every rule flag).
    #[inline(always)]
    pub(crate) fn sees_every_exit(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & EVERY_EXIT != 0
    }

    /// The kind's step for an entry, when the resource has rules of it that apply.
    #[inline(always)]
    fn take<K: Kind + Step>(
        &self,
        at: &At,
        taken: &mut K::Taken,
        position: u8,
    ) -> Result<(), Stop> {
        if self.has::<K>() && K::applies(at) {
            if let Some(kind) = self.load::<K>().as_ref() {
                return K::take(kind, at, taken).map_err(|stop| stop.at(position));
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn give_back<K: Kind + Step>(&self, taken: &K::Taken) {
        if K::holds(taken) {
            if let Some(kind) = self.load::<K>().as_ref() {
                kind.give_back(taken);
            }
        }
    }

    #[inline(always)]
    fn rebase<K: Kind + Step>(&self, taken: &mut K::Taken, now: u64) {
        if K::holds(taken) {
            if let Some(kind) = self.load::<K>().as_ref() {
                kind.rebase(taken, now);
            }
        }
    }

    #[inline(always)]
    fn exit<K: Kind + Step>(&self, marked: bool, kept: K::Kept, end: &End) {
        if marked || (K::EVERY_EXIT && self.has::<K>()) {
            if let Some(kind) = self.load::<K>().as_ref() {
                kind.exit(kept, end);
            }
        }
    }
}

/// What an entry's steps took, by kind: given back if a later step (or a flow rule's queue)
/// refuses it, kept in part until it ends ([`Taken::keep`]).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Taken {
    cluster: <ResourceCluster as Step>::Taken,
    keyed: <ResourceKeyed as Step>::Taken,
    adaptive: <InstalledAdaptive as Step>::Taken,
    inbound_adaptive: <InstalledAdaptive as Step>::Taken,
    breakers: <ResourceBreakers as Step>::Taken,
}

/// What an admitted entry keeps until it ends beyond the kinds' marks, by kind: six bytes, so
/// that an entry's state stays four words (`entry::layout`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Kept {
    cluster: <ResourceCluster as Step>::Kept,
    keyed: <ResourceKeyed as Step>::Kept,
}

impl Taken {
    /// The steps from position `from` (0: all), in order. What each takes is noted here; at a
    /// refusal, the refusing step has given back its own, and the caller gives back the rest.
    #[inline(never)]
    // Every step is written `from <= ITS_POSITION`, the first one too.
    #[allow(clippy::absurd_extreme_comparisons)]
    pub(crate) fn take(&mut self, reach: Reach<'_>, at: &At, from: u8) -> Result<(), Stop> {
        let own = reach.resource;
        if from <= CLUSTER {
            own.take::<ResourceCluster>(at, &mut self.cluster, CLUSTER)?;
        }
        if from <= KEYED {
            own.take::<ResourceKeyed>(at, &mut self.keyed, KEYED)?;
        }
        if from <= ADAPTIVE {
            own.take::<InstalledAdaptive>(at, &mut self.adaptive, ADAPTIVE)?;
        }
        if from <= INBOUND_ADAPTIVE {
            if let Some(all) = reach.inbound {
                all.take::<InstalledAdaptive>(at, &mut self.inbound_adaptive, INBOUND_ADAPTIVE)?;
            }
        }
        own.take::<ResourceBreakers>(at, &mut self.breakers, BREAKERS)
    }

    /// The longest wait a pacing rule among the steps queued the entry for (zero if none).
    #[inline(always)]
    pub(crate) fn wait(&self) -> Duration {
        let waits = [
            ResourceCluster::wait(&self.cluster),
            ResourceKeyed::wait(&self.keyed),
            InstalledAdaptive::wait(&self.adaptive),
            InstalledAdaptive::wait(&self.inbound_adaptive),
            ResourceBreakers::wait(&self.breakers),
        ];
        waits.into_iter().fold(None, longer).unwrap_or_default()
    }

    /// The step at `position` handed the entry waiting in its queue a place.
    pub(crate) fn granted(&mut self, position: u8) {
        match position {
            ADAPTIVE => InstalledAdaptive::granted(&mut self.adaptive),
            INBOUND_ADAPTIVE => InstalledAdaptive::granted(&mut self.inbound_adaptive),
            _ => {}
        }
    }

    /// Whether any step holds anything to give back.
    #[inline(always)]
    pub(crate) fn holds(&self) -> bool {
        ResourceCluster::holds(&self.cluster)
            || ResourceKeyed::holds(&self.keyed)
            || InstalledAdaptive::holds(&self.adaptive)
            || InstalledAdaptive::holds(&self.inbound_adaptive)
            || ResourceBreakers::holds(&self.breakers)
    }

    /// Gives back everything taken, in the steps' order.
    pub(crate) fn give_back(&self, reach: Reach<'_>) {
        let own = reach.resource;
        own.give_back::<ResourceCluster>(&self.cluster);
        own.give_back::<ResourceKeyed>(&self.keyed);
        own.give_back::<InstalledAdaptive>(&self.adaptive);
        if let Some(all) = reach.inbound {
            all.give_back::<InstalledAdaptive>(&self.inbound_adaptive);
        }
        own.give_back::<ResourceBreakers>(&self.breakers);
    }

    /// A queued entry starts its call at `now`: what it took follows it.
    pub(crate) fn rebase(&mut self, reach: Reach<'_>, now: u64) {
        let own = reach.resource;
        own.rebase::<ResourceCluster>(&mut self.cluster, now);
        own.rebase::<ResourceKeyed>(&mut self.keyed, now);
        own.rebase::<InstalledAdaptive>(&mut self.adaptive, now);
        if let Some(all) = reach.inbound {
            all.rebase::<InstalledAdaptive>(&mut self.inbound_adaptive, now);
        }
        own.rebase::<ResourceBreakers>(&mut self.breakers, now);
    }

    /// What the admitted entry keeps until it ends: the marks of the kinds that keep anything
    /// (for its `limited` byte), and what they keep beyond the mark.
    #[inline(always)]
    pub(crate) fn keep(&self) -> (u8, Kept) {
        let mut marks = 0;
        let mut kept = Kept::default();
        if let Some(cluster) = ResourceCluster::keep(&self.cluster) {
            kept.cluster = cluster;
            marks |= const { mark(CLUSTER) };
        }
        if let Some(keyed) = ResourceKeyed::keep(&self.keyed) {
            kept.keyed = keyed;
            marks |= const { mark(KEYED) };
        }
        if InstalledAdaptive::keep(&self.adaptive).is_some() {
            marks |= const { mark(ADAPTIVE) };
        }
        if InstalledAdaptive::keep(&self.inbound_adaptive).is_some() {
            marks |= const { mark(INBOUND_ADAPTIVE) };
        }
        (marks, kept)
    }
}

impl Kept {
    /// An entry answered (see [`OwnedEntry::answered`](crate::OwnedEntry::answered)): if a
    /// breaker of its resource is half-open, `decide` gives the breakers, which every exit
    /// reaches, the answer to decide the probes they can decide now.
    pub(crate) fn answered(reach: Reach<'_>, decide: impl FnOnce(&ResourceBreakers)) {
        let own = reach.resource;
        if own.has::<ResourceBreakers>() {
            if let Some(breakers) = own.load::<ResourceBreakers>().as_ref() {
                if breakers.any_half_open() {
                    decide(breakers);
                }
            }
        }
    }

    /// The entry that kept this, with these `marks`, ended: each kind marked, and each every
    /// exit reaches, is told, in the steps' order.
    pub(crate) fn exit(&self, reach: Reach<'_>, marks: u8, end: &End) {
        let own = reach.resource;
        let marked = |mark: u8| marks & mark != 0;
        own.exit::<ResourceCluster>(marked(const { mark(CLUSTER) }), self.cluster, end);
        own.exit::<ResourceKeyed>(marked(const { mark(KEYED) }), self.keyed, end);
        own.exit::<InstalledAdaptive>(marked(const { mark(ADAPTIVE) }), (), end);
        if let Some(all) = reach.inbound {
            all.exit::<InstalledAdaptive>(marked(const { mark(INBOUND_ADAPTIVE) }), (), end);
        }
        own.exit::<ResourceBreakers>(false, (), end);
    }
}

#[cfg(test)]
mod tests;
