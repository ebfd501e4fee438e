//! Shared helpers for the integration tests.

#![allow(dead_code)]

pub(crate) mod calls;
pub(crate) mod counting;

use spillway::{ManualClock, Spillway};

/// Unix-epoch milliseconds the traces start at (a multiple of every bucket length used).
pub(crate) const T0_MS: u64 = 1_700_000_000_000;

/// A spillway on a manual clock at `T0_MS`.
pub(crate) fn manual() -> (Spillway, ManualClock) {
    let clock = ManualClock::starting_at_millis(T0_MS);
    (Spillway::new_with_clock(clock.clone()), clock)
}
