//! A resource's flow rules as its entries check them: the compiled rules and every piece of
//! fast state they need, owned in one place and changed together by one method.

use super::admission::{AdmissionRing, AdmissionRings, RINGS};
use super::compiled::ResourceRules;
use super::gate::{DirectGate, GateRead};
use arc_swap::{ArcSwapOption, Guard};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One resource's flow rules, installed: the rule set, the flag that lets a rule-free entry
/// skip it, the gate's copy of the numbers of the rules it can hold, and the admission rings of
/// the QPS reject rules every caller meets.
#[derive(Debug)]
pub(crate) struct InstalledRules {
    /// Whether `rules` holds rules: lets the rule-free path skip the `ArcSwap` load.
    present: AtomicBool,
    /// The compiled rules, swapped whole when rules are loaded.
    rules: ArcSwapOption<ResourceRules>,
    /// Copies of the numbers of `rules` when they are all QPS reject rules that every caller
    /// meets, read without a reference on `rules` (closed otherwise). On a cache line of its
    /// own: read by every entry, written only by reloads.
    gate: CachePadded<DirectGate>,
    /// The admission rings of the QPS reject rules that count their own admissions.
    rings: AdmissionRings,
}

impl InstalledRules {
    /// No rules.
    pub(crate) fn new() -> Self {
        Self {
            present: AtomicBool::new(false),
            rules: ArcSwapOption::new(None),
            gate: CachePadded::new(DirectGate::new()),
            rings: AdmissionRings::default(),
        }
    }

    /// Whether rules are installed. Relaxed: a stale answer only delays seeing a load by a
    /// moment, as a stale rule set would.
    #[inline(always)]
    pub(crate) fn present(&self) -> bool {
        self.present.load(Ordering::Relaxed)
    }

    /// A read of the gate, if it holds the rules (see [`DirectGate::begin`]).
    #[inline(always)]
    pub(crate) fn gate(&self) -> Option<GateRead<'_>> {
        self.gate.begin()
    }

    /// The rule set.
    #[inline]
    pub(crate) fn load(&self) -> Guard<Option<Arc<ResourceRules>>> {
        self.rules.load()
    }

    /// Admission ring `index`.
    #[inline(always)]
    pub(crate) fn ring(&self, index: u8) -> &AdmissionRing {
        self.rings.get(index)
    }

    /// Installs `rules` (none to remove them): under the core's rules lock, or before the
    /// resource is shared (writers of the gate must not overlap).
    pub(crate) fn install(&self, rules: Option<Arc<ResourceRules>>) {
        // The gate closes before its rules change and opens after: a reader that finds it
        // closed reads `rules`, which always holds the old rules or the new.
        self.gate.publish(None);
        if let Some(new) = &rules {
            // A ring that passes to another rule starts over. An unchanged rule keeps its ring
            // (the same controller holds it) and its counts.
            let old = self.rules.load();
            for ring in 0..RINGS as u8 {
                let Some(user) = new.ring_user(ring) else {
                    continue;
                };
                let previous = old.as_ref().and_then(|old| old.ring_user(ring));
                if !previous.is_some_and(|previous| Arc::ptr_eq(previous, user)) {
                    self.rings.get(ring).reset();
                }
            }
        }
        let gate = rules.as_ref().and_then(|rules| rules.gate);
        // Flag first when adding, after when removing: a reader that sees the flag unset skips
        // rules that are being removed anyway.
        if rules.is_some() {
            self.rules.store(rules);
            self.present.store(true, Ordering::Release);
        } else {
            self.present.store(false, Ordering::Release);
            self.rules.store(None);
        }
        self.gate.publish(gate.as_ref());
    }
}
