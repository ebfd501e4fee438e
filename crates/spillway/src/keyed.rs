//! Per-key limits (hot parameters): each user, IP, tenant or product id gets its own limit,
//! with Sentinel's `ParamFlowRule` semantics, in memory fixed per rule whatever the number of
//! keys, and without forgetting a key that is being limited.
//!
//! A key is any hashable value: it is reduced to a 64-bit [`fingerprint`] (no allocation, the
//! key is never stored), so two keys whose fingerprints collide share a limit (about one pair
//! in 2^64 / n² for n keys: once in 10^7 for a million keys). See [`KeyedLimiter`] for how the
//! busiest keys keep exact state and what the others get.

mod limiter;
mod rule;
mod sketch;
mod validate;

#[cfg(all(test, not(spillway_loom)))]
mod tests;

pub use limiter::{KeyedLimiter, KeyedStats, WAYS};
pub use rule::{KeyException, KeyedBehavior, KeyedRule, DEFAULT_CAPACITY};
pub use validate::{
    validate_keyed_rules, KeyedRuleError, MAX_CAPACITY, MAX_DURATION_SECS, MAX_EXCEPTIONS,
};

use std::hash::{BuildHasher, Hash};

/// Seed of the key hash: fixed, so that a key's fingerprint is the same in every process (and
/// an exception named as text matches the `&str` key with the same characters).
const SEED: u64 = 0x5350_494c_4c57_4159;

/// A key's 64-bit fingerprint: what a per-key rule knows of it.
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
    foldhash::quality::FixedState::with_seed(SEED).hash_one(key)
}
