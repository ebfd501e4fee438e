//! Per-thread accumulators: the current bucket of one thread, written without read-modify-write.

use super::event::{Event, MIN_RT_SLOT, SLOTS};
use super::ring::Ring;
use crate::sync::{fence, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::sync::Arc;

/// Set in a line's state while its owner hands a finished bucket over to the ring.
const BUSY: u64 = 1;

/// One thread's current bucket: a state word and seven counters, one cache line of its own; and,
/// on the next line of its padding, the thread's in-flight count.
///
/// Only the thread holding the matching slot ([`thread_slot`](crate::sync::thread_slot)) writes a
/// line, so its counters are updated with a plain load and store (no locked instruction). The
/// state is `(id + 1) << 1` for bucket `id` (0: never used), with [`BUSY`] set while the owner
/// moves the line to a new bucket.
pub(super) struct Line {
    state: AtomicU64,
    words: [AtomicU64; SLOTS],
    /// Entries this thread admitted minus those it ended, wrapping (an entry may end on another
    /// thread): its share of the node's concurrency. Not part of any bucket, so never moved or
    /// zeroed.
    in_flight: AtomicU64,
}

impl Line {
    fn new() -> Self {
        Self {
            state: AtomicU64::new(0),
            words: std::array::from_fn(|i| AtomicU64::new(fresh(i))),
            in_flight: AtomicU64::new(0),
        }
    }

    /// Adds `delta` (wrapping) to this thread's in-flight count (owner only).
    #[inline(always)]
    pub(super) fn add_in_flight(&self, delta: u64) {
        // Relaxed: a single writer; readers want the latest value, not an ordering.
        let word = &self.in_flight;
        word.store(
            word.load(Ordering::Relaxed).wrapping_add(delta),
            Ordering::Relaxed,
        );
    }

    /// This thread's in-flight count, wrapping.
    #[inline]
    pub(super) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Whether the line holds bucket `id` already (owner only): the common case of
    /// [`enter`](Self::enter), with nothing to move.
    #[inline(always)]
    pub(super) fn holds(&self, id: u64) -> bool {
        // Relaxed: only this thread writes the state.
        self.state.load(Ordering::Relaxed) >> 1 == id + 1
    }

    /// Adds `count` completions with response time `rt` (capped), `errors` of them errors
    /// (owner only, after [`enter`](Self::enter)).
    #[inline(always)]
    pub(super) fn add_completion(&self, rt: u64, count: u64, errors: u64) {
        self.bump(Event::Success.slot(), count);
        self.bump(Event::Rt.slot(), rt);
        self.lower_min(rt);
        if errors > 0 {
            self.bump(Event::Error.slot(), errors);
        }
    }

    /// Readies the line for bucket `id` (owner only). `false` if the line already holds a later
    /// bucket (this thread's clock read went backwards, as TSC skew between cores can make it).
    #[inline]
    pub(super) fn enter(&self, id: u64, ring: &Ring, feed: Option<&Feed>) -> bool {
        // Relaxed: only this thread writes the state.
        let held = self.state.load(Ordering::Relaxed) >> 1;
        if held == id + 1 {
            return true;
        }
        if held > id + 1 {
            return false;
        }
        self.move_to(held, id, ring, feed);
        true
    }

    /// Hands the bucket held (`held - 1`, if any) to the ring (and to the fed window's ring) and
    /// starts bucket `id`.
    #[cold]
    fn move_to(&self, held: u64, id: u64, ring: &Ring, feed: Option<&Feed>) {
        // Seqlock writer: mark busy, fence, write, publish. A reader that sees any write made
        // after the fence (the ring merge, the zeroed words) sees the state change on its re-check.
        self.state.store((held << 1) | BUSY, Ordering::Relaxed);
        fence(Ordering::Release);
        if held != 0 {
            let values: [u64; SLOTS] =
                std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
            // A bucket already recycled in the ring is outside every window: nothing to keep.
            ring.merge(held - 1, &values);
            if let Some(feed) = feed {
                feed.merge(held - 1, values);
            }
        }
        for (i, word) in self.words.iter().enumerate() {
            word.store(fresh(i), Ordering::Relaxed);
        }
        self.state.store((id + 1) << 1, Ordering::Release);
    }

    /// Adds `n` to word `slot` (owner only, after [`enter`](Self::enter)).
    #[inline]
    pub(super) fn bump(&self, slot: usize, n: u64) {
        let word = &self.words[slot];
        word.store(
            word.load(Ordering::Relaxed).saturating_add(n),
            Ordering::Relaxed,
        );
    }

    /// Lowers the min RT word to `rt` (owner only, after [`enter`](Self::enter)).
    #[inline]
    pub(super) fn lower_min(&self, rt: u64) {
        let word = &self.words[MIN_RT_SLOT];
        if rt < word.load(Ordering::Relaxed) {
            word.store(rt, Ordering::Relaxed);
        }
    }

    /// The state, for a reader's consistency check (`Acquire`: pairs with the owner's publish).
    #[inline]
    pub(super) fn state(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }

    /// The state, for a reader after its `Acquire` loads (or fence) already ordered the read.
    #[inline]
    pub(super) fn state_relaxed(&self) -> u64 {
        self.state.load(Ordering::Relaxed)
    }

    /// Word `slot` as a reader sees it.
    #[inline]
    pub(super) fn value(&self, slot: usize) -> u64 {
        self.words[slot].load(Ordering::Relaxed)
    }
}

/// The bucket a state word says the line holds, unless it is unused or busy.
#[inline]
pub(super) fn held_bucket(state: u64) -> Option<u64> {
    (state & BUSY == 0 && state != 0).then(|| (state >> 1) - 1)
}

/// Whether a state word says the line is being moved.
#[inline]
pub(super) fn is_busy(state: u64) -> bool {
    state & BUSY != 0
}

#[inline]
fn fresh(slot: usize) -> u64 {
    if slot == MIN_RT_SLOT {
        u64::MAX
    } else {
        0
    }
}

/// The accumulator lines of one window, one per thread slot below their count.
#[derive(Clone)]
pub(super) struct Accumulators {
    /// Shared (not copied) by a window that reads these lines as its own: see [`Feed`].
    lines: Arc<[CachePadded<Line>]>,
}

impl Accumulators {
    pub(super) fn new(count: usize) -> Self {
        Self {
            lines: (0..count).map(|_| CachePadded::new(Line::new())).collect(),
        }
    }

    /// The line owned by thread slot `slot`, if the window has one for it.
    #[inline]
    pub(super) fn owned(&self, slot: usize) -> Option<&Line> {
        self.lines.get(slot).map(|line| &**line)
    }

    /// The lines' in-flight counts, summed (wrapping).
    pub(super) fn in_flight_sum(&self) -> u64 {
        self.lines
            .iter()
            .fold(0u64, |sum, line| sum.wrapping_add(line.in_flight()))
    }

    pub(super) fn lines(&self) -> impl Iterator<Item = &Line> {
        self.lines.iter().map(|line| &**line)
    }

    pub(super) fn len(&self) -> usize {
        self.lines.len()
    }
}

/// Where a window's finished buckets also go: the ring of a coarser window (the node's minute
/// window) whose buckets are `ratio` of this window's, aligned to them.
///
/// The coarser window then needs no writes on the hot path: each thread's line hands it a whole
/// bucket when it moves on, and its reads count the lines still holding one of its buckets (it
/// shares them, divided by `ratio`). Occupied passes are not handed over: Sentinel counts them
/// in the second window only.
#[derive(Clone)]
pub(super) struct Feed {
    pub(super) ring: Ring,
    pub(super) ratio: u64,
}

impl Feed {
    /// Adds a finished bucket `id` of the feeding window to the fed window's ring.
    pub(super) fn merge(&self, id: u64, mut values: [u64; SLOTS]) -> bool {
        values[super::event::Event::OccupiedPass.slot()] = 0;
        self.ring.merge(id / self.ratio, &values)
    }

    /// Adds `n` to `event` of bucket `id` of the feeding window, in the fed window's ring.
    pub(super) fn add(&self, id: u64, event: super::event::Event, n: u64) -> bool {
        event == super::event::Event::OccupiedPass
            || self.ring.add(id / self.ratio, event.slot(), n)
    }
}
