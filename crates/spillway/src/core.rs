//! What every resource of one [`Spillway`](crate::Spillway) shares.

use crate::breaker::Listeners;
use crate::clock::AnyClock;
use crate::flow::FlowRuleSet;
use crate::kinds::{Sets, Slots};
use crate::stats::{NodeConfig, ResourceNode};
use crate::system::{SystemProbe, SystemRules};
use arc_swap::ArcSwap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// Shared by a `Spillway` and each of its resources: the clock, the node shapes, the global
/// inbound node (Sentinel's `ENTRY_NODE`, for system rules) and the per-resource origin cap.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) clock: AnyClock,
    pub(crate) node_config: NodeConfig,
    pub(crate) inbound: ResourceNode,
    pub(crate) max_origins: usize,
    /// The flow rules as loaded.
    pub(crate) flow: ArcSwap<FlowRuleSet>,
    /// The rules of every kind checked after the flow rules, as loaded.
    pub(crate) sets: Sets,
    /// The listeners of every breaker's state changes.
    pub(crate) breaker_listeners: Arc<Listeners>,
    /// The system rules as loaded, and whether any is (checked first, with a relaxed load).
    pub(crate) system: ArcSwap<SystemRules>,
    pub(crate) has_system: AtomicBool,
    /// The rules on all inbound traffic of the kinds checked after the flow rules (the adaptive
    /// limit on all inbound traffic), kept as a resource keeps its own.
    pub(crate) inbound_rules: Slots,
    /// Where system rules read load and CPU usage.
    pub(crate) probe: Arc<dyn SystemProbe>,
    /// Held while rules are loaded and while a resource is registered, so that a new resource
    /// never misses a rule load.
    pub(crate) rules_lock: Mutex<()>,
}
