//! Reading a sliding window: sums, rates and snapshots taken while no thread's line changes
//! bucket, so that a count in flight between a line and the shared ring is never read twice or
//! missed.

use super::SlidingWindow;
use crate::stats::accumulator::{held_bucket, is_busy, Line};
use crate::stats::event::{Event, MIN_RT_SLOT};
use crate::sync::{fence, spin_wait, Ordering};

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

impl WindowSnapshot {
    /// RT sum over completions, microseconds; 0 when none completed (Sentinel's `avgRt`).
    pub fn avg_rt_micros(&self) -> f64 {
        if self.success == 0 {
            0.0
        } else {
            self.rt_micros as f64 / self.success as f64
        }
    }
}

/// A read of the window during which no accumulator changed bucket.
pub(super) struct View<'a> {
    window: &'a SlidingWindow,
}

impl View<'_> {
    /// The window read.
    pub(super) fn window(&self) -> &SlidingWindow {
        self.window
    }

    /// The lines and the bucket each holds (busy or unused lines hold none).
    #[inline]
    fn held(&self, slot: usize) -> impl Iterator<Item = (&Line, u64)> {
        self.window
            .lines()
            // Occupied passes are written to the minute window itself (Sentinel's
            // `addOccupiedPass`), never through the window feeding it.
            .filter(move |&(_, ratio)| ratio == 0 || slot != Event::OccupiedPass.slot())
            .filter_map(|(line, ratio)| {
                held_bucket(line.state_relaxed()).map(|id| (line, id / ratio.max(1)))
            })
    }

    /// Sum of word `slot` over buckets `oldest..=newest`.
    #[inline]
    fn sum(&self, (oldest, newest): (u64, u64), slot: usize) -> u64 {
        let ring = &self.window.ring;
        let mut sum =
            (oldest..=newest).fold(0u64, |sum, id| sum.saturating_add(ring.value(id, slot)));
        if slot == Event::Pass.slot() {
            sum = sum.saturating_add(self.window.borrowed_sum(oldest, newest));
        }
        for (line, id) in self.held(slot) {
            if (oldest..=newest).contains(&id) {
                sum = sum.saturating_add(line.value(slot));
            }
        }
        sum
    }

    /// Word `slot` of bucket `id`: the ring's share plus every line holding that bucket.
    #[inline]
    pub(super) fn value(&self, id: u64, slot: usize) -> u64 {
        let mut value = self.window.ring.value(id, slot);
        if slot == Event::Pass.slot() {
            value = value.saturating_add(self.window.borrowed_sum(id, id));
        }
        for (line, _) in self.held(slot).filter(|&(_, held)| held == id) {
            let v = line.value(slot);
            value = if slot == MIN_RT_SLOT {
                value.min(v)
            } else {
                value.saturating_add(v)
            };
        }
        value
    }
}

