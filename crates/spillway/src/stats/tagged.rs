//! Words that carry their own window: the lock-free reset of window buckets.
//!
//! Every counter in a window bucket is one `u64` holding `tag << VALUE_BITS | value`, where the
//! tag is the low [`TAG_BITS`] bits of the window id the value belongs to. An update for window
//! `w` is one compare-and-swap that, in the same atomic step,
//!
//! - adds to the value if the word's tag is `w`'s,
//! - replaces the word by `w`'s first value if the tag is older (this *is* the bucket reset: no
//!   separate zeroing step exists that a concurrent add could slip past and be wiped by),
//! - refuses if the tag is newer: the event's window has already been recycled for a later one,
//!   so filing it would count it in the wrong window. The caller counts it as late instead.
//!
//! Readers take a word's value only when its tag is the window they ask about. Tags wrap after
//! 2^24 windows; the window's per-bucket start ids (full width) guard against that aliasing.

use crate::sync::{AtomicU64, Ordering};

/// Bits of the window id kept in each word.
pub(crate) const TAG_BITS: u32 = 24;
/// Bits of value in each word.
pub(crate) const VALUE_BITS: u32 = 64 - TAG_BITS;
/// Largest value a word holds; sums saturate here (2^40 - 1: 12.7 days of summed microseconds
/// per bucket and stripe).
pub(crate) const VALUE_MAX: u64 = (1 << VALUE_BITS) - 1;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// Half the tag space: a tag less than this far behind is older, otherwise newer.
pub(crate) const HALF_TAG_SPACE: u64 = 1 << (TAG_BITS - 1);

#[inline]
pub(crate) const fn tag(window: u64) -> u64 {
    window & TAG_MASK
}

#[inline]
pub(crate) const fn pack(window: u64, value: u64) -> u64 {
    (tag(window) << VALUE_BITS) | (value & VALUE_MAX)
}

#[inline]
const fn word_tag(word: u64) -> u64 {
    word >> VALUE_BITS
}

#[inline]
const fn word_value(word: u64) -> u64 {
    word & VALUE_MAX
}

/// Whether `word` was written for a window older than `window` (tags compared modulo 2^24).
#[inline]
fn is_older(word: u64, window: u64) -> bool {
    let behind = tag(window).wrapping_sub(word_tag(word)) & TAG_MASK;
    behind != 0 && behind < HALF_TAG_SPACE
}

/// The value of `word` if it belongs to `window`.
#[inline]
pub(crate) fn value_for(word: u64, window: u64) -> Option<u64> {
    (word_tag(word) == tag(window)).then_some(word_value(word))
}

/// Applies `update` to the value for `window` in `cell` (starting from `fresh` if the cell holds
/// an older window). Returns `false`, changing nothing, if the cell already holds a newer window.
#[inline]
fn update(cell: &AtomicU64, window: u64, fresh: u64, update: impl Fn(u64) -> u64) -> bool {
    // Relaxed throughout: the word is self-contained (tag and value move together), and a CAS
    // always operates on the latest value in the word's modification order.
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        let value = if word_tag(current) == tag(window) {
            word_value(current)
        } else if is_older(current, window) {
            fresh
        } else {
            return false;
        };
        let next = pack(window, update(value));
        if next == current {
            return true;
        }
        match cell.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(actual) => current = actual,
        }
    }
}

/// Adds `delta` to `window`'s value, saturating at [`VALUE_MAX`].
#[inline]
pub(crate) fn add(cell: &AtomicU64, window: u64, delta: u64) -> bool {
    update(cell, window, 0, |v| v.saturating_add(delta).min(VALUE_MAX))
}

/// Adds `delta` to `window`'s value like [`add`], also taking over a word whose value is zero
/// whatever its tag (a never-written word, whose zero tag may look newer than `window`).
#[inline]
pub(crate) fn add_or_claim_empty(cell: &AtomicU64, window: u64, delta: u64) -> bool {
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        let value = if word_tag(current) == tag(window) {
            word_value(current)
        } else if word_value(current) == 0 || is_older(current, window) {
            0
        } else {
            return false;
        };
        let next = pack(window, value.saturating_add(delta).min(VALUE_MAX));
        match cell.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(actual) => current = actual,
        }
    }
}

/// Lowers `window`'s value to `value` if smaller (a fresh window starts at [`VALUE_MAX`]).
#[inline]
pub(crate) fn min(cell: &AtomicU64, window: u64, value: u64) -> bool {
    update(cell, window, VALUE_MAX, |v| v.min(value))
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn add_resets_an_older_window() {
        let cell = AtomicU64::new(pack(7, 100));
        assert!(add(&cell, 8, 3));
        assert_eq!(value_for(cell.load(Ordering::Relaxed), 8), Some(3));
        assert_eq!(value_for(cell.load(Ordering::Relaxed), 7), None);
    }

    #[test]
    fn add_refuses_a_newer_window() {
        let cell = AtomicU64::new(pack(9, 5));
        assert!(!add(&cell, 8, 3));
        assert_eq!(value_for(cell.load(Ordering::Relaxed), 9), Some(5));
    }

    #[test]
    fn min_starts_from_max() {
        let cell = AtomicU64::new(pack(1, 0));
        assert!(min(&cell, 2, 40));
        assert!(min(&cell, 2, 50));
        assert_eq!(value_for(cell.load(Ordering::Relaxed), 2), Some(40));
    }

    #[test]
    fn sums_saturate_without_touching_the_tag() {
        let cell = AtomicU64::new(pack(3, VALUE_MAX - 1));
        assert!(add(&cell, 3, 10));
        assert_eq!(value_for(cell.load(Ordering::Relaxed), 3), Some(VALUE_MAX));
    }

    #[test]
    fn an_empty_word_is_claimed_whatever_its_tag() {
        // Tag 0 looks newer than a window whose tag is more than half the tag space ahead.
        let window = HALF_TAG_SPACE + 5;
        let cell = AtomicU64::new(0);
        assert!(!add(&cell, window, 1));
        assert!(add_or_claim_empty(&cell, window, 1));
        assert_eq!(value_for(cell.load(Ordering::Relaxed), window), Some(1));
    }

    proptest! {
        #[test]
        fn age_is_antisymmetric_across_the_wrap(window in 0u64..1 << 40, gap in 1u64..HALF_TAG_SPACE) {
            let older = pack(window, 0);
            prop_assert!(is_older(older, window + gap));
            prop_assert!(!is_older(pack(window + gap, 0), window));
            prop_assert!(!is_older(older, window));
        }

        #[test]
        fn pack_round_trips(window in any::<u64>(), value in 0..=VALUE_MAX) {
            prop_assert_eq!(value_for(pack(window, value), window), Some(value));
        }
    }
}
