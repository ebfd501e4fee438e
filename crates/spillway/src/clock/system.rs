use super::tsc::Tsc;
use super::Clock;
use std::fmt;
use std::time::Instant;

/// The production clock: the CPU's time-stamp counter, calibrated to nanoseconds.
///
/// Built on [`quanta`], which uses the TSC only when the CPU reports it constant and non-stop
/// (invariant) and otherwise falls back to the OS monotonic clock, so it is safe on machines and
/// VMs whose TSC drifts. When `quanta` chose the TSC, this clock reads it inline (`quanta`'s own
/// reads are calls the compiler cannot inline) and scales it with `quanta`'s calibration: a TSC
/// read, a multiply and a shift. Measured on the 2-core AMD EPYC VM this crate is developed on
/// (release build, 20 million reads): about 9.5 ns per read, the `RDTSC` instruction's own
/// throughput there, against about 23 ns for [`std::time::Instant::now`].
///
/// The TSC is synchronised across cores on every CPU that reports it invariant; if a machine
/// still shows small cross-core skew, spillway's statistics tolerate it (see [`Clock`]).
///
/// # Examples
///
/// ```
/// use spillway::{Clock, SystemClock};
///
/// let clock = SystemClock::new();
/// let a = clock.now_nanos();
/// let b = clock.now_nanos();
/// assert!(b >= a);
/// ```
#[derive(Clone)]
pub struct SystemClock {
    /// The TSC, read inline, when `quanta` chose it.
    tsc: Option<Tsc>,
    inner: quanta::Clock,
    origin: u64,
    /// What it reads at its origin: 0, or the Unix time then ([`SystemClock::unix`]).
    offset: u64,
}

impl SystemClock {
    /// A clock whose origin is now. The first one created in a process calibrates the TSC
    /// against the OS clock (a few milliseconds); later ones reuse the calibration.
    pub fn new() -> Self {
        let inner = quanta::Clock::new();
        let tsc = Tsc::of(&inner);
        let origin = match tsc {
            Some(tsc) => tsc.ticks(),
            None => inner.raw(),
        };
        Self {
            tsc,
            inner,
            origin,
            offset: 0,
        }
    }

    /// A clock that reads nanoseconds since the Unix epoch: the wall clock when it is made,
    /// advanced by the same counter as [`SystemClock::new`]'s (so it never steps with the wall
    /// clock afterwards). Windows then start on the wall clock's whole seconds, as Sentinel's
    /// do (it reads `System.currentTimeMillis()`), and a log stamped with the wall clock is cut
    /// into the same windows when replayed.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::{Clock, SystemClock};
    ///
    /// let clock = SystemClock::unix();
    /// // Past 2020-01-01.
    /// assert!(clock.now_millis() > 1_577_836_800_000);
    /// ```
    pub fn unix() -> Self {
        #[allow(clippy::disallowed_methods)] // its origin is the wall clock's now, once
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
            });
        Self {
            offset: wall,
            ..Self::new()
        }
    }

    /// The inline counter this clock reads, if it reads one.
    pub(super) fn tsc(&self) -> Option<Tsc> {
        self.tsc
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SystemClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemClock").finish_non_exhaustive()
    }
}

impl SystemClock {
    /// The time, if this clock reads the TSC inline (otherwise reading it calls into `quanta`).
    #[inline(always)]
    pub(crate) fn inline_nanos(&self) -> Option<u64> {
        self.tsc.map(|tsc| {
            (tsc.nanos(tsc.ticks().saturating_sub(self.origin))).saturating_add(self.offset)
        })
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // Both saturate at the origin if a core's counter reads behind it.
        let since = match self.tsc {
            Some(tsc) => tsc.nanos(tsc.ticks().saturating_sub(self.origin)),
            None => self.inner.delta_as_nanos(self.origin, self.inner.raw()),
        };
        since.saturating_add(self.offset)
    }
}

/// A clock over [`std::time::Instant`]: the OS monotonic clock, guaranteed monotonic by the
/// platform, at a higher cost per read than [`SystemClock`].
///
/// # Examples
///
/// ```
/// use spillway::{Clock, StdClock};
///
/// let clock = StdClock::new();
/// assert!(clock.now_nanos() < 1_000_000_000_000);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct StdClock {
    origin: Instant,
}

impl StdClock {
    /// A clock whose origin is now.
    #[allow(clippy::disallowed_methods)] // this is the one place that reads the OS clock
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for StdClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // u64 nanoseconds last 584 years from the origin.
        self.origin.elapsed().as_nanos() as u64
    }
}
