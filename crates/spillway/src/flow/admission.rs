//! The admissions a QPS reject rule counts itself, so that its check reads a few words instead
//! of the node's whole window, and admits by compare-and-swap instead of read-then-add.
//!
//! Sentinel's `DefaultController` reads the node's pass QPS and lets the entry through if
//! `(int) passQps + acquire <= count`; the entry's pass is added to the node later. Two threads
//! that read the same pass QPS both pass, so under contention Sentinel admits more than `count`.
//! A rule with an [`AdmissionRing`] instead keeps, per bucket of the node's second window, the
//! passes it admitted, and admits by swapping the current bucket's word from the value it
//! checked to that value plus `acquire`: a racing admission makes the swap fail and checks again.
//! A refusal writes nothing here.
//!
//! The ring covers the buckets of the window (`id - buckets + 1 ..= id`) and the ones ahead that
//! prioritized entries may borrow (`id + 1 ..= id + buckets`), so `2 * buckets` slots, each a
//! word `[bucket id + 1: 32 bits][count: 32 bits]`. A slot whose tag is not the bucket asked for
//! holds a bucket that has left the window (or not been used), and counts 0.
//!
//! It counts what the node counts only if every pass on the node goes through the rule: the
//! entry path uses it for rules on the resource's own node that every caller meets
//! (`limit_app = default`, strategy `direct`). When first used it is seeded from the node's
//! window, so that a rule loaded on a busy resource sees the passes before it; callers that
//! arrive during the seed wait for it (a read of the window meanwhile would admit past it).

use super::QpsReject;
use crate::stats::{Event, ResourceNode, SlidingWindow};
use crate::sync::{AtomicU64, AtomicU8, Ordering};

/// Slots in the ring: windows of up to `SLOTS / 2` buckets use it.
const SLOTS: usize = 8;
const UNSEEDED: u8 = 0;
const SEEDING: u8 = 1;
const READY: u8 = 2;
/// The window has more buckets than the ring covers: the rule reads the window instead.
const UNUSABLE: u8 = 3;

/// Per-bucket admissions of one rule (see the module docs).
#[derive(Debug)]
pub(crate) struct AdmissionRing {
    state: AtomicU8,
    slots: [AtomicU64; SLOTS],
}

/// What a successful [`AdmissionRing::admit`] counted, to give back: the bucket's tag (its id
/// plus one, in 32 bits) and the count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Admitted {
    tag: u32,
    /// 0 for none (the default).
    pub(crate) count: u32,
}

#[inline]
fn tag(id: u64) -> u64 {
    (id.wrapping_add(1) & 0xFFFF_FFFF) << 32
}

#[inline]
fn count_in(word: u64, id: u64) -> u64 {
    if word & !0xFFFF_FFFF == tag(id) {
        word & 0xFFFF_FFFF
    } else {
        0
    }
}

/// The most passes a one-second window admits under a rule of `count` (finite, at least 0, as
/// validation ensures), `floor(count)`, for [`AdmissionRing::admit`]'s integer comparison
/// (`u64::MAX` when no window could ever hold more).
pub(crate) fn whole_count(count: f64) -> u64 {
    // Window counts stay far below 2^53, where f64 is exact: for a whole number of passes `n`,
    // `n as f64 > count` is `n > floor(count)`.
    if count < 9_007_199_254_740_992.0 {
        count.floor() as u64
    } else {
        u64::MAX
    }
}

impl Default for AdmissionRing {
    fn default() -> Self {
        Self::new()
    }
}

impl AdmissionRing {
    /// An empty ring, seeded from the window on first use.
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicU8::new(UNSEEDED),
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Starts the ring over for another rule: it seeds itself from the window on next use. The
    /// slots keep their words: each is tagged with its bucket, and the seed rewrites every slot
    /// of the buckets it can be asked for. An entry that read the previous rules may still count
    /// one admission here, before or during the seed: the new rule can then see one pass more or
    /// fewer than the window for each entry that raced the reload.
    pub(crate) fn reset(&self) {
        self.state.store(UNSEEDED, Ordering::Release);
    }

    /// Whether the ring can count for `window` (at most `SLOTS / 2` buckets), seeding it from the
    /// window on first use. A caller that finds another thread seeding it waits for the seed (a
    /// few loads and stores): checking the window meanwhile would admit past the ring's count.
    #[inline]
    pub(crate) fn ready(&self, window: &SlidingWindow, now: u64) -> bool {
        match self.state.load(Ordering::Acquire) {
            READY => true,
            UNSEEDED => self.seed(window, now),
            SEEDING => self.wait_for_seed(),
            _ => false,
        }
    }

    #[cold]
    fn wait_for_seed(&self) -> bool {
        let mut spins = 0;
        loop {
            match self.state.load(Ordering::Acquire) {
                READY => return true,
                SEEDING => crate::sync::spin_wait(&mut spins),
                _ => return false,
            }
        }
    }

