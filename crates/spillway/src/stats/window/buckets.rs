//! A window bucket by bucket, as Sentinel's `LeapArray` shows it: the bucket a time falls in,
//! the one before, a bucket's counts by time, and the list of valid buckets. Views of the real
//! window, read under the same consistency check as its sums.
//!
//! Sentinel keeps one `WindowWrap` per array slot; the slot of time `t` is
//! `(t / length) % buckets`, and a wrap is replaced (reset) only when a later time claims its
//! slot. Here the same slot holds the newest bucket any write claimed for it: the shared ring's
//! bucket, or a newer one a thread's line is still counting. So a bucket that nothing has
//! recycled yet still answers for its own time, however old, exactly as Sentinel's does.

use super::reads::View;
use super::{SlidingWindow, WindowSnapshot};

/// One bucket of a window: where it starts and what it counted (Sentinel's
/// `WindowWrap<MetricBucket>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bucket {
    /// Its start on the window's clock, nanoseconds: a multiple of the bucket length.
    pub start_nanos: u64,
    /// Its counts (borrowed passes included once it holds them, as Sentinel's occupiable
    /// buckets do; the min RT is the window's max RT when nothing completed).
    pub counts: WindowSnapshot,
    /// `true` for a bucket that is not in the window: what
    /// [`current_bucket`](SlidingWindow::current_bucket) returns for a time behind the bucket
    /// its slot holds. It is empty, and an add to it would be lost, as Sentinel's detached
    /// `WindowWrap` is.
    pub detached: bool,
}

impl View<'_> {
    /// The id of the bucket the slot of `id` holds: the ring's, or a newer one a line holds.
    fn slot_holds(&self, id: u64) -> Option<u64> {
        let window = self.window();
        let buckets = window.buckets;
        let slot = id % buckets;
        let lines = window
            .lines()
            .filter_map(|(line, ratio)| {
                crate::stats::accumulator::held_bucket(line.state_relaxed())
                    .map(|held| held / ratio.max(1))
            })
            .filter(|held| held % buckets == slot);
        window.ring.held(id).into_iter().chain(lines).max()
    }

    /// Every count of bucket `id`: a snapshot of the one-bucket range.
    fn counts(&self, id: u64) -> WindowSnapshot {
        self.window().snapshot_of(self, Some((id, id)))
    }

    /// The id of the bucket Sentinel's `getPreviousWindow(now)` returns. `current` is the
    /// bucket a `currentWindow(now)` just before made sure of, as Sentinel's reads of the
    /// previous bucket do first (with one bucket, it shares the slot read here), or none.
    pub(super) fn previous_of(&self, now: u64, current: Option<u64>) -> Option<u64> {
        let window = self.window();
        let length = window.bucket_nanos;
        let before = now.checked_sub(length)?;
        let id = before / length;
        let mut held = self.slot_holds(id);
        if let Some(current) = current.filter(|c| c % window.buckets == id % window.buckets) {
            held = held.max(Some(current));
        }
        let held = held?;
        (!window.deprecated(now, held) && held * length + length >= before).then_some(held)
    }

    fn bucket(&self, id: u64) -> Bucket {
        Bucket {
            start_nanos: id * self.window().bucket_nanos,
            counts: self.counts(id),
            detached: false,
        }
    }
}

impl SlidingWindow {
    /// Whether bucket `id` is deprecated at `now`: Sentinel's strict `now - start > interval`.
    fn deprecated(&self, now_nanos: u64, id: u64) -> bool {
        now_nanos.saturating_sub(id * self.bucket_nanos) > self.buckets * self.bucket_nanos
    }

    /// The bucket `at_nanos` falls in, created (its slot claimed and emptied) if its slot holds
    /// an older bucket or none: Sentinel's `currentWindow(t)`. A time behind the bucket its
    /// slot holds (a clock that went backwards) gets a detached, empty bucket and changes
    /// nothing, as Sentinel's does.
    ///
    /// Sentinel's own reads call `currentWindow()` first, so reading a node there creates the
    /// current bucket; spillway's reads write nothing. Counts are the same either way; only
    /// [`window_value`](Self::window_value) and [`buckets`](Self::buckets) can tell an empty
    /// bucket from an absent one (see `docs/exactness.md`).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::stats::{Event, SlidingWindow, WindowConfig};
    ///
    /// let window = SlidingWindow::new(WindowConfig::sentinel_second()); // 2 x 500 ms
    /// let t = 1_700_000_000_000_000_000; // nanoseconds, on a bucket's edge
    /// assert_eq!(window.window_value(t), None);
    /// let bucket = window.current_bucket(t);
    /// assert_eq!((bucket.start_nanos, bucket.counts.pass, bucket.detached), (t, 0, false));
    /// assert_eq!(window.window_value(t).map(|counts| counts.pass), Some(0));
    ///
    /// window.add(t + 1_000_000_000, Event::Pass, 1); // one second later: the same slot
    /// assert!(window.current_bucket(t).detached); // behind it: detached
    /// ```
    pub fn current_bucket(&self, at_nanos: u64) -> Bucket {
        let id = at_nanos / self.bucket_nanos;
        let behind = self.consistent(|view| view.slot_holds(id).is_some_and(|held| held > id));
        if behind || self.ring.claim(id).is_none() {
            return Bucket {
                start_nanos: id * self.bucket_nanos,
                counts: WindowSnapshot {
                    min_rt_micros: self.max_rt_micros,
                    ..WindowSnapshot::default()
                },
                detached: true,
            };
        }
        self.consistent(|view| view.bucket(id))
    }

