//! Reading the CPU's time-stamp counter inline: the crate's one module with `unsafe`.
//!
//! [`quanta`] decides whether the TSC is fit to use (invariant, calibrated against the OS clock)
//! and calibrates it; its reads, though, are calls into another crate that the compiler does not
//! inline, and on the hot path the call and the clock's dispatch around it cost more than the
//! arithmetic they wrap (about 1.4 ns of a 13.5 ns `RateLimiter::try_acquire`). Once `quanta`
//! says the TSC is in use, [`Tsc`] reads it directly and scales ticks to nanoseconds with a
//! factor taken from `quanta`'s own calibration, so both agree to within a nanosecond per
//! six minutes of elapsed time.

/// How many ticks the calibration factor is taken over: 2^40 ticks are minutes at any clock
/// rate, so the factor keeps `quanta`'s precision.
const SHIFT: u32 = 40;

/// A calibrated, inline time-stamp counter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tsc {
    /// Nanoseconds per 2^40 ticks.
    nanos_per_2_40_ticks: u64,
}

impl Tsc {
    /// The TSC, if `clock` reads it (rather than the OS clock) and this target can read it
    /// inline; `None` otherwise.
    pub(super) fn of(clock: &quanta::Clock) -> Option<Self> {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let ticks = 1u64 << SHIFT;
        let nanos = clock.delta_as_nanos(0, ticks);
        // On the OS clock, `quanta`'s raw values are already nanoseconds and it does not scale
        // them. (A TSC calibrated at exactly 1 GHz would look the same and keep the fallback,
        // which is correct, only slower.)
        if nanos == ticks || nanos == 0 {
            return None;
        }
        Some(Self {
            nanos_per_2_40_ticks: nanos,
        })
    }

    /// Microseconds per tick, times 2^64, if below 2^63 (a counter faster than about 1 MHz):
    /// the factor [`micros`](Self::micros) multiplies by.
    pub(super) fn micros_per_tick_2_64(self) -> Option<u64> {
        // (nanos per 2^40 ticks) * 2^24 / 1000 = micros per tick * 2^64.
        let factor = (u128::from(self.nanos_per_2_40_ticks) << 24) / 1_000;
        u64::try_from(factor).ok().filter(|&f| f <= i64::MAX as u64)
    }

    /// Whole microseconds in `ticks` ticks, given
    /// [`micros_per_tick_2_64`](Self::micros_per_tick_2_64): one multiply, and below 2^63.
    #[inline(always)]
    pub(super) fn micros(ticks: u64, micros_per_tick_2_64: u64) -> u64 {
        ((u128::from(ticks) * u128::from(micros_per_tick_2_64)) >> 64) as u64
    }

    /// The counter's current value, in ticks.
    #[inline(always)]
    pub(super) fn ticks(self) -> u64 {
        read()
    }

    /// Nanoseconds in `ticks` ticks.
    #[inline(always)]
    pub(super) fn nanos(self, ticks: u64) -> u64 {
        let nanos = (u128::from(ticks) * u128::from(self.nanos_per_2_40_ticks)) >> SHIFT;
        u64::try_from(nanos).unwrap_or(u64::MAX)
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unsafe_code)] // the one place: see the module docs
fn read() -> u64 {
    // SAFETY: RDTSC exists on every x86_64 CPU, reads a register and touches no memory; the
    // intrinsic is `unsafe` only as all of `core::arch` is. It is reached only after `quanta`
    // chose the TSC for this process, which it does after checking the CPU reports it invariant.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn read() -> u64 {
    unreachable!("Tsc::of returns None on this target")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_quanta_on_the_same_ticks() {
        let clock = quanta::Clock::new();
        let Some(tsc) = Tsc::of(&clock) else {
            return; // this machine's quanta uses the OS clock: nothing to compare
        };
        for ticks in [
            0u64,
            1,
            1_000,
            3_000_000_000,
            1 << 40,
            1 << 50,
            u64::MAX >> 8,
        ] {
            let ours = tsc.nanos(ticks);
            let theirs = clock.delta_as_nanos(0, ticks);
            let tolerance = 1 + theirs / (1 << 38);
            assert!(
                ours.abs_diff(theirs) <= tolerance,
                "{ticks} ticks: {ours} ns here, {theirs} ns by quanta"
            );
        }
    }

    #[test]
    fn micros_agree_with_nanos_over_a_thousand() {
        let clock = quanta::Clock::new();
        let Some(tsc) = Tsc::of(&clock) else {
            return;
        };
        let factor = tsc.micros_per_tick_2_64().expect("a TSC faster than 1 MHz");
        for ticks in [0u64, 1, 999, 1_000_000, 3_000_000_000, 1 << 40, 1 << 50] {
            let micros = Tsc::micros(ticks, factor);
            let via_nanos = tsc.nanos(ticks) / 1_000;
            assert!(
                micros.abs_diff(via_nanos) <= 1,
                "{ticks}: {micros} vs {via_nanos}"
            );
        }
    }

    #[test]
    fn reads_the_counter_quanta_reads() {
        let clock = quanta::Clock::new();
        let Some(tsc) = Tsc::of(&clock) else {
            return;
        };
        let before = tsc.ticks();
        let theirs = clock.raw();
        let after = tsc.ticks();
        assert!(
            before <= theirs && theirs <= after,
            "{before} <= {theirs} <= {after}"
        );
    }
}
