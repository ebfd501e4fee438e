//! Per-key limits (hot parameters): each user, IP, tenant or product id gets its own limit,
//! with Sentinel's `ParamFlowRule` semantics, in memory fixed per rule whatever the number of
//! keys, and without forgetting a key that is being limited.
//!
//! A key is any hashable value: it is reduced to a 64-bit [`fingerprint`] (no allocation, the
//! key is never stored), so two keys whose fingerprints collide share a limit (about one pair
//! in 2^64 / n² for n keys: once in 10^7 for a million keys; per-key concurrency tells keys in
//! flight apart by 32 bits of it, so two keys in flight at once share a count once in about
//! 4 × 10^9 pairs, which only refuses early). The fingerprint's seed is random per process, so
//! which keys share a fingerprint, a rule's places or a sketch's cells cannot be computed from
//! outside (to refuse a chosen key by crowding it). See [`KeyedLimiter`] for how the busiest
//! keys keep exact state and what the others get.

mod limiter;
mod rule;
mod rule_set;
mod sketch;
mod slot;
mod step;
mod validate;

#[cfg(all(test, spillway_loom))]
mod loom_flight;
#[cfg(all(test, spillway_loom))]
mod loom_window;
#[cfg(all(test, not(spillway_loom)))]
mod tests;

pub use limiter::{KeyedLimiter, KeyedStats, SKETCH_WIDTH, WAYS};
pub use rule::{KeyException, KeyedBehavior, KeyedRule, DEFAULT_CAPACITY};
pub use rule_set::MAX_KEYED_RULES_PER_RESOURCE;
pub(crate) use rule_set::{KeyedRuleSet, ResourceKeyed};
pub use validate::{
    validate_keyed_rules, KeyedRuleError, MAX_CAPACITY, MAX_DURATION_SECS, MAX_EXCEPTIONS,
};

use std::hash::{BuildHasher, Hash};

/// Seed of the key hash: drawn at random once per process (from the standard library's
/// randomly keyed hasher), the same for every rule and call in it, so that an exception named
/// as text matches the `&str` key with the same characters. Random so that no one outside the
/// process can compute which keys share a rule's places or sketch cells with a key they want
/// refused: with a fixed seed, anyone with the source could pick keys that filled a chosen
/// user's cells and refuse that user alone.
fn seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(KEY_POSITIONS))
}

/// A fingerprint with a fixed seed, for tests whose figures depend on which keys share cells:
/// the same in every run.
#[cfg(test)]
pub(crate) fn fixed_fingerprint<K: Hash + ?Sized>(key: &K) -> u64 {
    foldhash::quality::FixedState::with_seed(0x5350_494c_4c57_4159)
        .hash_one(key)
        .max(1)
}

/// Positions of the keys an entry can carry (Sentinel's argument index, 0 to 3).
pub const KEY_POSITIONS: usize = 4;

/// The fingerprints of an entry's keys by position (0: none).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keys([u64; KEY_POSITIONS]);

impl Keys {
    pub(crate) const NONE: Keys = Keys([0; KEY_POSITIONS]);

    /// Sets the key at `position` (ignored past the last).
    pub(crate) fn set(&mut self, position: usize, fingerprint: u64) {
        if let Some(slot) = self.0.get_mut(position) {
            *slot = fingerprint;
        }
    }

    /// The key at `position`, if the entry has one.
    pub(crate) fn get(&self, position: usize) -> Option<u64> {
        self.0.get(position).copied().filter(|&key| key != 0)
    }

    /// Whether the entry has any key.
    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        self.0 != [0; KEY_POSITIONS]
    }
}

/// The 32 bits of a fingerprint that per-key concurrency counts a key by (an entry keeps them
/// until it ends, in 4 bytes).
pub(crate) fn digest(fingerprint: u64) -> u32 {
    (fingerprint ^ (fingerprint >> 32)) as u32
}

/// A digest spread back over 64 bits, to pick a key's cells (SplitMix64's step).
pub(crate) fn spread(digest: u32) -> u64 {
    mix(u64::from(digest).wrapping_add(0x9e37_79b9_7f4a_7c15))
}

/// SplitMix64's finaliser: 64 bits from 64, each depending on all of them.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A key's 64-bit fingerprint: what a per-key rule knows of it. The same key has the same
/// fingerprint throughout a process, and another one in the next process (the hash's seed is
/// random per process).
///
/// # Examples
///
/// ```
/// use spillway::keyed::fingerprint;
///
/// assert_eq!(fingerprint("alice"), fingerprint(&String::from("alice")));
/// assert_ne!(fingerprint("alice"), fingerprint("bob"));
/// ```
pub fn fingerprint<K: Hash + ?Sized>(key: &K) -> u64 {
    // Never 0, which marks a free place in a rule's table.
    foldhash::quality::FixedState::with_seed(seed())
        .hash_one(key)
        .max(1)
}
