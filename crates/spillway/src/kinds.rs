//! The rule kinds a resource checks after its flow rules, as one list: where the instance keeps
//! each kind's rules as loaded ([`Sets`]), where a resource keeps its own ([`Slots`], with one
//! flag bit per kind, so that a resource with none of a kind pays one relaxed load and a bit
//! test), and how a load reaches every resource ([`Kind`]).
//!
//! A new kind implements [`Kind`] here and takes a field in [`Sets`] and in [`Slots`]; loading
//! it is [`Spillway::replace_rules`](crate::Spillway), reading a resource's rules is
//! [`Slots::load`]. Its step in the entry pipeline goes where its order says (`entry/later.rs`).

use crate::adaptive::{AdaptiveRuleSet, InstalledAdaptive};
use crate::breaker::{BreakerRuleSet, ResourceBreakers};
use crate::cluster::{ClusterRuleSet, ResourceCluster};
use crate::keyed::{KeyedRuleSet, ResourceKeyed};
use arc_swap::{ArcSwap, ArcSwapOption, Guard};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind's own bit: a kind never reads another's flag.
    #[test]
    fn every_kind_has_its_own_bit() {
        let flags = [
            ResourceBreakers::FLAG,
            InstalledAdaptive::FLAG,
            ResourceCluster::FLAG,
            ResourceKeyed::FLAG,
        ];
        for (i, a) in flags.iter().enumerate() {
            assert_eq!(a.count_ones(), 1);
            for b in &flags[i + 1..] {
                assert_eq!(a & b, 0);
            }
        }
    }

    #[test]
    fn setting_a_kind_sets_its_flag_and_clearing_clears_it() {
        let slots = Slots::default();
        assert!(!slots.any());
        slots.set::<ResourceCluster>(Some(Arc::default()));
        assert!(slots.has::<ResourceCluster>() && !slots.has::<ResourceKeyed>());
        assert!(slots.load::<ResourceCluster>().is_some());
        slots.set::<ResourceCluster>(None);
        assert!(!slots.any() && slots.load::<ResourceCluster>().is_none());
    }
}
