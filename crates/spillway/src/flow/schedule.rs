//! The pacing schedule shared by the leaky-bucket controllers.

use super::Decision;
use crate::sync::{AtomicU64, Ordering};
use std::time::Duration;

/// No call has passed yet.
const NEVER: u64 = u64::MAX;

/// The time of the last reserved slot, moved by compare-and-swap.
#[derive(Debug)]
pub(crate) struct Schedule {
    max_queueing_nanos: u64,
    latest: AtomicU64,
}

/// A slot reserved in a pacing schedule ([`Throttle::reserve`](super::Throttle::reserve),
/// [`WarmUpThrottle::reserve`](super::WarmUpThrottle::reserve)), to give back with the
/// controller's `give_back` if its caller will not go. It remembers what the schedule held
/// before, so that it can be given back while it is still the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Slot {
    pub(crate) previous: u64,
    pub(crate) at: u64,
}

impl Schedule {
    pub(crate) fn new(max_queueing_time: Duration) -> Self {
        Self {
            max_queueing_nanos: u64::try_from(max_queueing_time.as_nanos()).unwrap_or(u64::MAX),
            latest: AtomicU64::new(NEVER),
        }
    }

    /// Sentinel's pacing step for a call costing `cost` ns at `now`: pass at once (restarting the
    /// schedule from now) if the last slot plus the cost is past, else queue behind it unless the
    /// wait would exceed the max queueing time. The first call always passes.
    pub(crate) fn reserve(&self, now: u64, cost: u64) -> (Decision, Option<Slot>) {
        let mut latest = self.latest.load(Ordering::Acquire);
        loop {
            let expected = if latest == NEVER {
                0
            } else {
                latest.saturating_add(cost)
            };
            let (next, decision) = if expected <= now {
                (now, Decision::Pass)
            } else {
                let wait = expected - now;
                if wait > self.max_queueing_nanos {
                    return (Decision::Block, None);
                }
                (expected, Decision::Wait(Duration::from_nanos(wait)))
            };
            // AcqRel: the schedule guards no other data; the CAS is what orders callers.
            match self.latest.compare_exchange_weak(
                latest,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let slot = Slot {
                        previous: latest,
                        at: next,
                    };
                    return (decision, Some(slot));
                }
                Err(actual) => latest = actual,
            }
        }
    }

    /// How long a call arriving at `now` would wait behind the slots already reserved, before
    /// its own cost (zero when none is pending).
    pub(crate) fn backlog(&self, now: u64) -> Duration {
        match self.latest.load(Ordering::Acquire) {
            NEVER => Duration::ZERO,
            latest => Duration::from_nanos(latest.saturating_sub(now)),
        }
    }

    /// Gives `slot` back if it is still the last one. Returns whether it was.
    pub(crate) fn cancel(&self, slot: Slot) -> bool {
        self.latest
            .compare_exchange(slot.at, slot.previous, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}
