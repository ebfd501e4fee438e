//! What every resource of one [`Spillway`](crate::Spillway) shares.

use crate::clock::AnyClock;
use crate::stats::{NodeConfig, ResourceNode};

/// Shared by a `Spillway` and each of its resources: the clock, the node shapes, the global
/// inbound node (Sentinel's `ENTRY_NODE`, for system rules) and the per-resource origin cap.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) clock: AnyClock,
    pub(crate) node_config: NodeConfig,
    pub(crate) inbound: ResourceNode,
    pub(crate) max_origins: usize,
}
