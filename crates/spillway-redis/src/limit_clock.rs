//! The limit's clock (Redis's) as this process reads it: its own clock plus an offset, and how
//! far off that offset may be, from the times Redis's answers carry.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

/// How long an offset is kept when no answer measures it more closely: past it, the next
/// answer's measure replaces it, however loose, so that a drift between the clocks is
/// followed.
const KEEP_NANOS: u64 = 1_000_000_000;

/// The limit's time, in milliseconds, is read whole: a time Redis gave may be up to this much
/// later than it says.
const READ_NANOS: u64 = 1_000_000;

/// This process's clock on the limit's: the offset from the answer measured most closely in
/// the last second (NTP's way: Redis read its time between the call's sending and its answer,
/// so at their middle, within half their interval), and that half-interval, the uncertainty.
#[derive(Debug)]
pub(crate) struct LimitClock {
    /// The limit's clock less this process's, in nanoseconds.
    offset_nanos: AtomicI64,
    /// How far `offset_nanos` may be off, in nanoseconds.
    uncertainty_nanos: AtomicU64,
    /// When (this process's clock) the offset was measured: updates one at a time.
    measured: Mutex<u64>,
}

impl Default for LimitClock {
    fn default() -> Self {
        Self {
            offset_nanos: AtomicI64::new(0),
            // None measured yet: the local clock alone, trusted to a second.
            uncertainty_nanos: AtomicU64::new(KEEP_NANOS),
            measured: Mutex::new(0),
        }
    }
}

impl LimitClock {
    /// Redis said `limit_ms` in answer to a call sent at `sent_nanos` and answered at
    /// `answered_nanos` (this process's clock): the offset follows if this measure is at
    /// least as close as the one kept, or that one is older than a second.
    pub(crate) fn observe(&self, limit_ms: u64, sent_nanos: u64, answered_nanos: u64) {
        let half = answered_nanos.saturating_sub(sent_nanos) / 2;
        let middle = sent_nanos.saturating_add(half);
        let uncertainty = half.saturating_add(READ_NANOS);
        let limit_nanos = limit_ms.saturating_mul(1_000_000);
        let offset = i64::try_from(i128::from(limit_nanos) - i128::from(middle)).unwrap_or(0);
        let mut measured = crate::lock::lock(&self.measured);
        let kept = self.uncertainty_nanos.load(Ordering::Relaxed);
        let stale = answered_nanos.saturating_sub(*measured) > KEEP_NANOS;
        if uncertainty <= kept || stale {
            *measured = answered_nanos;
            self.offset_nanos.store(offset, Ordering::Relaxed);
            self.uncertainty_nanos.store(uncertainty, Ordering::Relaxed);
        }
    }

    /// `now_nanos` of this process's clock on the limit's.
    pub(crate) fn at(&self, now_nanos: u64) -> u64 {
        let offset = self.offset_nanos.load(Ordering::Relaxed);
        now_nanos.saturating_add_signed(offset)
    }

    /// How far [`at`](Self::at) may be off, either way.
    #[cfg(test)]
    fn uncertainty_nanos(&self) -> u64 {
        self.uncertainty_nanos.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::LimitClock;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_closest_measure_of_the_last_second_sets_the_offset() {
        let clock = LimitClock::default();
        // Sent at 10 ms, answered at 14 ms; Redis read 1,012 ms: 1,000 ms ahead, within 3 ms.
        clock.observe(1_012, 10 * MS, 14 * MS);
        assert_eq!(clock.at(20 * MS), 1_020 * MS);
        assert_eq!(clock.uncertainty_nanos(), 3 * MS);
        // A looser measure (10 ms there and back) does not move it...
        clock.observe(1_030, 20 * MS, 30 * MS);
        assert_eq!(clock.at(40 * MS), 1_040 * MS);
        // ... a closer one does.
        clock.observe(1_041, 40 * MS, 40 * MS + MS / 2);
        assert_eq!(clock.at(40 * MS), 1_040 * MS + 750_000);
        assert_eq!(clock.uncertainty_nanos(), MS + MS / 4);
        // After a second, any measure replaces it.
        clock.observe(2_100, 1_100 * MS, 1_110 * MS);
        assert_eq!(clock.at(1_105 * MS), 2_100 * MS);
        assert_eq!(clock.uncertainty_nanos(), 6 * MS);
    }
}
