//! The shared ring of buckets: every thread may write it, with compare-and-swap.

use super::event::{MIN_RT_SLOT, SLOTS};
use super::tagged::{self, HALF_TAG_SPACE, VALUE_MAX};
use crate::sync::{spin_wait, AtomicU64, Ordering};
use std::sync::Arc;

/// Set in a bucket's start word while the bucket is being reset after a very long idle time.
const ROLLING: u64 = 1 << 63;

/// One bucket's counters: seven tagged words in one cache line.
#[repr(align(64))]
pub(super) struct Cells {
    pub(super) words: [AtomicU64; SLOTS],
}

/// A ring of `buckets` shared buckets; bucket `id` lives in slot `id % buckets`.
///
/// Written by threads that have no accumulator of their own, by out-of-order (clock-skewed)
/// adds, and by accumulators handing over a finished bucket. Every word is tagged with its window
/// (see the `tagged` module), so a bucket resets itself in the same compare-and-swap that adds to
/// it, and an add for a recycled bucket is refused instead of landing in the wrong window.
///
/// Cloning shares the buckets: the finer window that feeds this one holds a clone (see
/// `accumulator::Feed`).
#[derive(Clone)]
pub(super) struct Ring {
    buckets: u64,
    /// Per slot: `id + 1` of the bucket it holds (0 when never used), `ROLLING` while reset.
    starts: Arc<[AtomicU64]>,
    cells: Arc<[Cells]>,
}

impl Ring {
    pub(super) fn new(buckets: usize) -> Self {
        Self {
            buckets: buckets as u64,
            starts: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            cells: (0..buckets)
                .map(|_| Cells {
                    words: std::array::from_fn(|_| AtomicU64::new(0)),
                })
                .collect(),
        }
    }

    #[inline]
    pub(super) fn slot(&self, id: u64) -> usize {
        (id % self.buckets) as usize
    }

    /// Makes the slot of `id` hold bucket `id` and returns its cells, or `None` if the slot
    /// already holds a later bucket.
    pub(super) fn claim(&self, id: u64) -> Option<&Cells> {
        let slot = self.slot(id);
        let start = &self.starts[slot];
        let want = id + 1;
        let mut seen = start.load(Ordering::Acquire);
        let mut spins = 0;
        while seen != want {
            if seen & ROLLING != 0 {
                if seen & !ROLLING > want {
                    return None;
                }
                // Another thread is resetting this slot after a long idle time: a few stores.
                spin_wait(&mut spins);
                seen = start.load(Ordering::Acquire);
                continue;
            }
            if seen > want {
                return None;
            }
            // The slot holds an older bucket (or none). Words tagged with an older window reset
            // themselves on their next update, so moving the start is all a roll needs, unless the
            // slot sat idle so long that the 24-bit tags may have wrapped: then reset every word
            // while other writers wait on the ROLLING flag.
            let full_reset = seen == 0 || want - seen >= HALF_TAG_SPACE;
            let claim = if full_reset { want | ROLLING } else { want };
            match start.compare_exchange(seen, claim, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) if full_reset => {
                    for (i, word) in self.cells[slot].words.iter().enumerate() {
                        let fresh = if i == MIN_RT_SLOT { VALUE_MAX } else { 0 };
                        // Relaxed: published by the Release store of the start below.
                        word.store(tagged::pack(id, fresh), Ordering::Relaxed);
                    }
                    start.store(want, Ordering::Release);
                    break;
                }
                Ok(_) => break,
                Err(actual) => seen = actual,
            }
        }
        Some(&self.cells[slot])
    }

    /// Adds `n` to word `slot` of bucket `id`. `false` if the bucket was already recycled.
    #[inline]
    pub(super) fn add(&self, id: u64, slot: usize, n: u64) -> bool {
        match self.claim(id) {
            Some(cells) => tagged::add(&cells.words[slot], id, n),
            None => false,
        }
    }

    /// Adds the summed words of `values` (and the min in `MIN_RT_SLOT`, `u64::MAX` for none) to
    /// bucket `id`, skipping zeros. `false` if the bucket was already recycled.
    pub(super) fn merge(&self, id: u64, values: &[u64; SLOTS]) -> bool {
        let Some(cells) = self.claim(id) else {
            return false;
        };
        let mut filed = true;
        for (slot, (&value, word)) in values.iter().zip(&cells.words).enumerate() {
            if slot == MIN_RT_SLOT {
                if value != u64::MAX {
                    filed &= tagged::min(word, id, value.min(VALUE_MAX));
                }
            } else if value != 0 {
                filed &= tagged::add(word, id, value.min(VALUE_MAX));
            }
        }
        filed
    }

    /// The bucket the slot of `id` holds (the newest claimed for it), if any.
    pub(super) fn held(&self, id: u64) -> Option<u64> {
        let start = self.starts[self.slot(id)].load(Ordering::Acquire) & !ROLLING;
        start.checked_sub(1)
    }

    /// The cells of bucket `id`, if its slot holds it.
    #[inline]
    pub(super) fn bucket(&self, id: u64) -> Option<&Cells> {
        let slot = self.slot(id);
        (self.starts[slot].load(Ordering::Acquire) == id + 1).then(|| &self.cells[slot])
    }

    /// Word `slot` of bucket `id` (0, or `u64::MAX` for the min, if absent).
    #[inline]
    pub(super) fn value(&self, id: u64, slot: usize) -> u64 {
        let absent = if slot == MIN_RT_SLOT { u64::MAX } else { 0 };
        self.bucket(id)
            .and_then(|cells| tagged::value_for(cells.words[slot].load(Ordering::Relaxed), id))
            .unwrap_or(absent)
    }
}
