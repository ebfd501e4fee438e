use super::{Clock, SystemClock};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The default tick of a [`CoarseClock`]: Sentinel's `TimeUtil` ticks every millisecond too.
pub const DEFAULT_COARSE_TICK: Duration = Duration::from_millis(1);

/// A clock that a background thread sets from [`SystemClock`] once per tick, so that reading it
/// is one load from memory: for entry paths where the clock read is the largest cost.
///
/// Its reads are as precise as its tick (default 1 ms, what Sentinel's clock gives):
///
/// - sliding windows (500 ms buckets) lose nothing that matters: an entry is filed at most one
///   tick late;
/// - response times are whole ticks, so a call shorter than a tick reads 0 or 1 tick. Over many
///   calls the average is still right (a call's start falls anywhere within a tick), but min RT
///   (the system rule's BBR estimate, a breaker's slow-call threshold) is only as fine as the
///   tick;
/// - pacing rules (throttle, warm-up throttle) space calls in whole ticks: choose a tick well
///   under `1 / count` for them, or keep [`SystemClock`].
///
/// The thread sleeps between ticks (about a thousand short wake-ups a second at the default) and
/// ends when the last clone of the clock is dropped. If the thread cannot be started, the clock
/// reads [`SystemClock`] on every call instead, which is always correct.
///
/// # Examples
///
/// ```
/// use spillway::{Clock, CoarseClock, Spillway};
/// use std::time::Duration;
///
/// let clock = CoarseClock::new();
/// assert_eq!(clock.tick(), Duration::from_millis(1));
/// let a = clock.now_nanos();
/// assert!(clock.now_nanos() >= a);
///
/// // An instance whose entries read the coarse clock.
/// let spillway = Spillway::new_with_clock(clock);
/// drop(spillway.entry("orders").enter());
/// ```
#[derive(Clone)]
pub struct CoarseClock {
    shared: Arc<Shared>,
}

struct Shared {
    /// The time, or [`NOT_TICKING`] if the ticking thread could not be started (every read then
    /// goes to `precise`): one load tells both.
    nanos: CachePadded<AtomicU64>,
    precise: SystemClock,
    tick: Duration,
}

/// `nanos` of a clock whose thread could not be started (584 years of uptime: never a time).
const NOT_TICKING: u64 = u64::MAX;

impl CoarseClock {
    /// A clock ticking every [`DEFAULT_COARSE_TICK`] (1 ms).
    pub fn new() -> Self {
        Self::with_tick(DEFAULT_COARSE_TICK)
    }

    /// A clock ticking every `tick`, at least 1 µs (a shorter tick is raised to 1 µs).
    pub fn with_tick(tick: Duration) -> Self {
        let tick = tick.max(Duration::from_micros(1));
        let precise = SystemClock::new();
        let shared = Arc::new(Shared {
            nanos: CachePadded::new(AtomicU64::new(precise.now_nanos())),
            precise,
            tick,
        });
        let weak = Arc::downgrade(&shared);
        let started = std::thread::Builder::new()
            .name("spillway-coarse-clock".into())
            .spawn(move || run(&weak, tick));
        if started.is_err() {
            shared.nanos.store(NOT_TICKING, Ordering::Relaxed);
        }
        Self { shared }
    }

    /// How often the time is set.
    pub fn tick(&self) -> Duration {
        self.shared.tick
    }
}

/// Sets the time once per tick until the clock is gone.
fn run(shared: &Weak<Shared>, tick: Duration) {
    loop {
        std::thread::sleep(tick);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        // One writer, from a monotonic clock: the stored time only moves forward.
        let now = shared.precise.now_nanos();
        shared.nanos.fetch_max(now, Ordering::Relaxed);
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for CoarseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoarseClock")
            .field("tick", &self.shared.tick)
            .finish_non_exhaustive()
    }
}

impl CoarseClock {
    /// The time, if the ticker is running (otherwise reading it takes the precise clock).
    #[inline(always)]
    pub(crate) fn ticked_nanos(&self) -> Option<u64> {
        let nanos = self.shared.nanos.load(Ordering::Relaxed);
        (nanos != NOT_TICKING).then_some(nanos)
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // Relaxed: the time is a value on its own; nothing else is published with it.
        let nanos = self.shared.nanos.load(Ordering::Relaxed);
        if nanos != NOT_TICKING {
            nanos
        } else {
            self.shared.precise.now_nanos()
        }
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;

    #[test]
    fn reads_are_monotonic_and_start_near_the_precise_clock() {
        let clock = CoarseClock::with_tick(Duration::from_secs(3600));
        let first = clock.now_nanos();
        // With an hour's tick nothing moves it during the test: reads are equal, and equal to
        // the precise time taken when the clock was made (its origin is the precise clock's).
        assert_eq!(clock.now_nanos(), first);
        assert!(first <= clock.shared.precise.now_nanos());
        assert_eq!(clock.tick(), Duration::from_secs(3600));
    }

    #[test]
    fn a_tick_below_a_microsecond_is_raised() {
        assert_eq!(
            CoarseClock::with_tick(Duration::ZERO).tick(),
            Duration::from_micros(1)
        );
    }

    #[test]
    fn the_state_goes_with_the_last_clone() {
        // The thread holds only a weak reference while it sleeps (an hour here), so dropping
        // the last clone frees the state at once; the thread ends at its next tick.
        let clock = CoarseClock::with_tick(Duration::from_secs(3600));
        let weak = Arc::downgrade(&clock.shared);
        let clone = clock.clone();
        drop(clock);
        assert!(weak.upgrade().is_some());
        drop(clone);
        assert!(weak.upgrade().is_none());
    }
}
