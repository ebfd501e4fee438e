//! A resource's QPS reject rules that every caller meets, held in the resource itself, so that an
//! entry checks them without taking a reference on the rule set.
//!
//! The rule set of a resource sits behind an `ArcSwapOption`, and loading from it takes a
//! reference that must be given back: two atomic read-modify-writes on every entry, most of the
//! cost of a refusal. The rules that the entry path checks on its short path (every rule a QPS
//! reject rule that every caller meets, see [`ResourceRules`](super::ResourceRules)) need only a
//! few numbers each: the count, and which of the resource's admission rings counts for the rule.
//! The gate keeps copies of those numbers in plain atomic words, under a sequence number (a
//! seqlock): the writer makes the number odd, writes, and makes it even again; a reader reads
//! the number, the words, and the number again, and trusts the words only if the number was even
//! and did not change. A reader never waits: while a reload writes the gate it reads the rule
//! set instead, as it does for a resource whose rules the gate cannot hold.
//!
//! Rule loads are serialised (one writer at a time), which a seqlock needs.

use crate::sync::{fence, AtomicU64, Ordering};

/// Most rules the gate holds (as many as one entry can count admissions for).
pub(crate) const GATE_RULES: usize = crate::entry_caps::MAX_COUNTED;

/// One rule, as the gate holds it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GateRule {
    /// The rule's count.
    pub(crate) count: f64,
    /// `floor(count)` for the whole-number comparison of a one-second window (see
    /// [`AdmissionRing::admit`](super::AdmissionRing::admit)).
    pub(crate) whole_count: u64,
    /// The resource's admission ring that counts the rule's admissions.
    pub(crate) ring: u8,
    /// The rule id's interned number.
    pub(crate) id: u32,
}

impl GateRule {
    const EMPTY: GateRule = GateRule {
        count: 0.0,
        whole_count: 0,
        ring: 0,
        id: u32::MAX,
    };
}

/// The rules a reader saw, in order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GateRules {
    len: usize,
    rules: [GateRule; GATE_RULES],
}

impl GateRules {
    /// The first `GATE_RULES` of `rules`' rules, or `None` if there are more or none.
    pub(crate) fn new(rules: &[GateRule]) -> Option<Self> {
        if rules.is_empty() || rules.len() > GATE_RULES {
            return None;
        }
        let mut held = [GateRule::EMPTY; GATE_RULES];
        held[..rules.len()].copy_from_slice(rules);
        Some(Self {
            len: rules.len(),
            rules: held,
        })
    }

    /// The rules.
    #[inline]
    pub(crate) fn rules(&self) -> &[GateRule] {
        &self.rules[..self.len]
    }
}

/// Sequence bit set while the writer writes.
const WRITING: u64 = 1;
/// The sequence number's bits 1 to 3 hold how many rules the gate holds (0: closed).
const LEN_SHIFT: u32 = 1;
const LEN_MASK: u64 = 0b111;
/// Bits 4 and up count the writes.
const VERSION_ONE: u64 = 1 << 4;

/// The words of one rule.
#[derive(Debug)]
struct Words {
    count: AtomicU64,
    whole_count: AtomicU64,
    /// `[id number: 32][unused: 24][ring: 8]`.
    names: AtomicU64,
}

/// The gate (see the module docs).
#[derive(Debug)]
pub(crate) struct DirectGate {
    sequence: AtomicU64,
    words: [Words; GATE_RULES],
}

impl Default for DirectGate {
    fn default() -> Self {
        Self::new()
    }
}

impl DirectGate {
    /// A closed gate: readers read the rule set.
    pub(crate) fn new() -> Self {
        Self {
            sequence: AtomicU64::new(0),
            words: std::array::from_fn(|_| Words {
                count: AtomicU64::new(0),
                whole_count: AtomicU64::new(0),
                names: AtomicU64::new(0),
            }),
        }
    }

