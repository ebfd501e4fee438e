use super::accumulator::{Accumulators, Feed, Line};
use super::event::{Event, MIN_RT_SLOT, SLOTS};
use super::ring::Ring;
use super::short_line::ShortLine;
use super::tagged::{self, VALUE_MAX};
use super::window_config::{WindowConfig, MAX_STRIPES};
use crate::sync::{thread_slot, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::sync::atomic::AtomicBool;

/// Sentinel's `LeapArray`: a ring of buckets over an interval, rolled over lock-free.
///
/// Time is cut into buckets of `interval / buckets`; bucket `id` covers
/// `[id * length, (id + 1) * length)` nanoseconds on the window's clock, and lives in ring slot
/// `id % buckets`. A read at time `t` covers the bucket holding `t` and the `buckets - 1` before
/// it; a bucket is *stale* when `t - start > interval` (Sentinel's strict test), and since Sentinel
/// rolls the current bucket before reading, a read here gives exactly what Sentinel's
/// `ArrayMetric` gives for the same timed adds (with Sentinel's 2 x 500 ms shape, and any other).
///
/// Each bucket holds pass, block, success, error, RT sum (µs), occupied pass and min RT (µs).
///
/// # How writes stay cheap
///
/// The first [`stripes`](WindowConfig::stripes) threads to use spillway (more exactly: threads
/// whose exclusive thread slot is below that count) each own an *accumulator*: a cache line
/// holding their share of the current bucket. Only its owner writes it, with a plain load and
/// store, no locked instruction and no cache line shared with another writer. When the owner's
/// clock moves to a new bucket, it hands the finished bucket over to the shared ring (a few
/// compare-and-swaps, once per bucket). Other threads, and adds whose clock read went backwards,
/// write the shared ring directly with compare-and-swap.
///
/// # A node's minute window takes no writes
///
/// A [`ResourceNode`](super::ResourceNode)'s minute window is *fed* by its second window when the
/// minute buckets are whole multiples of the second ones (Sentinel's 500 ms and 1 s are): an
/// entry writes only the second window, each accumulator hands its finished bucket to both
/// rings when its owner moves on, and the minute window's reads count the accumulators still
/// holding one of its buckets, inside the same consistency check. Its reads are exactly what an
/// independently written minute window would give. (Borrowed passes are the exception, written
/// to the minute window directly, as Sentinel's `addOccupiedPass` writes them.)
///
/// # Roll-over without lost or misfiled counts
///
/// Sentinel resets a recycled bucket under a lock, and an add that slips between its reset of the
/// start time and its zeroing of the counters is lost. Here every ring word carries the id of the
/// window it counts (see the `tagged` module): an add resets a word from an older window in the
/// same compare-and-swap that adds, so there is no separate zeroing for an add to race with. An
/// add whose bucket was already recycled (its thread read the clock, then stalled for a whole
/// interval) is refused rather than filed under a newer window, and counted by
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
/// Counter words are written and read `Relaxed`: a ring word is self-contained (tag and value in
/// one atomic, updated by compare-and-swap on its latest value) and an accumulator word has a
/// single writer. Two places synchronise. A ring slot's start word is stored `Release` after a full
/// reset and loaded `Acquire`, so whoever sees the reset finished sees the reset words. An
/// accumulator's state word is a seqlock: its owner marks it busy, issues a `Release` fence, hands
/// the bucket to the ring and zeroes the line, then stores the new bucket with `Release`; a reader
/// loads every state with `Acquire`, reads, issues an `Acquire` fence and re-reads the states,
/// retrying if any changed (states only grow, so comparing their sums is enough). A reader therefore never counts a bucket twice (in a line and in the
/// ring it was handed to) nor misses it.
pub struct SlidingWindow {
    config: WindowConfig,
    bucket_nanos: u64,
    buckets: u64,
    interval_secs: f64,
    max_rt_micros: u64,
    /// The newest bucket id seen: a hint that saves a division on most calls.
    cursor: CachePadded<AtomicU64>,
    ring: Ring,
    accumulators: Accumulators,
    /// Passes borrowed for future buckets by prioritized entries (Sentinel's occupy
    /// mechanism), tagged by bucket id; `2 * buckets` slots so that a live bucket and a future
    /// one never share a slot.
    borrowed: Box<[AtomicU64]>,
    /// Whether anything was ever borrowed: spares reads the borrowed words when nothing was.
    any_borrowed: AtomicBool,
    late: AtomicU64,
    /// In-flight changes from threads without a line of their own (see
    /// [`add_in_flight`](Self::add_in_flight)).
    in_flight_shared: CachePadded<AtomicU64>,
    /// The coarser window this one's finished buckets also go to (the node's minute window).
    feed: Option<Feed>,
    /// The finer window whose lines this one reads as its own, and the ratio of the bucket
    /// lengths: see [`Feed`].
    fed_by: Option<(Accumulators, u64)>,
}

impl SlidingWindow {
    /// An empty window of the given shape.
    pub fn new(config: WindowConfig) -> Self {
        let buckets = config.buckets();
        Self {
            config,
            bucket_nanos: config.bucket_length().as_nanos() as u64,
            buckets: buckets as u64,
            interval_secs: config.interval().as_secs_f64(),
            max_rt_micros: (config.max_rt().as_micros() as u64).clamp(1, VALUE_MAX),
            cursor: CachePadded::new(AtomicU64::new(0)),
            ring: Ring::new(buckets),
            accumulators: Accumulators::new(config.stripes().min(MAX_STRIPES)),
            borrowed: (0..2 * buckets).map(|_| AtomicU64::new(0)).collect(),
            any_borrowed: AtomicBool::new(false),
            late: AtomicU64::new(0),
            in_flight_shared: CachePadded::new(AtomicU64::new(0)),
            feed: None,
            fed_by: None,
        }
    }

    /// A fine window and a coarse one it feeds (a node's second and minute windows), if the
    /// coarse window's buckets are whole multiples of the fine one's; two independent windows
    /// otherwise. Fed, the coarse window has no lines of its own and takes no writes on the hot
    /// path: the fine window's lines hand it each finished bucket, and its reads count the
    /// fine lines still holding one of its buckets, so they are exactly what two independently
    /// written windows would read. See [`Feed`].
    pub(crate) fn linked(fine: WindowConfig, coarse: WindowConfig) -> (Self, Self) {
        let mut fine = Self::new(fine);
        let fine_nanos = fine.bucket_nanos;
        let coarse_nanos = coarse.bucket_length().as_nanos() as u64;
        if fine_nanos == 0 || coarse_nanos % fine_nanos != 0 {
            return (fine, Self::new(coarse));
        }
        let ratio = coarse_nanos / fine_nanos;
        let mut coarse = Self::new(coarse.with_stripes(0));
        coarse.fed_by = Some((fine.accumulators.clone(), ratio));
        fine.feed = Some(Feed {
            ring: coarse.ring.clone(),
            ratio,
        });
        (fine, coarse)
    }

    /// Whether this window is fed by another's lines (and needs no writes of its own).
    pub(crate) fn is_fed(&self) -> bool {
        self.fed_by.is_some()
    }

    /// The lines a read checks, each with the ratio that turns its bucket ids into this
    /// window's: this window's own (marked 0: the same ids), then those of the window feeding it.
    #[inline]
    fn lines(&self) -> impl Iterator<Item = (&Line, u64)> {
        let own = self.accumulators.lines().map(|line| (line, 0));
        let fed = self
            .fed_by
            .iter()
            .flat_map(|(lines, ratio)| lines.lines().map(move |line| (line, *ratio)));
        own.chain(fed)
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
        self.add_from(thread_slot(), now_nanos, event, n);
    }

    /// [`add`](Self::add) from a thread whose slot the caller already read.
    ///
    /// Inline: the common case (the thread's line already holds the current bucket) is a few
    /// loads and one store; everything else is in an outlined, cold function.
    #[inline(always)]
    pub(crate) fn add_from(&self, slot: usize, now_nanos: u64, event: Event, n: u64) {
        self.add_moving(slot, now_nanos, event, n, 0);
    }

    /// [`add_from`](Self::add_from), also adding `in_flight` (wrapping; 0 for none) to the
    /// entries in flight on the same line.
    #[inline(always)]
    fn add_moving(&self, slot: usize, now_nanos: u64, event: Event, n: u64, in_flight: u64) {
        let id = self.advance(now_nanos);
        match self.accumulators.owned(slot) {
            Some(line) => {
                if in_flight != 0 {
                    line.add_in_flight(in_flight);
                }
                if line.holds(id) {
                    line.bump(event.slot(), n);
                    return;
                }
            }
            None => self.add_in_flight_shared(in_flight),
        }
        self.add_slow(slot, id, event, n);
    }

    /// [`add_from`](Self::add_from) when the thread's line does not hold bucket `id` yet.
    #[cold]
    #[inline(never)]
    fn add_slow(&self, slot: usize, id: u64, event: Event, n: u64) {
        if let Some(line) = self.accumulators.owned(slot) {
            if line.enter(id, &self.ring, self.feed.as_ref()) {
                line.bump(event.slot(), n);
                return;
            }
        }
        if !self.ring.add(id, event.slot(), n) {
            self.count_late();
        }
        if let Some(feed) = &self.feed {
            feed.add(id, event, n);
        }
    }

    /// Records `count` completions with response time `rt_micros` (capped at the max RT), as
    /// Sentinel's `addRtAndSuccess`: success += count, RT sum += rt (once), min RT = min(rt).
    /// `errors` of them are also counted as errors.
    #[inline]
    pub fn add_completion(&self, now_nanos: u64, rt_micros: u64, count: u64, errors: u64) {
        self.add_completion_from(thread_slot(), now_nanos, rt_micros, count, errors);
    }

    /// [`add_completion`](Self::add_completion) from a thread whose slot the caller already read.
    ///
    /// Inline in its common case, as [`add_from`](Self::add_from).
    #[inline(always)]
    pub(crate) fn add_completion_from(
        &self,
        slot: usize,
        now_nanos: u64,
        rt_micros: u64,
        count: u64,
        errors: u64,
    ) {
        self.add_completion_moving(slot, now_nanos, rt_micros, count, errors, 0);
    }

    /// [`add_completion_from`](Self::add_completion_from), also adding `in_flight` (wrapping; 0
    /// for none) to the entries in flight on the same line.
    #[inline(always)]
    pub(crate) fn add_completion_moving(
        &self,
        slot: usize,
        now_nanos: u64,
        rt_micros: u64,
        count: u64,
        errors: u64,
        in_flight: u64,
    ) {
        let id = self.advance(now_nanos);
        let rt = rt_micros.min(self.max_rt_micros);
        match self.accumulators.owned(slot) {
            Some(line) => {
                if in_flight != 0 {
                    line.add_in_flight(in_flight);
                }
                if line.holds(id) {
                    line.add_completion(rt, count, errors);
                    return;
                }
            }
            None => self.add_in_flight_shared(in_flight),
        }
        self.add_completion_slow(slot, id, rt, count, errors);
    }

    /// Slot `slot`'s line, if the cursor hints `now`'s bucket and the line holds it: where the
    /// short paths below write, with no slow step and no call.
    #[inline(always)]
    fn current_line(&self, slot: usize, now_nanos: u64) -> Option<&Line> {
        let hint = self.cursor.load(Ordering::Relaxed);
        if now_nanos.wrapping_sub(hint * self.bucket_nanos) >= self.bucket_nanos {
            return None;
        }
        self.accumulators
            .owned(slot)
            .filter(|line| line.holds(hint))
    }

    /// Slot `slot`'s line, if it holds `now`'s bucket and finding it takes no slow step (see
    /// `current_line`): for the entry path's short exits and refusals.
    #[inline(always)]
    pub(crate) fn short_line(&self, slot: usize, now_nanos: u64) -> Option<ShortLine<'_>> {
        self.current_line(slot, now_nanos)
            .map(|line| ShortLine::new(line, self.max_rt_micros))
    }

    /// [`add_completion_from`](Self::add_completion_from) when the thread's line does not hold
    /// bucket `id` yet; `rt` is already capped.
    #[cold]
    #[inline(never)]
    fn add_completion_slow(&self, slot: usize, id: u64, rt: u64, count: u64, errors: u64) {
        if let Some(line) = self.accumulators.owned(slot) {
            if line.enter(id, &self.ring, self.feed.as_ref()) {
                line.add_completion(rt, count, errors);
                return;
            }
        }
        let mut values = [0u64; SLOTS];
        values[Event::Success.slot()] = count;
        values[Event::Rt.slot()] = rt;
        values[Event::Error.slot()] = errors;
        values[MIN_RT_SLOT] = rt;
        if !self.ring.merge(id, &values) {
            self.count_late();
        }
        if let Some(feed) = &self.feed {
            feed.merge(id, values);
        }
    }

    /// Records `n` passes borrowed by prioritized entries for the bucket holding `at_nanos` (a
    /// future bucket, at most one interval ahead): they count as that bucket's passes once it is
    /// live (Sentinel's `addWaitingRequest`).
    pub fn add_borrowed(&self, at_nanos: u64, n: u64) {
        let id = at_nanos / self.bucket_nanos;
        // Release: a reader that sees the flag set also sees words written before it was set;
        // a word written after is seen like any other relaxed count.
        self.any_borrowed.store(true, Ordering::Release);
        let word = &self.borrowed[(id % (2 * self.buckets)) as usize];
        if !tagged::add_or_claim_empty(word, id, n) {
            self.count_late();
        }
    }

    /// Passes borrowed for buckets after the current one (Sentinel's `waiting`).
    pub fn waiting(&self, now_nanos: u64) -> u64 {
        let current = self.id_at(now_nanos);
        self.borrowed_sum(current + 1, current + self.buckets)
    }

    /// The bucket length in nanoseconds.
    pub fn bucket_nanos(&self) -> u64 {
        self.bucket_nanos
    }

    #[inline]
    fn borrowed_sum(&self, oldest: u64, newest: u64) -> u64 {
        if !self.any_borrowed.load(Ordering::Acquire) {
            return 0;
        }
        let slots = 2 * self.buckets;
        (oldest..=newest)
            .filter_map(|id| {
                let word = self.borrowed[(id % slots) as usize].load(Ordering::Relaxed);
                tagged::value_for(word, id)
            })
            .fold(0u64, u64::saturating_add)
    }

    /// An admission from thread slot `slot`: `n` passes, as [`add_from`](Self::add_from), and
    /// one more entry in flight, on the same line.
    #[inline(always)]
    pub(crate) fn add_admission_from(&self, slot: usize, now_nanos: u64, n: u64) {
        self.add_moving(slot, now_nanos, Event::Pass, n, 1);
    }

    /// Adds `delta` (wrapping: `u64::MAX` is minus one) to the entries in flight, on thread slot
    /// `slot`'s line or, for a thread without one, on a shared word.
    #[inline]
    pub(crate) fn add_in_flight(&self, slot: usize, delta: u64) {
        match self.accumulators.owned(slot) {
            Some(line) => line.add_in_flight(delta),
            None => self.add_in_flight_shared(delta),
        }
    }

    /// Adds `delta` (0 for none) to the shared in-flight word, for a thread without a line.
    #[inline(always)]
    fn add_in_flight_shared(&self, delta: u64) {
        if delta != 0 {
            self.in_flight_shared.fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// Entries in flight: the sum over every line and the shared word. An entry that started on
    /// one thread and ended on another counts +1 on one and -1 on the other, so only the sum is
    /// meaningful; a read racing entries sees a value some interleaving of them could produce.
    pub(crate) fn in_flight(&self) -> i64 {
        self.accumulators
            .in_flight_sum()
            .wrapping_add(self.in_flight_shared.load(Ordering::Relaxed)) as i64
    }

    #[cold]
    fn count_late(&self) {
        self.late.fetch_add(1, Ordering::Relaxed);
    }

    /// The bucket id of `now`, moving the cursor hint forward if `now` is past it.
    #[inline(always)]
    fn advance(&self, now: u64) -> u64 {
        let hint = self.cursor.load(Ordering::Relaxed);
        if now.wrapping_sub(hint * self.bucket_nanos) < self.bucket_nanos {
            return hint;
        }
        self.advance_slow(now, hint)
    }

    /// [`advance`](Self::advance) when `now` is outside the hinted bucket.
    #[cold]
    #[inline(never)]
    fn advance_slow(&self, now: u64, hint: u64) -> u64 {
        let id = now / self.bucket_nanos;
        if id > hint {
            // Relaxed: the cursor is a hint; a stale value only costs a division.
            self.cursor.fetch_max(id, Ordering::Relaxed);
        }
        id
    }

    /// The id of the bucket `now` falls in (`now / bucket_nanos`), without writing.
    #[inline]
    pub(crate) fn current_id(&self, now: u64) -> u64 {
        self.id_at(now)
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

    #[cfg(all(test, not(spillway_loom)))]
    fn slot(&self, id: u64) -> usize {
        self.ring.slot(id)
    }
}

impl fmt::Debug for SlidingWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingWindow")
            .field("config", &self.config)
            .field("accumulators", &self.accumulators.len())
            .field("late_events", &self.late_events())
            .finish_non_exhaustive()
    }
}

mod buckets;
mod reads;
#[cfg(all(test, not(spillway_loom)))]
mod tests;

pub use buckets::Bucket;
pub use reads::WindowSnapshot;
