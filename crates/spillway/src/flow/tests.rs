//! Event traces of the flow controllers on a manual time line, against a real `ResourceNode`.

mod concurrency;
mod reject;
#[cfg(feature = "serde")]
mod serde;
mod state;
mod throttle;
mod validate;
mod warm_up;

use crate::stats::{NodeConfig, ResourceNode};

/// Unix-epoch milliseconds the traces start at (a whole second).
pub(super) const T0_MS: u64 = 1_700_000_000_000;

pub(super) fn at_ms(offset: u64) -> u64 {
    (T0_MS + offset) * 1_000_000
}

pub(super) fn node() -> ResourceNode {
    ResourceNode::new(NodeConfig::default())
}
