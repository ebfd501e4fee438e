//! Count-min sketches of a fixed size: how often each key was seen or passed in the current and
//! the previous window, and how many of its calls are in flight. A sketch never counts a key
//! below its true count (it can only count more, when keys share cells), which is what makes it
//! safe to limit a key on: the error only ever refuses early.

use super::mix;
use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// Rows of every sketch: a key's count is the least of its cells in these rows.
pub(crate) const ROWS: usize = 4;

/// Bits of a windowed cell: the window's number (low 16 bits), then this window's count and the
/// previous window's, 24 bits each (saturating).
const WINDOW_BITS: u32 = 16;
const COUNT_BITS: u32 = 24;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;

/// How a count the cell could not hold reads (a saturated one, `COUNT_MAX`, or one no longer
/// kept): more than any limit (a key's count is at most 2^32 − 1), with room to add to without
/// overflow. So a key whose cells saturate is refused, never let through unlimited (the
/// limiter takes it as the most the key can pass in a window: see `KeyedLimiter::passes`).
pub(crate) const FULL: u64 = 1 << 56;
const WINDOW_MASK: u64 = (1 << WINDOW_BITS) - 1;

/// A key's cells: one column per row, from its 64-bit hash (double hashing).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cells([usize; ROWS]);

impl Cells {
    /// The columns of the key hashed to `hash` in rows of `width` (a power of two, at most
    /// 2^32).
    pub(crate) fn of(hash: u64, width: usize) -> Self {
        let mask = width as u64 - 1;
        // Four 32-bit slices: the hash's two halves, and the two halves of the hash mixed again
        // (SplitMix64's finaliser), one a row. The rows place a key independently, so two keys
        // share all four cells about once in width^4 pairs. (Before 0.2 the columns stepped
        // from one start by a multiple of the high half, rotated before the mask: the rotation
        // read bits the step hardly reaches, every row gave a key the same column, and the
        // sketch counted as one row. Plain double hashing would still share all four cells
        // once in width^2 / 2 pairs.)
        let mixed = mix(hash);
        let slices = [hash, hash >> 32, mixed, mixed >> 32];
        let mut cells = [0; ROWS];
        for (row, (cell, slice)) in cells.iter_mut().zip(slices).enumerate() {
            *cell = row * width + (slice & 0xffff_ffff & mask) as usize;
        }
        Self(cells)
    }

    /// The key's cell in each row, as indices into the sketch.
    #[cfg(test)]
    pub(crate) fn indices(&self) -> [usize; ROWS] {
        self.0
    }
}

/// Which of a cell's two counts an add raises.
#[derive(Debug, Clone, Copy)]
enum Window {
    Current,
    Previous,
}

/// Counts per window: this window's and the previous one's, per key.
#[derive(Debug)]
pub(crate) struct WindowSketch {
    width: usize,
    cells: Box<[AtomicU64]>,
}

fn unpack(cell: u64) -> (u64, u64, u64) {
    (
        cell & WINDOW_MASK,
        (cell >> WINDOW_BITS) & COUNT_MAX,
        (cell >> (WINDOW_BITS + COUNT_BITS)) & COUNT_MAX,
    )
}

fn pack(window: u64, current: u64, previous: u64) -> u64 {
    (window & WINDOW_MASK)
        | (current.min(COUNT_MAX) << WINDOW_BITS)
        | (previous.min(COUNT_MAX) << (WINDOW_BITS + COUNT_BITS))
}

/// A cell's counts as of `window`: (this window's, the previous window's).
///
/// A cell one window ahead of `window`, with a count, was written by a call that read the
/// clock later than this one (which was held up on its way to the cell): this window's count
/// is the cell's previous one, and the window before is no longer kept, so it reads as
/// [`FULL`], never as less than the truth: such a late call may be refused early, never
/// admitted past a limit. (A cell never written, or written 65,535 windows before, also looks
/// one window ahead in 16 bits: an empty one is read as empty; a stale one as full for that
/// one window, which refuses early, as the wrap at 65,536 windows counts more, never less.)
/// A saturated count reads as [`FULL`].
fn counts_at(cell: u64, window: u64) -> (u64, u64) {
    let (stored, current, previous) = unpack(cell);
    let window = window & WINDOW_MASK;
    let read = |count: u64| if count == COUNT_MAX { FULL } else { count };
    if stored == window {
        (read(current), read(previous))
    } else if stored.wrapping_add(1) & WINDOW_MASK == window {
        (0, read(current))
    } else if ahead(cell, window) {
        (read(previous), FULL)
    } else {
        (0, 0)
    }
}

/// Whether `cell` is one window ahead of `window`, with a count (see [`counts_at`]).
fn ahead(cell: u64, window: u64) -> bool {
    let (stored, current, previous) = unpack(cell);
    (window.wrapping_add(1) & WINDOW_MASK) == stored && current + previous > 0
}

