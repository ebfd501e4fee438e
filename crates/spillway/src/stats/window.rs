use super::event::{Event, MIN_RT_SLOT, SLOTS};
use super::tagged::{self, HALF_TAG_SPACE, VALUE_MAX};
use super::window_config::WindowConfig;
use crate::sync::{spin_wait, thread_index, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::fmt;

/// Set in a bucket's start word while the bucket is being reset after a very long idle time.
const ROLLING: u64 = 1 << 63;

/// One bucket's counters for one stripe: seven words in one cache line.
#[repr(align(64))]
struct Cells {
    words: [AtomicU64; SLOTS],
}

impl Cells {
    fn new() -> Self {
        Self {
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// Sentinel's `LeapArray`: a ring of buckets over an interval, rolled over lock-free.
///
/// Time is cut into buckets of `interval / buckets`; bucket `id` covers
/// `[id * length, (id + 1) * length)` nanoseconds on the window's clock, and lives in ring slot
/// `id % buckets`. A read at time `t` covers the bucket holding `t` and the `buckets - 1` before
/// it; a bucket is *stale* when `t - start > interval` (Sentinel's strict test), and since Sentinel
/// rolls the current bucket before reading, a read here gives exactly what Sentinel's
/// `ArrayMetric` gives for the same timed adds (with Sentinel's 2 x 500 ms shape, and any other).
///
/// Each bucket holds pass, block, success, error, RT sum (µs), occupied pass and min RT (µs), and
/// is striped: a thread writes its own copy of the bucket (one cache line), reads sum the copies.
///
/// # Roll-over without lost or misfiled counts
///
/// Sentinel resets a recycled bucket under a lock, and an add that slips between its reset of the
/// start time and its zeroing of the counters is lost. Here every counter word carries the id of
/// the window it counts (see the `tagged` module): an add resets a word from an older window in
/// the same compare-and-swap that adds, so there is no separate zeroing for an add to race with.
/// An add whose window was already recycled (its thread read the clock, then stalled for a whole
/// interval) is refused rather than filed under the newer window, and counted by
/// [`late_events`](Self::late_events).
///
/// # Examples
///
/// ```
/// use spillway::stats::{Event, SlidingWindow, WindowConfig};
///
/// let window = SlidingWindow::new(WindowConfig::sentinel_second());
/// let t0 = 1_700_000_000_000 * 1_000_000; // nanoseconds
/// window.add(t0, Event::Pass, 3);
/// window.add(t0 + 600_000_000, Event::Pass, 2); // the next 500 ms bucket
/// assert_eq!(window.sum(t0 + 600_000_000, Event::Pass), 5);
/// assert_eq!(window.sum(t0 + 1_000_000_000, Event::Pass), 2); // the first bucket left the window
/// ```
///
/// # Memory ordering
///
/// Counter words are updated and read with `Relaxed` operations: each word is self-contained
/// (tag and value in one atomic) and every update is a read-modify-write on the latest value. A
/// bucket's start word is the only synchronising atomic: it is stored with `Release` after a full
/// reset and loaded with `Acquire`, so whoever sees the reset finished also sees the reset words.
pub struct SlidingWindow {
    config: WindowConfig,
    bucket_nanos: u64,
    buckets: u64,
    interval_secs: f64,
    stripe_mask: usize,
    max_rt_micros: u64,
    /// The newest bucket id seen: a hint that saves a division on most calls.
    cursor: CachePadded<AtomicU64>,
    /// Per ring slot: `id + 1` of the bucket it holds (0 when never used), `ROLLING` while reset.
    starts: Box<[AtomicU64]>,
    /// `stripes * buckets` cells; stripe `s` owns `cells[s * buckets..(s + 1) * buckets]`.
    cells: Box<[Cells]>,
    late: AtomicU64,
}

/// Every count of a window at one time, read in one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WindowSnapshot {
    /// Entries admitted.
    pub pass: u64,
    /// Entries refused.
    pub block: u64,
    /// Entries completed (with or without error).
    pub success: u64,
    /// Completed entries marked as errors.
    pub error: u64,
    /// Sum of response times, microseconds.
    pub rt_micros: u64,
    /// Entries admitted on a future window's quota.
    pub occupied_pass: u64,
    /// Smallest response time, microseconds (the max RT when nothing completed; at least 1).
    pub min_rt_micros: u64,
}

impl SlidingWindow {
    /// An empty window of the given shape.
    pub fn new(config: WindowConfig) -> Self {
        let buckets = config.buckets();
        let stripes = config.stripes();
        let bucket_nanos = config.bucket_length().as_nanos() as u64;
        Self {
            config,
            bucket_nanos,
            buckets: buckets as u64,
            interval_secs: config.interval().as_secs_f64(),
            stripe_mask: stripes - 1,
            max_rt_micros: (config.max_rt().as_micros() as u64).clamp(1, VALUE_MAX),
            cursor: CachePadded::new(AtomicU64::new(0)),
            starts: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            cells: (0..buckets * stripes).map(|_| Cells::new()).collect(),
            late: AtomicU64::new(0),
        }
    }

    /// The window's shape.
    pub fn config(&self) -> &WindowConfig {
        &self.config
    }

    /// The interval in seconds, the divisor of every per-second rate.
    pub fn interval_secs(&self) -> f64 {
        self.interval_secs
    }

    /// The max RT in microseconds (cap of recorded RTs, min RT of an empty window).
    pub fn max_rt_micros(&self) -> u64 {
        self.max_rt_micros
    }

    /// Events refused because their bucket had already been recycled for a later time.
    pub fn late_events(&self) -> u64 {
        self.late.load(Ordering::Relaxed)
    }

    // === recording ===

    /// Adds `n` to `event` in the bucket holding `now_nanos`.
    #[inline]
    pub fn add(&self, now_nanos: u64, event: Event, n: u64) {
        let id = self.advance(now_nanos);
        if let Some(cells) = self.claim(id) {
            if !tagged::add(&cells.words[event.slot()], id, n) {
                self.late.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records `count` completions with response time `rt_micros` (capped at the max RT), as
    /// Sentinel's `addRtAndSuccess`: success += count, RT sum += rt (once), min RT = min(rt).
    /// `errors` of them are also counted as errors.
    #[inline]
    pub fn add_completion(&self, now_nanos: u64, rt_micros: u64, count: u64, errors: u64) {
        let id = self.advance(now_nanos);
        let Some(cells) = self.claim(id) else { return };
        let rt = rt_micros.min(self.max_rt_micros);
        let words = &cells.words;
        let mut filed = tagged::add(&words[Event::Success.slot()], id, count);
        filed &= tagged::add(&words[Event::Rt.slot()], id, rt);
        filed &= tagged::min(&words[MIN_RT_SLOT], id, rt);
        if errors > 0 {
            filed &= tagged::add(&words[Event::Error.slot()], id, errors);
        }
        if !filed {
            self.late.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The bucket id of `now`, moving the cursor hint forward if `now` is past it.
    #[inline]
    fn advance(&self, now: u64) -> u64 {
        let hint = self.cursor.load(Ordering::Relaxed);
        if now.wrapping_sub(hint * self.bucket_nanos) < self.bucket_nanos {
            return hint;
        }
        let id = now / self.bucket_nanos;
        if id > hint {
            // Relaxed: the cursor is a hint; a stale value only costs a division.
            self.cursor.fetch_max(id, Ordering::Relaxed);
        }
        id
    }

    /// The bucket id of `now`, without writing.
    #[inline]
    fn id_at(&self, now: u64) -> u64 {
        let hint = self.cursor.load(Ordering::Relaxed);
        if now.wrapping_sub(hint * self.bucket_nanos) < self.bucket_nanos {
            hint
        } else {
            now / self.bucket_nanos
        }
    }

    #[inline]
    fn slot(&self, id: u64) -> usize {
        (id % self.buckets) as usize
    }

    /// Makes ring slot `id % buckets` hold bucket `id` and returns this thread's cells in it, or
    /// `None` (counting a late event) if the slot already holds a later bucket.
    #[inline]
    fn claim(&self, id: u64) -> Option<&Cells> {
        let slot = self.slot(id);
        let start = &self.starts[slot];
        let want = id + 1;
        let mut seen = start.load(Ordering::Acquire);
        let mut spins = 0;
        while seen != want {
            if seen & ROLLING != 0 {
                if seen & !ROLLING > want {
                    return self.refuse_late();
                }
                // Another thread is resetting this slot after a long idle time: a few stores.
                spin_wait(&mut spins);
                seen = start.load(Ordering::Acquire);
                continue;
            }
            if seen > want {
                return self.refuse_late();
            }
            // The slot holds an older bucket (or none). Words tagged with an older window reset
            // themselves on their next update, so moving the start is all a roll needs, unless the
            // slot sat idle so long that the 24-bit tags may have wrapped: then reset every word
            // while adders wait on the ROLLING flag.
            let full_reset = seen == 0 || want - seen >= HALF_TAG_SPACE;
            let claim = if full_reset { want | ROLLING } else { want };
            match start.compare_exchange(seen, claim, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) if full_reset => {
                    self.reset_slot(slot, id);
                    start.store(want, Ordering::Release);
                    break;
                }
                Ok(_) => break,
                Err(actual) => seen = actual,
            }
        }
        let stripe = thread_index() & self.stripe_mask;
        Some(&self.cells[stripe * self.buckets as usize + slot])
    }

    #[cold]
    fn refuse_late(&self) -> Option<&Cells> {
        self.late.fetch_add(1, Ordering::Relaxed);
        None
    }

    #[cold]
    fn reset_slot(&self, slot: usize, id: u64) {
        for cells in self.stripes_of(slot) {
            for (i, word) in cells.words.iter().enumerate() {
                let fresh = if i == MIN_RT_SLOT { VALUE_MAX } else { 0 };
                // Relaxed: published by the Release store of the slot's start.
                word.store(tagged::pack(id, fresh), Ordering::Relaxed);
            }
        }
    }

    fn stripes_of(&self, slot: usize) -> impl Iterator<Item = &Cells> {
        let buckets = self.buckets as usize;
        self.cells[slot..].iter().step_by(buckets)
    }

    // === reading ===

    /// The cells of bucket `id`, if its slot holds it.
    #[inline]
    fn bucket(&self, id: u64) -> Option<impl Iterator<Item = &Cells>> {
        let slot = self.slot(id);
        (self.starts[slot].load(Ordering::Acquire) == id + 1).then(|| self.stripes_of(slot))
    }

    #[inline]
    fn bucket_sum(&self, id: u64, slot: usize) -> u64 {
        self.bucket(id).map_or(0, |stripes| {
            stripes
                .filter_map(|c| tagged::value_for(c.words[slot].load(Ordering::Relaxed), id))
                .sum()
        })
    }

    /// Ids of the buckets a read at `now` covers, newest first.
    #[inline]
    fn live_ids(&self, now: u64) -> impl Iterator<Item = u64> {
        let current = self.id_at(now);
        (0..self.buckets.min(current + 1)).map(move |back| current - back)
    }

    /// Sum of `event` over the window at `now_nanos`.
    #[inline]
    pub fn sum(&self, now_nanos: u64, event: Event) -> u64 {
        self.live_ids(now_nanos)
            .map(|id| self.bucket_sum(id, event.slot()))
            .sum()
    }

    /// `event` per second over the window: `sum / interval_secs`, as Sentinel's node reads.
    pub fn rate(&self, now_nanos: u64, event: Event) -> f64 {
        self.sum(now_nanos, event) as f64 / self.interval_secs
    }

    /// `event` in the bucket before the current one (0 if that bucket is not held), as
    /// Sentinel's `previousWindowPass` / `previousWindowBlock`.
    pub fn previous(&self, now_nanos: u64, event: Event) -> u64 {
        match self.id_at(now_nanos).checked_sub(1) {
            Some(id) if self.buckets > 1 => self.bucket_sum(id, event.slot()),
            _ => 0,
        }
    }

    /// Largest per-bucket sum of `event` in the window, at least 1: Sentinel's `maxSuccess`.
    pub fn max_bucket(&self, now_nanos: u64, event: Event) -> u64 {
        self.live_ids(now_nanos)
            .map(|id| self.bucket_sum(id, event.slot()))
            .max()
            .unwrap_or(0)
            .max(1)
    }

    /// Smallest RT in the window in microseconds: the max RT when nothing completed, and at least
    /// 1 µs (Sentinel floors at 1 ms, its unit; ours is the microsecond).
    pub fn min_rt_micros(&self, now_nanos: u64) -> u64 {
        let mut min = self.max_rt_micros;
        for id in self.live_ids(now_nanos) {
            if let Some(stripes) = self.bucket(id) {
                for cells in stripes {
                    let word = cells.words[MIN_RT_SLOT].load(Ordering::Relaxed);
                    if let Some(rt) = tagged::value_for(word, id) {
                        min = min.min(rt);
                    }
                }
            }
        }
        min.max(1)
    }

    /// All counts of the window at `now_nanos`, in one pass over the buckets.
    pub fn snapshot(&self, now_nanos: u64) -> WindowSnapshot {
        self.snapshot_of(self.live_ids(now_nanos))
    }

    /// All counts of the bucket before the current one (a complete bucket: with one-second
    /// buckets, the previous second, as Sentinel's per-second metric log reads it).
    pub fn previous_snapshot(&self, now_nanos: u64) -> WindowSnapshot {
        let previous = self
            .id_at(now_nanos)
            .checked_sub(1)
            .filter(|_| self.buckets > 1);
        self.snapshot_of(previous.into_iter())
    }

    fn snapshot_of(&self, ids: impl Iterator<Item = u64>) -> WindowSnapshot {
        let mut sums = [0u64; SLOTS];
        let mut min = self.max_rt_micros;
        for id in ids {
            let Some(stripes) = self.bucket(id) else {
                continue;
            };
            for cells in stripes {
                for (slot, word) in cells.words.iter().enumerate() {
                    if let Some(v) = tagged::value_for(word.load(Ordering::Relaxed), id) {
                        if slot == MIN_RT_SLOT {
                            min = min.min(v);
                        } else {
                            sums[slot] += v;
                        }
                    }
                }
            }
        }
        WindowSnapshot {
            pass: sums[Event::Pass.slot()],
            block: sums[Event::Block.slot()],
            success: sums[Event::Success.slot()],
            error: sums[Event::Error.slot()],
            rt_micros: sums[Event::Rt.slot()],
            occupied_pass: sums[Event::OccupiedPass.slot()],
            min_rt_micros: min.max(1),
        }
    }
}

impl fmt::Debug for SlidingWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingWindow")
            .field("config", &self.config)
            .field("late_events", &self.late_events())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests;
