//! A gauge whose owned lines are written without locked instructions.

use super::window::MAX_STRIPES;
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::fmt;

/// A concurrency gauge: one line per owned thread slot (single writer: plain load and store), and
/// one shared line (`fetch_add`) for threads without one. The value is the wrapping sum of the
/// lines, read as signed; an entry may start on one thread and end on another, which leaves one
/// line high and another low but the sum right.
pub(crate) struct SlotGauge {
    owned: Box<[CachePadded<AtomicU64>]>,
    shared: CachePadded<AtomicU64>,
}

impl SlotGauge {
    pub(crate) fn new(lines: usize) -> Self {
        Self {
            owned: (0..lines.min(MAX_STRIPES))
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            shared: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Adds `delta` (wrapping; pass `u64::MAX` for minus one) from thread slot `slot`.
    #[inline]
    pub(crate) fn add(&self, slot: usize, delta: u64) {
        match self.owned.get(slot) {
            // Relaxed: a single writer; readers want the latest value, not an ordering.
            Some(line) => line.store(
                line.load(Ordering::Relaxed).wrapping_add(delta),
                Ordering::Relaxed,
            ),
            None => {
                self.shared.fetch_add(delta, Ordering::Relaxed);
            }
        }
    }

    /// The sum of every line.
    pub(crate) fn value(&self) -> i64 {
        self.owned
            .iter()
            .fold(self.shared.load(Ordering::Relaxed), |sum, line| {
                sum.wrapping_add(line.load(Ordering::Relaxed))
            }) as i64
    }
}

impl fmt::Debug for SlotGauge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SlotGauge").field(&self.value()).finish()
    }
}
