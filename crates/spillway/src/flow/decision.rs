//! What a check decides.

use std::time::Duration;

/// The outcome of a flow check: a check never sleeps, it says what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Go now.
    Pass,
    /// Go after waiting this long (a queue slot is reserved for the caller).
    Wait(Duration),
    /// Refused.
    Block,
}

impl Decision {
    /// Whether the caller may go, now or after a wait.
    pub fn admits(self) -> bool {
        !matches!(self, Decision::Block)
    }
}
