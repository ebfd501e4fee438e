use super::{Clock, CoarseClock, ManualClock, StdClock, SystemClock};
use std::sync::Arc;
use std::time::Duration;

/// The clock an instance holds. The two production clocks are variants of their own, tested by
/// a compare and a branch on the hot path; every other clock sits behind one more level
/// (an enum of four or more variants compiles to a jump table, a dependent load and an indirect
/// jump on every read).
#[derive(Debug, Clone)]
pub(crate) enum AnyClock {
    System(SystemClock),
    Coarse(CoarseClock),
    Other(OtherClock),
}

/// The clocks read off the hot path's fast branches: tests', the OS clock, and any other
/// implementation (through a vtable).
#[derive(Debug, Clone)]
pub(crate) enum OtherClock {
    Std(StdClock),
    Manual(ManualClock),
    Custom(Arc<dyn Clock>),
}

impl AnyClock {
    /// The time, read without a call (the TSC inline, the coarse clock while it ticks, or a
    /// manual clock's load), or `None` where a read would call: for paths that must stay free of
    /// calls. A `ManualClock` reads inline so that tests take those paths too.
    #[inline(always)]
    pub(crate) fn now_nanos_inline(&self) -> Option<u64> {
        match self {
            Self::System(c) => c.inline_nanos(),
            Self::Coarse(c) => c.ticked_nanos(),
            Self::Other(OtherClock::Manual(c)) => Some(c.now_nanos()),
            Self::Other(_) => None,
        }
    }

    pub(crate) fn from_clock<C: Clock>(clock: C) -> Self {
        // Recognise the built-in clocks so that the hot path does not pay for dynamic dispatch.
        let any: &dyn std::any::Any = &clock;
        if let Some(c) = any.downcast_ref::<SystemClock>() {
            return Self::System(c.clone());
        }
        if let Some(c) = any.downcast_ref::<CoarseClock>() {
            return Self::Coarse(c.clone());
        }
        if let Some(c) = any.downcast_ref::<ManualClock>() {
            return Self::Other(OtherClock::Manual(c.clone()));
        }
        if let Some(c) = any.downcast_ref::<StdClock>() {
            return Self::Other(OtherClock::Std(*c));
        }
        Self::Other(OtherClock::Custom(Arc::new(clock)))
    }
}

impl OtherClock {
    fn clock(&self) -> &dyn Clock {
        match self {
            Self::Std(c) => c,
            Self::Manual(c) => c,
            Self::Custom(c) => &**c,
        }
    }
}

impl Clock for OtherClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        match self {
            Self::Std(c) => c.now_nanos(),
            Self::Manual(c) => c.now_nanos(),
            Self::Custom(c) => c.now_nanos(),
        }
    }

    fn sleep(&self, duration: Duration) {
        self.clock().sleep(duration);
    }

    fn park_timeout(&self, timeout: Duration) {
        self.clock().park_timeout(timeout);
    }
}

impl Clock for AnyClock {
    // Always inlined: a clock read is on every entry's path twice, and a call costs more than a
    // coarse clock's one load.
    #[inline(always)]
    fn now_nanos(&self) -> u64 {
        match self {
            Self::System(c) => c.now_nanos(),
            Self::Coarse(c) => c.now_nanos(),
            Self::Other(c) => c.now_nanos(),
        }
    }

    fn sleep(&self, duration: Duration) {
        match self {
            Self::System(c) => c.sleep(duration),
            Self::Coarse(c) => c.sleep(duration),
            Self::Other(c) => c.sleep(duration),
        }
    }

    fn park_timeout(&self, timeout: Duration) {
        match self {
            Self::System(c) => c.park_timeout(timeout),
            Self::Coarse(c) => c.park_timeout(timeout),
            Self::Other(c) => c.park_timeout(timeout),
        }
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;

    #[test]
    fn inline_reads_agree_with_the_clocks_and_only_calls_are_refused() {
        let manual = AnyClock::from_clock(ManualClock::starting_at_millis(5));
        assert_eq!(manual.now_nanos_inline(), Some(5_000_000));

        // The other clocks move: an inline read falls between two ordinary ones.
        for clock in [
            AnyClock::from_clock(SystemClock::new()),
            AnyClock::from_clock(CoarseClock::new()),
        ] {
            let before = clock.now_nanos();
            if let Some(inline) = clock.now_nanos_inline() {
                assert!(before <= inline && inline <= clock.now_nanos(), "{clock:?}");
            }
        }

        assert_eq!(
            AnyClock::from_clock(StdClock::new()).now_nanos_inline(),
            None
        );
        let custom = AnyClock::from_clock(Fixed(9));
        assert_eq!((custom.now_nanos(), custom.now_nanos_inline()), (9, None));
    }

    #[derive(Debug)]
    struct Fixed(u64);

    impl Clock for Fixed {
        fn now_nanos(&self) -> u64 {
            self.0
        }

        fn sleep(&self, _: Duration) {}
    }
}
