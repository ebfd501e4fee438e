//! Building a [`Spillway`]: its clock, caps, windows and system probe.

use super::{Inner, Spillway, DEFAULT_MAX_ORIGINS};
use crate::clock::{AnyClock, Clock, SystemClock};
use crate::core::Core;
use crate::flow::FlowRuleSet;
use crate::kinds::Slots;
use crate::registry::{OverflowPolicy, Registry, DEFAULT_MAX_RESOURCES};
use crate::stats::{NodeConfig, ResourceNode};
use crate::system::{LinuxProbe, SystemProbe, SystemRules};
use arc_swap::ArcSwap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// Builds a [`Spillway`].
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, OverflowPolicy, Spillway};
/// use spillway::stats::{NodeConfig, WindowConfig};
/// use std::time::Duration;
///
/// let spillway = Spillway::builder()
///     .clock(ManualClock::new())
///     .max_resources(100)
///     .overflow_policy(OverflowPolicy::Reject)
///     .max_origins_per_resource(16)
///     .node_config(NodeConfig::default().with_second_window(
///         WindowConfig::new(10, Duration::from_secs(1)).unwrap(),
///     ))
///     .build();
/// assert_eq!(spillway.resource_count(), 0);
/// ```
#[derive(Debug)]
pub struct SpillwayBuilder {
    clock: Option<AnyClock>,
    max_resources: usize,
    overflow_policy: OverflowPolicy,
    max_origins: usize,
    node_config: NodeConfig,
    probe: Option<Arc<dyn SystemProbe>>,
}

impl Default for SpillwayBuilder {
    fn default() -> Self {
        Self {
            clock: None,
            max_resources: DEFAULT_MAX_RESOURCES,
            overflow_policy: OverflowPolicy::default(),
            max_origins: DEFAULT_MAX_ORIGINS,
            node_config: NodeConfig::default(),
            probe: None,
        }
    }
}

impl SpillwayBuilder {
    /// The clock (default: a new [`SystemClock`]).
    pub fn clock<C: Clock>(mut self, clock: C) -> Self {
        self.clock = Some(AnyClock::from_clock(clock));
        self
    }

    /// Most resources to register (default 6000, Sentinel's cap).
    pub fn max_resources(mut self, max: usize) -> Self {
        self.max_resources = max;
        self
    }

    /// What to do with entries for new names past the cap (default: count them under the
    /// shared overflow resource).
    pub fn overflow_policy(mut self, policy: OverflowPolicy) -> Self {
        self.overflow_policy = policy;
        self
    }

    /// Most origins tracked per resource (default 1024); later ones share an overflow node.
    pub fn max_origins_per_resource(mut self, max: usize) -> Self {
        self.max_origins = max;
        self
    }

    /// The windows every node keeps (default: Sentinel's 2 x 500 ms and 60 x 1 s).
    pub fn node_config(mut self, config: NodeConfig) -> Self {
        self.node_config = config;
        self
    }

    /// Where system rules read load and CPU usage (default: [`LinuxProbe::global`], sampled once a
    /// second by a thread started on the first read). Tests give a
    /// [`ManualProbe`](crate::system::ManualProbe).
    pub fn system_probe<P: SystemProbe>(mut self, probe: P) -> Self {
        self.probe = Some(Arc::new(probe));
        self
    }

    /// Builds the spillway.
    pub fn build(self) -> Spillway {
        let clock = self
            .clock
            .unwrap_or_else(|| AnyClock::from_clock(SystemClock::new()));
        let core = Arc::new(Core {
            clock,
            node_config: self.node_config,
            inbound: ResourceNode::new(self.node_config),
            max_origins: self.max_origins,
            flow: ArcSwap::from_pointee(FlowRuleSet::default()),
            sets: crate::kinds::Sets::default(),
            breaker_listeners: Arc::default(),
            system: ArcSwap::from_pointee(SystemRules::default()),
            has_system: AtomicBool::new(false),
            inbound_rules: Slots::default(),
            probe: self
                .probe
                .unwrap_or_else(|| Arc::new(LinuxProbe::global().clone())),
            rules_lock: Mutex::new(()),
        });
        let registry = Registry::new(core.clone(), self.max_resources, self.overflow_policy);
        Spillway {
            inner: Arc::new(Inner { core, registry }),
        }
    }
}