impl WindowSketch {
    /// A sketch `width` columns wide (a power of two) in each of its rows.
    pub(crate) fn new(width: usize) -> Self {
        debug_assert!(width.is_power_of_two());
        Self {
            width,
            cells: (0..ROWS * width).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// Adds `n` to the key's count in `window`, by conservative update: each of the key's cells
    /// is raised to at least the key's count plus `n`, and no further. A cell that a busier key
    /// also counts is left as it is, so keys sharing cells inflate each other far less than by
    /// adding `n` to every cell (under a flood of distinct keys, about half as much); the least
    /// of the key's cells still never falls below its true count, provided calls that add to
    /// the same key do so one at a time (the limiter adds under the key's set's lock, and
    /// `loom_window.rs` model-checks two keys sharing a cell).
    pub(crate) fn add(&self, cells: Cells, window: u64, n: u64) {
        self.raise(cells, window, n, Window::Current);
    }

    /// Adds `n` to the key's count in the window before `window` (what an evicted key passed
    /// there), by conservative update as [`add`](Self::add).
    pub(crate) fn add_previous(&self, cells: Cells, window: u64, n: u64) {
        self.raise(cells, window, n, Window::Previous);
    }

    fn raise(&self, cells: Cells, window: u64, n: u64, which: Window) {
        let pick = |(current, previous): (u64, u64)| match which {
            Window::Current => current,
            Window::Previous => previous,
        };
        let olds = cells
            .0
            .map(|index| self.cells[index].load(Ordering::Relaxed));
        let least = olds
            .iter()
            .map(|&old| pick(counts_at(old, window)))
            .min()
            .unwrap_or(0);
        let target = least.saturating_add(n);
        for (&index, mut old) in cells.0.iter().zip(olds) {
            let cell = &self.cells[index];
            loop {
                let new = if ahead(old, window) {
                    // Written in a later window: never moved back. This window's count is the
                    // cell's previous; the window before is no longer kept.
                    let (stored, current, previous) = unpack(old);
                    match which {
                        Window::Current => pack(stored, current, previous.max(target)),
                        Window::Previous => old,
                    }
                } else {
                    let (current, previous) = counts_at(old, window);
                    match which {
                        Window::Current => pack(window, current.max(target), previous),
                        Window::Previous => pack(window, current, previous.max(target)),
                    }
                };
                if new == old {
                    break;
                }
                // Relaxed: a count guards no other data.
                match cell.compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(actual) => old = actual,
                }
            }
        }
    }

    /// The key's counts as of `window`: (this window's, the previous window's), each at least
    /// the true count.
    pub(crate) fn counts(&self, cells: Cells, window: u64) -> (u64, u64) {
        let mut least = (u64::MAX, u64::MAX);
        for &index in &cells.0 {
            let (current, previous) = counts_at(self.cells[index].load(Ordering::Relaxed), window);
            least = (least.0.min(current), least.1.min(previous));
        }
        least
    }

    /// Bytes this sketch holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.cells.len() * std::mem::size_of::<AtomicU64>()
    }
}

/// Calls in flight per key.
#[derive(Debug)]
pub(crate) struct FlightSketch {
    width: usize,
    cells: Box<[AtomicI64]>,
}

impl FlightSketch {
    pub(crate) fn new(width: usize) -> Self {
        debug_assert!(width.is_power_of_two());
        Self {
            width,
            cells: (0..ROWS * width).map(|_| AtomicI64::new(0)).collect(),
        }
    }

    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// Counts one more call of the key in flight if that keeps its count at most `limit`;
    /// returns whether it did. Counted in every cell first, then the cells read again, and taken
    /// back if their least is over the limit: of two racing calls one may be refused too early,
    /// never both admitted past the limit. (Reading the values the increments returned is not
    /// enough: two calls can each see the other's increment in a different cell.) SeqCst: the
    /// proof needs one order of every increment and read (model-checked in `loom_flight.rs`).
    pub(crate) fn try_enter(&self, cells: Cells, limit: i64) -> bool {
        for &index in &cells.0 {
            self.cells[index].fetch_add(1, Ordering::SeqCst);
        }
        let least = cells
            .0
            .iter()
            .map(|&index| self.cells[index].load(Ordering::SeqCst))
            .min()
            .unwrap_or(0);
        if least <= limit {
            return true;
        }
        self.exit(cells);
        false
    }