    /// The counts of the bucket `at_nanos` falls in, if its slot holds that bucket (it was
    /// written or created, and not recycled since), however old: Sentinel's
    /// `getWindowValue(t)`, with `None` for its `null`. No check against the current time.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::stats::{Event, SlidingWindow, WindowConfig};
    ///
    /// let window = SlidingWindow::new(WindowConfig::sentinel_second());
    /// let t = 1_700_000_000_000_000_000;
    /// window.add(t, Event::Pass, 3);
    /// // An hour later the bucket is long out of the window, but nothing recycled its slot.
    /// let later = t + 3_600_000_000_000;
    /// assert_eq!(window.sum(later, Event::Pass), 0);
    /// assert_eq!(window.window_pass(t), 3);
    /// assert_eq!(window.window_value(t + 500_000_000), None); // never written
    /// ```
    pub fn window_value(&self, at_nanos: u64) -> Option<WindowSnapshot> {
        let id = at_nanos / self.bucket_nanos;
        self.consistent(|view| (view.slot_holds(id) == Some(id)).then(|| view.counts(id)))
    }

    /// The passes of the bucket `at_nanos` falls in, borrowed passes included, or 0 if its
    /// slot does not hold it: Sentinel's `getWindowPass(t)` (see
    /// [`window_value`](Self::window_value)).
    pub fn window_pass(&self, at_nanos: u64) -> u64 {
        self.window_value(at_nanos).map_or(0, |counts| counts.pass)
    }

    /// The bucket before the one `now_nanos` falls in: Sentinel's `getPreviousWindow(t)`. The
    /// slot of `now - length` is read, and its bucket is returned unless it is deprecated at
    /// `now` or ends before `now - length`; with a single bucket that slot is the current
    /// one's, and Sentinel's arithmetic returns the current bucket, as this does. `None` for
    /// a time less than one bucket length (Sentinel's index would be negative).
    pub fn previous_bucket(&self, now_nanos: u64) -> Option<Bucket> {
        self.consistent(|view| {
            view.previous_of(now_nanos, None)
                .map(|held| view.bucket(held))
        })
    }

    /// The window's valid head at `now_nanos`, the oldest bucket a read covers: the bucket in
    /// the slot of `now + length`, unless there is none or it is deprecated at `now` (Sentinel's
    /// `getValidHead(t)`).
    pub fn valid_head(&self, now_nanos: u64) -> Option<Bucket> {
        let id = now_nanos.saturating_add(self.bucket_nanos) / self.bucket_nanos;
        self.consistent(|view| {
            let held = view.slot_holds(id)?;
            (!self.deprecated(now_nanos, held)).then(|| view.bucket(held))
        })
    }

    /// Every bucket not deprecated at `now_nanos` (`now - start <= interval`), in slot order,
    /// with its start and counts: Sentinel's `list(t)`, and with only the counts, its
    /// `values(t)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::stats::{Event, SlidingWindow, WindowConfig};
    ///
    /// let window = SlidingWindow::new(WindowConfig::sentinel_second());
    /// let t = 1_700_000_000_000_000_000;
    /// window.add(t, Event::Pass, 1);
    /// window.add(t + 500_000_000, Event::Pass, 2);
    /// let passes = |now| -> Vec<u64> {
    ///     window.buckets(now).iter().map(|bucket| bucket.counts.pass).collect()
    /// };
    /// assert_eq!(passes(t + 999_999_999), [1, 2]);
    /// // Strict: a bucket exactly one interval old is still listed ...
    /// assert_eq!(passes(t + 1_000_000_000), [1, 2]);
    /// // ... and not one nanosecond later.
    /// assert_eq!(passes(t + 1_000_000_001), [2]);
    /// ```
    pub fn buckets(&self, now_nanos: u64) -> Vec<Bucket> {
        self.consistent(|view| {
            (0..self.buckets)
                .filter_map(|slot| view.slot_holds(slot))
                .filter(|&held| !self.deprecated(now_nanos, held))
                .map(|held| view.bucket(held))
                .collect()
        })
    }
}