    /// Starts a read: `None` if the gate is closed or being written. Each rule is then read
    /// with [`GateRead::rule`], and trusted once [`GateRead::unchanged`] says no write
    /// overlapped the read so far; nothing is copied that the caller does not use.
    #[inline]
    pub(crate) fn begin(&self) -> Option<GateRead<'_>> {
        let sequence = self.sequence.load(Ordering::Acquire);
        let len = ((sequence >> LEN_SHIFT) & LEN_MASK) as usize;
        if sequence & WRITING != 0 || len == 0 || len > GATE_RULES {
            return None;
        }
        Some(GateRead {
            gate: self,
            sequence,
            len,
        })
    }

    /// Every rule at once, if the gate is open and no write overlapped the read.
    #[cfg(test)]
    pub(crate) fn read(&self) -> Option<GateRules> {
        let read = self.begin()?;
        let mut rules = [GateRule::EMPTY; GATE_RULES];
        for (index, rule) in rules.iter_mut().enumerate().take(read.len()) {
            *rule = read.rule(index);
        }
        read.unchanged().then_some(GateRules {
            len: read.len(),
            rules,
        })
    }

    /// Holds `rules` from now on, or closes the gate (`None`). Callers are serialised.
    pub(crate) fn publish(&self, rules: Option<&GateRules>) {
        let sequence = self.sequence.load(Ordering::Relaxed);
        let version = (sequence & !(VERSION_ONE - 1)).wrapping_add(VERSION_ONE);
        self.sequence.store(sequence | WRITING, Ordering::Relaxed);
        // Orders the odd number before the writes below, for a reader whose fence follows them.
        fence(Ordering::Release);
        let rules = rules.map_or(&[][..], GateRules::rules);
        for (rule, words) in rules.iter().zip(&self.words) {
            words.count.store(rule.count.to_bits(), Ordering::Relaxed);
            words.whole_count.store(rule.whole_count, Ordering::Relaxed);
            let names = u64::from(rule.id) << 32 | u64::from(rule.ring);
            words.names.store(names, Ordering::Relaxed);
        }
        let len = rules.len() as u64;
        self.sequence
            .store(version | len << LEN_SHIFT, Ordering::Release);
    }
}

/// A read of the gate in progress (see [`DirectGate::begin`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GateRead<'a> {
    gate: &'a DirectGate,
    sequence: u64,
    len: usize,
}

impl GateRead<'_> {
    /// How many rules the gate holds (1 to [`GATE_RULES`]).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Rule `index` (below [`len`](Self::len)), to trust only once
    /// [`unchanged`](Self::unchanged) says so.
    #[inline]
    pub(crate) fn rule(&self, index: usize) -> GateRule {
        let words = &self.gate.words[index];
        let names = words.names.load(Ordering::Relaxed);
        GateRule {
            count: f64::from_bits(words.count.load(Ordering::Relaxed)),
            whole_count: words.whole_count.load(Ordering::Relaxed),
            ring: names as u8,
            id: (names >> 32) as u32,
        }
    }

    /// Whether no write overlapped the read so far: the rules read are the ones published.
    #[inline]
    pub(crate) fn unchanged(&self) -> bool {
        // Orders the loads of the rules before the second read of the sequence: if any of them
        // saw a write, this read sees the odd number that came before it (or a later one).
        fence(Ordering::Acquire);
        self.gate.sequence.load(Ordering::Relaxed) == self.sequence
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;

    fn rule(count: f64, ring: u8, id: u32) -> GateRule {
        GateRule {
            count,
            whole_count: count.floor() as u64,
            ring,
            id,
        }
    }

    #[test]
    fn a_new_gate_is_closed() {
        assert_eq!(DirectGate::new().read(), None);
    }

    #[test]
    fn reads_back_what_was_published_and_closes() {
        let gate = DirectGate::new();
        let one = GateRules::new(&[rule(2.5, 1, 7)]).unwrap();
        gate.publish(Some(&one));
        assert_eq!(gate.read(), Some(one));
        assert_eq!(gate.read().unwrap().rules(), &[rule(2.5, 1, 7)]);
        let four = GateRules::new(&[
            rule(1.0, 0, 1),
            rule(2.0, 1, 2),
            rule(3.0, 2, 3),
            rule(4.0, 3, u32::MAX - 1),
        ])
        .unwrap();
        gate.publish(Some(&four));
        assert_eq!(gate.read(), Some(four));
        gate.publish(None);
        assert_eq!(gate.read(), None);
    }

    #[test]
    fn holds_one_to_four_rules() {
        assert_eq!(GateRules::new(&[]), None);
        assert_eq!(GateRules::new(&[rule(1.0, 0, 0); GATE_RULES + 1]), None);
        assert_eq!(
            GateRules::new(&[rule(1.0, 0, 0); GATE_RULES]).map(|r| r.rules().len()),
            Some(GATE_RULES)
        );
    }

    #[test]
    fn a_read_during_a_write_sees_nothing() {
        let gate = DirectGate::new();
        gate.publish(GateRules::new(&[rule(1.0, 0, 0)]).as_ref());
        let sequence = gate.sequence.load(Ordering::Relaxed);
        gate.sequence.store(sequence | WRITING, Ordering::Relaxed);
        assert_eq!(gate.read(), None);
    }
}