    /// A call of the key ended.
    pub(crate) fn exit(&self, cells: Cells) {
        for &index in &cells.0 {
            self.cells[index].fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The key's calls in flight (at least the true number).
    pub(crate) fn in_flight(&self, cells: Cells) -> i64 {
        cells
            .0
            .iter()
            .map(|&index| self.cells[index].load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.cells.len() * std::mem::size_of::<AtomicI64>()
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_this_window_and_the_last_and_forgets_older_ones() {
        let sketch = WindowSketch::new(1024);
        let key = Cells::of(0x1234_5678_9abc_def0, 1024);
        sketch.add(key, 10, 3);
        sketch.add(key, 10, 2);
        assert_eq!(sketch.counts(key, 10), (5, 0));
        assert_eq!(sketch.counts(key, 11), (0, 5));
        sketch.add(key, 11, 1);
        assert_eq!(sketch.counts(key, 11), (1, 5));
        assert_eq!(sketch.counts(key, 12), (0, 1));
        assert_eq!(sketch.counts(key, 13), (0, 0));
        // A window's number wraps at 16 bits: 65,536 windows on, a cell reads as now again
        // (more, never less, than the truth).
        sketch.add(key, 20, 7);
        assert_eq!(sketch.counts(key, 20 + 65_536), (7, 0));
    }

    #[test]
    fn a_late_call_never_moves_a_cell_back_a_window() {
        let sketch = WindowSketch::new(1024);
        let key = Cells::of(0x1234_5678_9abc_def0, 1024);
        sketch.add(key, 10, 3);
        // A call in window 11 first, then one that read the clock in window 10.
        sketch.add(key, 11, 2);
        sketch.add(key, 10, 1);
        assert_eq!(sketch.counts(key, 11), (2, 4), "both windows kept");
        // The late call sees its window's count, and the one before as full (not kept).
        assert_eq!(sketch.counts(key, 10), (4, FULL));
        // An add to the window before a late call's is dropped, not written back.
        sketch.add_previous(key, 10, 5);
        assert_eq!(sketch.counts(key, 11), (2, 4));
        // A cell never written reads as empty in every window, the last of the 16 bits too.
        let other = Cells::of(0x0fed_cba9_8765_4321, 1024);
        assert_eq!(sketch.counts(other, 65_535), (0, 0));
        sketch.add(other, 65_535, 1);
        assert_eq!(sketch.counts(other, 65_535), (1, 0));
    }

    #[test]
    fn counts_never_fall_below_the_truth_and_saturate() {
        let width = 64;
        let sketch = WindowSketch::new(width);
        let truth: Vec<u64> = (0..500).map(|key| key % 7 + 1).collect();
        for (key, &n) in truth.iter().enumerate() {
            sketch.add(
                Cells::of(crate::keyed::fixed_fingerprint(&key), width),
                1,
                n,
            );
        }
        for (key, &n) in truth.iter().enumerate() {
            let (current, _) =
                sketch.counts(Cells::of(crate::keyed::fixed_fingerprint(&key), width), 1);
            assert!(current >= n, "key {key}: {current} < {n}");
        }
        // A count past what a cell holds reads as full, this window and the next.
        let hot = Cells::of(7, width);
        sketch.add(hot, 2, COUNT_MAX - 1);
        assert_eq!(sketch.counts(hot, 2).0, COUNT_MAX - 1);
        sketch.add(hot, 2, 1);
        assert_eq!(sketch.counts(hot, 2).0, FULL);
        sketch.add(hot, 2, u64::MAX);
        assert_eq!(sketch.counts(hot, 2).0, FULL);
        assert_eq!(sketch.counts(hot, 3), (0, FULL));
    }

    #[test]
    fn each_row_gives_a_key_a_column_of_its_own() {
        let width = 8_192;
        let columns = |key: u64| {
            let cells = Cells::of(crate::keyed::fixed_fingerprint(&key), width).indices();
            let mut columns = cells.map(|index| index % width);
            columns.sort_unstable();
            columns
        };
        // A key's four columns differ (the rows hash it independently)...
        let alike = (0..10_000u64)
            .filter(|&key| columns(key).windows(2).any(|pair| pair[0] == pair[1]))
            .count();
        // (two of four columns equal by chance: about 6 in 8,192 keys)
        assert!(alike < 30, "{alike} of 10,000 keys repeat a column");
        // ...so keys that share their first row's cell rarely share another: among 100,000
        // keys, about 610,000 pairs share the first row's column (5 x 10^9 pairs / 8,192), and
        // about 75 of those each other row (about 224 in all), and none all four (1.1 x 10^-6
        // pairs expected).
        let mut by_first: std::collections::HashMap<usize, Vec<[usize; ROWS]>> =
            std::collections::HashMap::new();
        for key in 0..100_000u64 {
            let cells = Cells::of(crate::keyed::fixed_fingerprint(&key), width).indices();
            by_first.entry(cells[0]).or_default().push(cells);
        }
        let (mut first, mut all) = (0, 0);
        for group in by_first.values() {
            for (i, x) in group.iter().enumerate() {
                for y in &group[i + 1..] {
                    first += 1;
                    all += usize::from(x == y);
                }
            }
        }
        assert!(first > 550_000, "{first} pairs share the first row");
        assert_eq!(all, 0, "{all} of {first} pairs share every row");
    }

    #[test]
    fn in_flight_is_admitted_up_to_the_limit_and_given_back() {
        let sketch = FlightSketch::new(256);
        let key = Cells::of(99, 256);
        assert!(sketch.try_enter(key, 2));
        assert!(sketch.try_enter(key, 2));
        assert!(!sketch.try_enter(key, 2));
        assert_eq!(sketch.in_flight(key), 2);
        sketch.exit(key);
        assert!(sketch.try_enter(key, 2));
    }
}