    /// Whether the ring has been seeded and counts.
    #[inline]
    pub(crate) fn is_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == READY
    }

    #[cold]
    fn seed(&self, window: &SlidingWindow, now: u64) -> bool {
        let buckets = window.config().buckets() as u64;
        let next = if buckets as usize > SLOTS / 2 {
            UNUSABLE
        } else {
            SEEDING
        };
        let won = self
            .state
            .compare_exchange(UNSEEDED, next, Ordering::Acquire, Ordering::Relaxed);
        if won.is_err() {
            return self.wait_for_seed();
        }
        if next == UNUSABLE {
            return false;
        }
        let current = now / window.bucket_nanos();
        let first = current.saturating_sub(buckets - 1);
        for id in first..=current + buckets {
            let passes = window.bucket_value(id, Event::Pass).min(0xFFFF_FFFF);
            self.slot(id).store(tag(id) | passes, Ordering::Relaxed);
        }
        self.state.store(READY, Ordering::Release);
        true
    }

    #[inline]
    fn slot(&self, id: u64) -> &AtomicU64 {
        &self.slots[(id % SLOTS as u64) as usize]
    }

    /// The QPS reject check of a rule that counts its admissions here, on `node`'s second
    /// window: by compare-and-swap on this ring when it can count for the window, else (a window
    /// with more buckets than a ring covers) Sentinel's read of the window, which counts nothing
    /// here (`Admitted::default()`). `Err` carries the truncated pass QPS that refused. The one
    /// place both the gate's short path and the rule set check such a rule.
    #[inline(always)]
    pub(crate) fn admit_on(
        &self,
        node: &ResourceNode,
        now: u64,
        acquire: u32,
        count: f64,
        whole_count: u64,
    ) -> Result<Admitted, i64> {
        let window = node.second_window();
        if self.ready(window, now) {
            self.admit(window, window.current_id(now), acquire, count, whole_count)
        } else {
            QpsReject::new(count)
                .check_current(node, now, acquire)
                .map(|()| Admitted::default())
        }
    }

    /// Admits `acquire` in bucket `current` if the window's admissions (per second, truncated as
    /// Java's `(int)` does) plus `acquire` stay within `count`; otherwise returns that truncated
    /// pass QPS and writes nothing. `whole_count` is [`whole_count`]`(count)`.
    #[inline(always)]
    pub(crate) fn admit(
        &self,
        window: &SlidingWindow,
        current: u64,
        acquire: u32,
        count: f64,
        whole_count: u64,
    ) -> Result<Admitted, i64> {
        let buckets = window.config().buckets() as u64;
        let interval_secs = window.interval_secs();
        let mut others = 0u64;
        for id in current.saturating_sub(buckets - 1)..current {
            others += count_in(self.slot(id).load(Ordering::Acquire), id);
        }
        let slot = self.slot(current);
        let mut word = slot.load(Ordering::Acquire);
        loop {
            let mine = count_in(word, current);
            // Java: (int) passQps + acquire > count, where passQps = pass / intervalSec. For a
            // one-second window that is whole numbers throughout: compared as integers.
            if interval_secs == 1.0 {
                let pass = others + mine;
                if pass.saturating_add(u64::from(acquire)) > whole_count {
                    return Err(i64::try_from(pass).unwrap_or(i64::MAX));
                }
            } else {
                let pass_qps = ((others + mine) as f64 / interval_secs) as i64;
                if (pass_qps + i64::from(acquire)) as f64 > count {
                    return Err(pass_qps);
                }
            }
            let new = tag(current) | (mine + u64::from(acquire)).min(0xFFFF_FFFF);
            match slot.compare_exchange_weak(word, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    return Ok(Admitted {
                        tag: (tag(current) >> 32) as u32,
                        count: acquire,
                    })
                }
                Err(seen) => word = seen,
            }
        }
    }

    /// The admissions the ring counts in the window ending in the current bucket at `now`
    /// (what [`admit`](Self::admit) compares with the count, per second), or `None` while it
    /// is not seeded (the check reads the window then).
    pub(crate) fn passed(&self, window: &SlidingWindow, now: u64) -> Option<u64> {
        if !self.is_ready() {
            return None;
        }
        let buckets = window.config().buckets() as u64;
        let current = window.current_id(now);
        let passes: u64 = (current.saturating_sub(buckets - 1)..=current)
            .map(|id| count_in(self.slot(id).load(Ordering::Acquire), id))
            .sum();
        Some((passes as f64 / window.interval_secs()) as u64)
    }

    /// Counts `count` passes borrowed into bucket `id` (ahead of the current one) by a
    /// prioritized entry.
    pub(crate) fn add(&self, id: u64, count: u32) {
        let slot = self.slot(id);
        let mut word = slot.load(Ordering::Acquire);
        loop {
            let new = tag(id) | (count_in(word, id) + u64::from(count)).min(0xFFFF_FFFF);
            match slot.compare_exchange_weak(word, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(seen) => word = seen,
            }
        }
    }

    /// Gives back an admission that a later rule refused, if its bucket is still in the slot.
    pub(crate) fn give_back(&self, admitted: Admitted) {
        let tag = u64::from(admitted.tag) << 32;
        // The slot of the bucket (ids are the tag minus one, modulo the slot count).
        let slot = self.slot(u64::from(admitted.tag).wrapping_sub(1));
        let mut word = slot.load(Ordering::Acquire);
        loop {
            let held = word & 0xFFFF_FFFF;
            if word & !0xFFFF_FFFF != tag || held == 0 {
                return;
            }
            let new = tag | held.saturating_sub(u64::from(admitted.count));
            match slot.compare_exchange_weak(word, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(seen) => word = seen,
            }
        }
    }
}

/// Most QPS reject rules of one resource that count their own admissions (see the module docs);
/// further rules read the window.
pub(crate) const RINGS: usize = 4;

/// The admission rings of one resource, each on cache lines of its own (passes write them, and
/// they must not slow the reads of what sits next to them). A rule keeps its ring for as long
/// as a reload keeps the rule unchanged.
#[derive(Debug, Default)]
pub(crate) struct AdmissionRings {
    rings: [crossbeam_utils::CachePadded<AdmissionRing>; RINGS],
}

impl AdmissionRings {
    /// Ring `index` (below [`RINGS`]).
    #[inline]
    pub(crate) fn get(&self, index: u8) -> &AdmissionRing {
        &self.rings[usize::from(index) % RINGS]
    }
}
