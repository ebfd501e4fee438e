//! Samples an adaptive limiter holds for its algorithm without taking its lock: one ring per
//! thread slot, written by that thread alone and emptied under the limiter's lock.

use super::algorithm::Quiet;
use super::sample::Sample;
use crate::stats::default_stripes;
use crate::sync::{thread_slot, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::time::Duration;

/// Samples a ring holds (a power of two).
#[cfg(not(spillway_loom))]
const RING: u64 = 32;
#[cfg(spillway_loom)]
const RING: u64 = 2;

/// The dropped flag, above the in-flight count's 32 bits.
const DROPPED: u64 = 1 << 32;

/// A call that ended, as the inbox holds it: a [`Sample`] and its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    pub(crate) started_nanos: u64,
    pub(crate) now_nanos: u64,
    pub(crate) in_flight: u32,
    pub(crate) dropped: bool,
}

impl Ended {
    fn rtt_nanos(&self) -> u64 {
        self.now_nanos.saturating_sub(self.started_nanos)
    }

    /// The sample the algorithm is fed.
    pub(crate) fn sample(&self) -> Sample {
        Sample {
            started_nanos: self.started_nanos,
            rtt: Duration::from_nanos(self.rtt_nanos()),
            in_flight: self.in_flight,
            dropped: self.dropped,
        }
    }
}

/// One held call, field by field (each written by the ring's thread before it publishes the
/// slot, read under the lock after).
struct Entry {
    started_nanos: AtomicU64,
    now_nanos: AtomicU64,
    /// The in-flight count, and [`DROPPED`].
    in_flight: AtomicU64,
}

/// A single-producer, single-consumer ring: the thread that holds the slot pushes, the holder
/// of the limiter's lock takes.
struct Ring {
    /// Samples pushed so far (written by the slot's thread only).
    pushed: AtomicU64,
    /// Samples taken so far (written under the limiter's lock only).
    taken: AtomicU64,
    entries: Box<[Entry]>,
}

