//! What a check decides: one name for the outcome of every flow check, the standalone
//! controllers' and the entry path's alike.

use std::time::Duration;

/// The outcome of a flow check: a check never sleeps, it says what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Go now.
    Pass,
    /// Go after waiting this long (a queue slot is reserved for the caller).
    Wait(Duration),
    /// Go after waiting this long, on passes borrowed from the bucket that then starts (a
    /// prioritized entry over a QPS reject rule, Sentinel's occupy: see
    /// [`QpsReject::check_prioritized`](super::QpsReject::check_prioritized)). The borrowed
    /// bucket counts the passes; the entry counts none when it goes.
    Occupied(Duration),
    /// Refused.
    Block,
}

impl Decision {
    /// Whether the caller may go, now or after a wait.
    pub fn admits(self) -> bool {
        !matches!(self, Decision::Block)
    }
}
