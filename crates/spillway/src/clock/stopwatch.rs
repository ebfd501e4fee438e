//! Guava's `SleepingStopwatch`: elapsed whole microseconds since a start, read as cheaply as
//! the clock allows.

use super::tsc::Tsc;
use super::{AnyClock, Clock};

/// Elapsed time since the stopwatch started, in whole microseconds.
///
/// On the inline TSC it multiplies elapsed ticks once (no nanoseconds in between); on any other
/// clock it reads nanoseconds and divides, which is what a [`ManualClock`](super::ManualClock)
/// trace is written against.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stopwatch {
    Tsc {
        tsc: Tsc,
        start_ticks: u64,
        micros_per_tick_2_64: u64,
    },
    Nanos {
        start_nanos: u64,
    },
}

impl Stopwatch {
    /// A stopwatch started now, on `clock`.
    pub(crate) fn start(clock: &AnyClock) -> Self {
        if let AnyClock::System(system) = clock {
            if let Some(tsc) = system.tsc() {
                if let Some(micros_per_tick_2_64) = tsc.micros_per_tick_2_64() {
                    return Self::Tsc {
                        tsc,
                        start_ticks: tsc.ticks(),
                        micros_per_tick_2_64,
                    };
                }
            }
        }
        Self::Nanos {
            start_nanos: clock.now_nanos(),
        }
    }

    /// Whole microseconds since the start, on `clock` (the one it started on); at most
    /// `i64::MAX`.
    #[inline(always)]
    pub(crate) fn read_micros(&self, clock: &AnyClock) -> i64 {
        match *self {
            Self::Tsc {
                tsc,
                start_ticks,
                micros_per_tick_2_64,
            } => {
                let ticks = tsc.ticks().saturating_sub(start_ticks);
                // Below 2^63 by `micros_per_tick_2_64`'s bound.
                Tsc::micros(ticks, micros_per_tick_2_64) as i64
            }
            Self::Nanos { start_nanos } => {
                let micros = clock.now_nanos().saturating_sub(start_nanos) / 1_000;
                i64::try_from(micros).unwrap_or(i64::MAX)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, SystemClock};
    use std::time::Duration;

    #[test]
    fn reads_whole_microseconds_of_a_manual_clock() {
        let manual = ManualClock::starting_at_millis(1_700_000_000_000);
        let clock = AnyClock::from_clock(manual.clone());
        let stopwatch = Stopwatch::start(&clock);
        assert_eq!(stopwatch.read_micros(&clock), 0);
        manual.advance(Duration::from_nanos(1_999));
        assert_eq!(stopwatch.read_micros(&clock), 1);
        manual.advance(Duration::from_nanos(1));
        assert_eq!(stopwatch.read_micros(&clock), 2);
    }

    #[test]
    fn follows_the_system_clock() {
        let system = SystemClock::new();
        let clock = AnyClock::from_clock(system.clone());
        let before = system.now_nanos();
        let stopwatch = Stopwatch::start(&clock);
        assert_eq!(
            matches!(stopwatch, Stopwatch::Tsc { .. }),
            system.tsc().is_some(),
            "the inline counter is used exactly when the system clock has one"
        );
        let first = stopwatch.read_micros(&clock);
        let second = stopwatch.read_micros(&clock);
        let after = system.now_nanos();
        assert!(0 <= first && first <= second, "{first} then {second}");
        // Started after `before`, read before `after` (one microsecond of rounding between the
        // two scalings).
        let bound = (after - before) / 1_000 + 1;
        assert!(
            second as u64 <= bound,
            "{second} µs read, at most {bound} µs passed"
        );
    }
}