impl Ring {
    fn new() -> Self {
        Self {
            pushed: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            entries: (0..RING)
                .map(|_| Entry {
                    started_nanos: AtomicU64::new(0),
                    now_nanos: AtomicU64::new(0),
                    in_flight: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    /// Holds `ended`, unless the ring is full.
    fn push(&self, ended: &Ended) -> bool {
        // Only this thread writes `pushed`.
        let pushed = self.pushed.load(Ordering::Relaxed);
        // Acquire: the taker's reads of the slot come before this thread writes it again.
        if pushed - self.taken.load(Ordering::Acquire) >= RING {
            return false;
        }
        let entry = &self.entries[(pushed % RING) as usize];
        let flags = u64::from(ended.in_flight) | if ended.dropped { DROPPED } else { 0 };
        entry
            .started_nanos
            .store(ended.started_nanos, Ordering::Relaxed);
        entry.now_nanos.store(ended.now_nanos, Ordering::Relaxed);
        entry.in_flight.store(flags, Ordering::Relaxed);
        // Release: the fields are visible to whoever reads this count.
        self.pushed.store(pushed + 1, Ordering::Release);
        true
    }

    /// Hands every held call, oldest first, to `feed` (under the limiter's lock: one taker).
    fn take(&self, feed: &mut impl FnMut(&Ended)) {
        let taken = self.taken.load(Ordering::Relaxed);
        let pushed = self.pushed.load(Ordering::Acquire);
        if pushed == taken {
            return;
        }
        for index in taken..pushed {
            let entry = &self.entries[(index % RING) as usize];
            let flags = entry.in_flight.load(Ordering::Relaxed);
            let ended = Ended {
                started_nanos: entry.started_nanos.load(Ordering::Relaxed),
                now_nanos: entry.now_nanos.load(Ordering::Relaxed),
                in_flight: (flags & u64::from(u32::MAX)) as u32,
                dropped: flags & DROPPED != 0,
            };
            // Taken before it is fed: an algorithm that panics on it is not fed it again.
            // Release: the reads above come before the thread writes this slot again.
            self.taken.store(index + 1, Ordering::Release);
            feed(&ended);
        }
    }
}

/// [`Quiet`] as two words, read without the lock: the time, and the in-flight count, the drop
/// flag and the RTT in whole microseconds (rounded down, and at most about 36 minutes: a
/// sample past the bound read is fed at once, which is never wrong).
struct QuietWords {
    until_nanos: AtomicU64,
    bounds: AtomicU64,
}

/// The drop flag of [`QuietWords::bounds`], above the in-flight count's 32 bits.
const DROPS: u64 = 1 << 32;
/// The RTT bound's microseconds, in the top 31 bits of [`QuietWords::bounds`]; all ones is no
/// bound.
const RTT_SHIFT: u32 = 33;
const NO_RTT_BOUND: u64 = (1 << 31) - 1;

impl QuietWords {
    fn bounds(quiet: &Quiet) -> u64 {
        let micros = u64::try_from(quiet.max_rtt.as_micros()).unwrap_or(u64::MAX);
        let micros = if quiet.max_rtt == Duration::MAX {
            NO_RTT_BOUND
        } else {
            micros.min(NO_RTT_BOUND - 1)
        };
        u64::from(quiet.max_in_flight) | if quiet.drops { DROPS } else { 0 } | micros << RTT_SHIFT
    }

    /// Publishes `quiet` (under the lock: one writer), writing only what changed.
    fn publish(&self, quiet: &Quiet) {
        let bounds = Self::bounds(quiet);
        let new_bounds = self.bounds.load(Ordering::Relaxed) != bounds;
        if new_bounds {
            self.bounds.store(bounds, Ordering::Relaxed);
        }
        // Release after the bounds (stored again when they changed, even at the same time): a
        // reader that reads this store of the time reads these bounds or newer. A reader may
        // still pair an older time with newer bounds; either way, a sample judged quiet by an
        // older word waits only for the next feed.
        if new_bounds || self.until_nanos.load(Ordering::Relaxed) != quiet.until_nanos {
            self.until_nanos.store(quiet.until_nanos, Ordering::Release);
        }
    }

    /// The last [`Quiet`] published, as read back from the words (its RTT bound rounded).
    #[inline]
    fn read(&self) -> Quiet {
        let until_nanos = self.until_nanos.load(Ordering::Acquire);
        let bounds = self.bounds.load(Ordering::Relaxed);
        let micros = bounds >> RTT_SHIFT;
        Quiet {
            until_nanos,
            max_rtt: if micros == NO_RTT_BOUND {
                Duration::MAX
            } else {
                Duration::from_micros(micros)
            },
            max_in_flight: (bounds & u64::from(u32::MAX)) as u32,
            drops: bounds & DROPS != 0,
        }
    }

    /// Whether `ended` is quiet by the last [`Quiet`] published.
    #[inline]
    fn holds(&self, ended: &Ended) -> bool {
        self.read().holds(&ended.sample(), ended.now_nanos)
    }
}

/// What one limiter holds for its algorithm: the samples that cannot move the limit (by the
/// algorithm's last [`Quiet`]), in one ring per thread slot below the stripe count (threads
/// above it feed every sample under the lock, as every thread would without an inbox).
pub(crate) struct Inbox {
    quiet: CachePadded<QuietWords>,
    rings: Box<[CachePadded<Ring>]>,
}

impl Inbox {
    pub(crate) fn new() -> Self {
        let words = QuietWords {
            until_nanos: AtomicU64::new(0),
            bounds: AtomicU64::new(0),
        };
        words.publish(&Quiet::NEVER);
        Self {
            quiet: CachePadded::new(words),
            rings: (0..default_stripes())
                .map(|_| CachePadded::new(Ring::new()))
                .collect(),
        }
    }

    /// Publishes which samples the algorithm says cannot move the limit now (under the lock).
    pub(crate) fn publish(&self, quiet: &Quiet) {
        self.quiet.publish(quiet);
    }

    /// Holds `ended` if its sample cannot move the limit and the calling thread's ring has
    /// room.
    #[inline]
    pub(crate) fn hold_quiet(&self, ended: &Ended) -> bool {
        self.quiet.holds(ended) && self.push(ended)
    }

    /// Holds `ended` in the calling thread's ring: false if the thread has none, or it is
    /// full.
    #[inline]
    fn push(&self, ended: &Ended) -> bool {
        let Some(ring) = self.rings.get(thread_slot()) else {
            return false;
        };
        ring.push(ended)
    }

    /// Hands every held call to `feed`, each thread's in the order it pushed them (under the
    /// limiter's lock).
    pub(crate) fn take(&self, mut feed: impl FnMut(&Ended)) {
        for ring in self.rings.iter() {
            ring.take(&mut feed);
        }
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;

    fn ended(rtt_micros: u64, rtt_extra_nanos: u64, in_flight: u32, dropped: bool) -> Ended {
        Ended {
            started_nanos: 1_000,
            now_nanos: 1_000 + rtt_micros * 1_000 + rtt_extra_nanos,
            in_flight,
            dropped,
        }
    }

    /// The two words never call a sample quiet that the algorithm's `Quiet` would not, and
    /// agree with it everywhere but within the last partial microsecond of the RTT bound.
    #[test]
    fn the_published_words_are_never_quieter_than_the_algorithm_says() {
        let quiets = [
            Quiet::NEVER,
            Quiet::until(1_000),
            Quiet::until(u64::MAX),
            Quiet {
                until_nanos: u64::MAX,
                max_rtt: Duration::from_millis(5),
                max_in_flight: 4,
                drops: false,
            },
            Quiet {
                until_nanos: 500,
                max_rtt: Duration::from_nanos(2_500),
                max_in_flight: 0,
                drops: true,
            },
            Quiet {
                until_nanos: u64::MAX,
                max_rtt: Duration::from_secs(1_999),
                max_in_flight: u32::MAX,
                drops: false,
            },
            Quiet {
                until_nanos: u64::MAX,
                max_rtt: Duration::from_secs(10_000),
                max_in_flight: u32::MAX,
                drops: false,
            },
        ];
        for quiet in quiets {
            let words = QuietWords {
                until_nanos: AtomicU64::new(7),
                bounds: AtomicU64::new(7),
            };
            words.publish(&quiet);
            for start in [0, 499, 500, 999, 1_000, u64::MAX / 2] {
                for rtt in [0, 1, 2, 3, 4_999, 5_000, 5_001, 9_999_999_999] {
                    for extra in [0, 1, 999] {
                        for in_flight in [0, 1, 4, 5, u32::MAX] {
                            for dropped in [false, true] {
                                let mut ended = ended(rtt, extra, in_flight, dropped);
                                ended.started_nanos = ended.started_nanos - 1_000 + start;
                                ended.now_nanos = ended.now_nanos - 1_000 + start;
                                let (sample, now) = (ended.sample(), ended.now_nanos);
                                let said = quiet.holds(&sample, now);
                                let read = words.holds(&ended);
                                assert!(!read || said, "{quiet:?} {sample:?} at {now}");
                                // Bounds past 2^31 - 2 microseconds (about 36 minutes) are
                                // read as that.
                                if extra == 0 && quiet.max_rtt < Duration::from_secs(2_000) {
                                    assert_eq!(read, said, "{quiet:?} {sample:?} at {now}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_ring_holds_its_capacity_and_gives_them_back_in_order() {
        let ring = Ring::new();
        let calls: Vec<Ended> = (0..RING)
            .map(|index| ended(index, index, index as u32, index % 2 == 0))
            .collect();
        for call in &calls {
            assert!(ring.push(call));
        }
        assert!(!ring.push(&ended(0, 0, 1, false)), "full");
        let mut taken = Vec::new();
        ring.take(&mut |call: &Ended| taken.push(*call));
        assert_eq!(taken, calls);
        assert!(ring.push(&ended(1, 0, 1, false)), "room again");
    }
}