impl SlidingWindow {
    /// Runs `read` at a time when no accumulator changed bucket from before it to after it.
    ///
    /// A line's state only ever grows (busy is `held << 1 | 1`, the next bucket is a larger
    /// `(id + 1) << 1`), so the sum of all states is unchanged across the read exactly when no
    /// state changed: no array of states is needed.
    #[inline]
    pub(super) fn consistent<T>(&self, read: impl Fn(&View<'_>) -> T) -> T {
        let mut spins = 0;
        loop {
            let (before, busy) = self.lines().fold((0u64, false), |(sum, busy), (line, _)| {
                let state = line.state();
                (sum.wrapping_add(state), busy | is_busy(state))
            });
            if !busy {
                let result = read(&View { window: self });
                fence(Ordering::Acquire);
                let after = self.lines().fold(0u64, |sum, (line, _)| {
                    sum.wrapping_add(line.state_relaxed())
                });
                if after == before {
                    return result;
                }
            }
            // An owner is handing a bucket over to the ring: a few stores.
            spin_wait(&mut spins);
        }
    }

    /// Ids of the buckets a read at `now` covers, newest first.
    #[inline]
    pub(super) fn live_ids(&self, now: u64) -> impl Iterator<Item = u64> + Clone {
        let (oldest, newest) = self.live_range(now);
        (oldest..=newest).rev()
    }

    /// The oldest and newest bucket ids a read at `now` covers.
    #[inline]
    pub(super) fn live_range(&self, now: u64) -> (u64, u64) {
        let newest = self.id_at(now);
        (newest.saturating_sub(self.buckets - 1), newest)
    }

    /// Sum of `event` over the window at `now_nanos`.
    #[inline]
    pub fn sum(&self, now_nanos: u64, event: Event) -> u64 {
        let range = self.live_range(now_nanos);
        self.consistent(|view| view.sum(range, event.slot()))
    }

    /// `event` per second over the window: `sum / interval_secs`, as Sentinel's node reads.
    pub fn rate(&self, now_nanos: u64, event: Event) -> f64 {
        self.sum(now_nanos, event) as f64 / self.interval_secs
    }

    /// `event` in bucket `id` (the bucket of the times `id * bucket_nanos ..`), as a read would
    /// count it: the shared ring's share, the accumulators holding it, and borrowed passes.
    pub(crate) fn bucket_value(&self, id: u64, event: Event) -> u64 {
        self.consistent(|view| view.value(id, event.slot()))
    }

    /// `event` in the previous bucket, as Sentinel's `previousWindowPass` /
    /// `previousWindowBlock` read it: `currentWindow()`, then `getPreviousWindow()` (see
    /// [`previous_bucket`](Self::previous_bucket)); 0 if there is none. With a single bucket,
    /// that is the current bucket, as in Sentinel.
    pub fn previous(&self, now_nanos: u64, event: Event) -> u64 {
        let current = Some(self.id_at(now_nanos));
        self.consistent(|view| {
            view.previous_of(now_nanos, current)
                .map_or(0, |id| view.value(id, event.slot()))
        })
    }

    /// Largest per-bucket sum of `event` in the window, at least 1: Sentinel's `maxSuccess`.
    pub fn max_bucket(&self, now_nanos: u64, event: Event) -> u64 {
        let ids = self.live_ids(now_nanos);
        self.consistent(|view| {
            ids.clone()
                .map(|id| view.value(id, event.slot()))
                .max()
                .unwrap_or(0)
        })
        .max(1)
    }

    /// Smallest RT in the window in microseconds: the max RT when nothing completed, and at least
    /// 1 µs (Sentinel floors at 1 ms, its unit; ours is the microsecond).
    pub fn min_rt_micros(&self, now_nanos: u64) -> u64 {
        let ids = self.live_ids(now_nanos);
        self.consistent(|view| {
            ids.clone()
                .map(|id| view.value(id, MIN_RT_SLOT))
                .fold(self.max_rt_micros, u64::min)
        })
        .max(1)
    }

    /// Smallest bucket average RT (RT sum / completions) among the newest `buckets` buckets of
    /// the window that have completions, in microseconds (at least 1); `None` if none has. A
    /// robust minimum RT: one fast call cannot drag a bucket's average down to its own RT.
    pub fn min_bucket_avg_rt_micros(&self, now_nanos: u64, buckets: usize) -> Option<u64> {
        let (oldest, newest) = self.live_range(now_nanos);
        let span = (buckets.max(1) as u64).saturating_sub(1);
        let oldest = oldest.max(newest.saturating_sub(span));
        self.consistent(|view| {
            (oldest..=newest)
                .filter_map(|id| {
                    let completions = view.value(id, Event::Success.slot());
                    (completions > 0).then(|| view.value(id, Event::Rt.slot()) / completions)
                })
                .min()
        })
        .map(|rt| rt.max(1))
    }

    /// All counts of the window at `now_nanos`, in one pass over the buckets.
    pub fn snapshot(&self, now_nanos: u64) -> WindowSnapshot {
        let range = self.live_range(now_nanos);
        self.consistent(|view| self.snapshot_of(view, Some(range)))
    }

    /// All counts of the bucket before the current one (a complete bucket: with one-second
    /// buckets, the previous second, as Sentinel's per-second metric log reads it).
    pub fn previous_snapshot(&self, now_nanos: u64) -> WindowSnapshot {
        let current = Some(self.id_at(now_nanos));
        self.consistent(|view| {
            let previous = view.previous_of(now_nanos, current).map(|id| (id, id));
            self.snapshot_of(view, previous)
        })
    }

    /// Every count of the buckets `range` (none: an empty window), read through `view`.
    pub(super) fn snapshot_of(&self, view: &View<'_>, range: Option<(u64, u64)>) -> WindowSnapshot {
        let Some(range) = range else {
            return WindowSnapshot {
                min_rt_micros: self.max_rt_micros,
                ..WindowSnapshot::default()
            };
        };
        let (oldest, newest) = range;
        let min = (oldest..=newest)
            .map(|id| view.value(id, MIN_RT_SLOT))
            .fold(self.max_rt_micros, u64::min);
        WindowSnapshot {
            pass: view.sum(range, Event::Pass.slot()),
            block: view.sum(range, Event::Block.slot()),
            success: view.sum(range, Event::Success.slot()),
            error: view.sum(range, Event::Error.slot()),
            rt_micros: view.sum(range, Event::Rt.slot()),
            occupied_pass: view.sum(range, Event::OccupiedPass.slot()),
            min_rt_micros: min.max(1),
        }
    }
}
