//! A reservation of permits that may still be given back.

use super::schedule::Undo;
use super::RateLimiter;
use std::time::Duration;

/// Permits reserved from a [`RateLimiter`] that may still be given back.
///
/// Dropping it keeps the reservation (as [`commit`](Self::commit) does); [`cancel`](Self::cancel)
/// gives it back if nothing was reserved after it. The caller waits [`wait`](Self::wait) before
/// using the permits.
#[derive(Debug)]
#[must_use = "a reservation is kept when dropped; call `cancel` to give it back"]
pub struct Reservation<'a> {
    pub(super) limiter: &'a RateLimiter,
    pub(super) wait: Duration,
    /// How to give it back; `None` for a reservation of no permits.
    pub(super) undo: Option<Undo>,
}

impl<'a> Reservation<'a> {
    /// A reservation of no permits: nothing to wait for, nothing to give back.
    pub(super) fn nothing(limiter: &'a RateLimiter) -> Self {
        Self {
            limiter,
            wait: Duration::ZERO,
            undo: None,
        }
    }

    /// How long the caller must wait, from the reservation, before using the permits.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Keeps the reservation.
    pub fn commit(self) {}

    /// Gives the reservation back, if nothing changed the limiter after it (no reservation, no
    /// rate change): the next caller then gets this one's moment. Returns whether it was given back; if
    /// not, the permits stay reserved and unused (later callers' moments do not move).
    pub fn cancel(self) -> bool {
        self.undo
            .is_none_or(|undo| self.limiter.schedule.undo(undo))
    }
}
