use super::{Clock, CoarseClock, ManualClock, StdClock, SystemClock};
use std::sync::Arc;

/// The clock an instance holds: the built-in ones are matched (and inlined) on the hot path, any
/// other implementation goes through a vtable.
#[derive(Debug, Clone)]
pub(crate) enum AnyClock {
    System(SystemClock),
    Coarse(CoarseClock),
    Std(StdClock),
    Manual(ManualClock),
    Custom(Arc<dyn Clock>),
}

impl AnyClock {
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
            return Self::Manual(c.clone());
        }
        if let Some(c) = any.downcast_ref::<StdClock>() {
            return Self::Std(*c);
        }
        Self::Custom(Arc::new(clock))
    }
}

impl Clock for AnyClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // The production clock first, on a branch of its own: a match compiles to a jump table,
        // one more dependent load on every read.
        if let Self::System(c) = self {
            return c.now_nanos();
        }
        match self {
            Self::System(c) => c.now_nanos(),
            Self::Coarse(c) => c.now_nanos(),
            Self::Std(c) => c.now_nanos(),
            Self::Manual(c) => c.now_nanos(),
            Self::Custom(c) => c.now_nanos(),
        }
    }

    fn sleep(&self, duration: std::time::Duration) {
        match self {
            Self::System(c) => c.sleep(duration),
            Self::Coarse(c) => c.sleep(duration),
            Self::Std(c) => c.sleep(duration),
            Self::Manual(c) => c.sleep(duration),
            Self::Custom(c) => c.sleep(duration),
        }
    }

    fn park_timeout(&self, timeout: std::time::Duration) {
        match self {
            Self::System(c) => c.park_timeout(timeout),
            Self::Coarse(c) => c.park_timeout(timeout),
            Self::Std(c) => c.park_timeout(timeout),
            Self::Manual(c) => c.park_timeout(timeout),
            Self::Custom(c) => c.park_timeout(timeout),
        }
    }
}
