//! Records waiting to be replayed, taken in order of arrival (then of reading): a calendar
//! queue, one bucket a millisecond of arrival over the next minute or so, each made a heap
//! only when it is the first. A log's lines come nearly in order, so a record goes into a bucket
//! near the end and leaves from the front: no heap's random walk over the whole window (the
//! replay's costliest step when it was one).

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

/// The time one bucket covers, in nanoseconds.
const BUCKET_NS: u64 = 1_000_000;

/// The most buckets held: records further ahead wait in a heap until the buckets reach them.
const SPAN: u64 = 1 << 16;

/// The most emptied buckets kept for reuse, and the most room one may keep: a burst's big
/// buckets are given back, so that what is kept stays small whatever came.
const SPARE_BUCKETS: usize = 1024;
const SPARE_ROOM: usize = 16;

/// An entry: its arrival, its place in the reading order, and the item.
struct Entry<T>(u64, u64, T);

impl<T> Entry<T> {
    fn key(&self) -> (u64, u64) {
        (self.0, self.1)
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// Items in order of arrival, then of reading.
pub(crate) struct Reorder<T> {
    /// The earliest bucket's entries (the millisecond of `base`, and any earlier), in a heap:
    /// a record pushed into it while others leave costs a logarithm, however many share its
    /// millisecond (a sort of the bucket at each look cost the whole bucket).
    first: BinaryHeap<Reverse<Entry<T>>>,
    /// A bucket a millisecond from `base`'s; the first stays empty, its entries in `first`.
    buckets: VecDeque<Vec<Entry<T>>>,
    base: u64,
    /// Entries at or past `base + SPAN` buckets.
    far: BinaryHeap<Reverse<Entry<T>>>,
    /// Emptied buckets, kept for their room.
    spare: Vec<Vec<Entry<T>>>,
    len: usize,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Self {
            first: BinaryHeap::new(),
            buckets: VecDeque::new(),
            base: 0,
            far: BinaryHeap::new(),
            spare: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Reorder<T> {
    /// Adds `item`, arrived at `at`, read `order`-th (orders increase).
    pub(crate) fn push(&mut self, at: u64, order: u64, item: T) {
        if self.len == 0 {
            // Empty (its buckets too): it starts again at this item.
            self.base = at / BUCKET_NS;
        }
        self.len += 1;
        self.place(Entry(at, order, item));
    }

    /// Puts `entry` in its bucket: one in or before the first bucket's millisecond in the
    /// first's heap, one past the span in the far heap.
    fn place(&mut self, entry: Entry<T>) {
        let index = (entry.0 / BUCKET_NS).saturating_sub(self.base);
        if index >= SPAN {
            self.far.push(Reverse(entry));
            return;
        }
        if index == 0 {
            self.first.push(Reverse(entry));
            return;
        }
        let index = index as usize;
        while self.buckets.len() <= index {
            let bucket = self.spare.pop().unwrap_or_default();
            self.buckets.push_back(bucket);
        }
        self.buckets[index].push(entry);
    }

    /// Makes the first bucket the earliest non-empty one.
    fn settle(&mut self) {
        if self.len == 0 {
            return;
        }
        while self.first.is_empty() {
            if let Some(empty) = self.buckets.pop_front() {
                if empty.capacity() <= SPARE_ROOM && self.spare.len() < SPARE_BUCKETS {
                    self.spare.push(empty);
                }
            }
            if self.buckets.is_empty() {
                // Only far entries are left: the buckets start at the earliest.
                let Some(Reverse(earliest)) = self.far.peek() else {
                    return;
                };
                self.base = earliest.0 / BUCKET_NS;
            } else {
                self.base += 1;
            }
            self.pull_far();
            if let Some(next) = self.buckets.front_mut() {
                self.first.extend(next.drain(..).map(Reverse));
            }
        }
    }

    /// Moves the far entries the span now reaches into their buckets.
    fn pull_far(&mut self) {
        let end = self.base.saturating_add(SPAN);
        while let Some(Reverse(entry)) = self.far.peek() {
            if entry.0 / BUCKET_NS >= end {
                break;
            }
            let Some(Reverse(entry)) = self.far.pop() else {
                break;
            };
            self.place(entry);
        }
    }

    /// The earliest arrival waiting.
    pub(crate) fn peek(&mut self) -> Option<u64> {
        self.settle();
        self.first.peek().map(|Reverse(entry)| entry.0)
    }

    /// The earliest item, with its arrival.
    pub(crate) fn pop(&mut self) -> Option<(u64, T)> {
        self.settle();
        let Reverse(Entry(at, _, item)) = self.first.pop()?;
        self.len -= 1;
        Some((at, item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order a heap of (arrival, order) gives.
    fn in_heap_order(items: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut sorted = items.to_vec();
        sorted.sort_unstable();
        sorted
    }

    #[test]
    fn items_come_out_by_arrival_then_reading_order_whatever_the_gaps() {
        // Nearly in order, with ties, items earlier than the first bucket, gaps of a day and
        // of more than the span, pops between pushes.
        let ms = BUCKET_NS;
        let day = 86_400_000 * ms;
        let arrivals = [
            5 * ms + 3,
            5 * ms + 1,
            5 * ms + 1,
            7 * ms,
            2 * ms,
            day,
            day - 1,
            6 * ms,
            SPAN * ms + 9,
            SPAN * ms + 9,
            3 * day,
            10 * ms,
        ];
        let mut queue = Reorder::default();
        let mut expected = Vec::new();
        let mut out = Vec::new();
        for (order, at) in arrivals.iter().enumerate() {
            let order = order as u64;
            queue.push(*at, order, order);
            expected.push((*at, order));
            if order == 6 {
                // Two out now: the rest must still come out in order among themselves.
                for _ in 0..2 {
                    let (at, item) = queue.pop().expect("an item");
                    out.push((at, item));
                }
            }
        }
        while let Some(popped) = queue.pop() {
            out.push(popped);
        }
        assert_eq!(out.len(), arrivals.len());
        let (first, rest) = out.split_at(2);
        assert_eq!(first, &in_heap_order(&expected[..7])[..2]);
        let mut left: Vec<_> = expected
            .iter()
            .filter(|item| !first.contains(item))
            .copied()
            .collect();
        left.sort_unstable();
        assert_eq!(rest, left.as_slice());
        assert_eq!(queue.peek(), None);
    }

    #[test]
    fn a_pseudo_random_stream_comes_out_as_a_heap_gives_it() {
        let mut state = 7u64;
        let mut queue = Reorder::default();
        let mut heap = BinaryHeap::new();
        let mut clock = 1_796_378_400 * 1_000_000_000u64;
        for order in 0..50_000u64 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            clock += (state >> 40) % 1_000_000;
            // Arrivals up to 200 ms before the line's time.
            let at = clock - (state >> 20) % 200_000_000;
            queue.push(at, order, order);
            heap.push(Reverse((at, order)));
            if (state >> 8) % 3 == 0 {
                let Reverse((at, order)) = heap.pop().expect("an item");
                assert_eq!(queue.peek(), Some(at));
                assert_eq!(queue.pop(), Some((at, order)));
            }
        }
        while let Some(Reverse((at, order))) = heap.pop() {
            assert_eq!(queue.pop(), Some((at, order)));
        }
        assert_eq!(queue.pop(), None);
    }

    #[test]
    fn many_records_of_one_millisecond_pushed_between_looks_come_out_in_reading_order() {
        // As a log whose lines all carry one time is read: a look after each line, and a line
        // taken now and then (each look used to sort the whole millisecond again).
        let mut queue = Reorder::default();
        let at = 1_700_000_000 * 1_000_000_000u64;
        let mut taken = Vec::new();
        for order in 0..100_000u64 {
            queue.push(at + order % 3, order, order);
            assert!(queue.peek().is_some());
            if order % 5 == 0 {
                taken.push(queue.pop().unwrap());
            }
        }
        while let Some(item) = queue.pop() {
            taken.push(item);
        }
        assert_eq!(taken.len(), 100_000);
        // Each pop takes the earliest then; the rest come in (arrival, reading) order.
        let tail = &taken[20_000..];
        assert!(tail
            .windows(2)
            .all(|w| (w[0].0, w[0].1) <= (w[1].0, w[1].1)));
    }
}
