//! A named resource and its statistics.

use crate::block::BlockError;
use crate::bounded_map::BoundedMap;
use crate::clock::Clock;
use crate::core::Core;
use crate::entry::EntryBuilder;
use crate::stats::{NodeStats, ResourceNode, StripedCounter};
use std::fmt;
use std::sync::Arc;

/// Name of the node that collects the statistics of origins past a resource's origin cap.
pub const OVERFLOW_ORIGIN: &str = "__overflow__";

/// A resource: something spillway counts and protects (an endpoint, a method, a downstream).
///
/// A pre-resolved handle: entries made through it skip the registry's name lookup. Clones are
/// cheap and share the resource.
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, Spillway};
///
/// let clock = ManualClock::starting_at_millis(1_700_000_000_000);
/// let spillway = Spillway::new_with_clock(clock.clone());
/// let orders = spillway.resource("GET /orders").unwrap();
/// {
///     let _entry = orders.entry().origin("web").enter().unwrap();
///     clock.advance_millis(3);
/// } // the entry completes here: RT 3 ms
/// let stats = orders.stats();
/// assert_eq!(stats.pass_qps, 1.0);
/// assert_eq!(stats.avg_rt_micros, 3_000.0);
/// assert_eq!(orders.origin_stats("web").unwrap().total_pass, 1);
/// ```
#[derive(Clone)]
pub struct Resource {
    pub(crate) inner: Arc<ResourceInner>,
}

pub(crate) struct ResourceInner {
    pub(crate) name: Arc<str>,
    pub(crate) node: ResourceNode,
    pub(crate) origins: BoundedMap<ResourceNode>,
    pub(crate) origin_overflow: ResourceNode,
    pub(crate) origin_overflows: StripedCounter,
    pub(crate) core: Arc<Core>,
}

impl Resource {
    pub(crate) fn new(name: Arc<str>, core: Arc<Core>) -> Self {
        let config = core.node_config;
        Self {
            inner: Arc::new(ResourceInner {
                name,
                node: ResourceNode::new(config),
                origins: BoundedMap::new(core.max_origins),
                origin_overflow: ResourceNode::new(config),
                origin_overflows: StripedCounter::new(),
                core,
            }),
        }
    }

    /// The resource's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Starts building an entry into this resource.
    pub fn entry(&self) -> EntryBuilder<'_> {
        EntryBuilder::for_resource(self)
    }

    /// The resource's live statistics node.
    pub fn node(&self) -> &ResourceNode {
        &self.inner.node
    }

    /// Every statistic of the resource, read now.
    pub fn stats(&self) -> NodeStats {
        self.inner.node.stats(self.inner.core.clock.now_nanos())
    }

    /// Statistics of one origin, if entries came from it (origins past the cap are gathered
    /// under [`OVERFLOW_ORIGIN`]).
    pub fn origin_stats(&self, origin: &str) -> Option<NodeStats> {
        let now = self.inner.core.clock.now_nanos();
        if origin == OVERFLOW_ORIGIN {
            return Some(self.inner.origin_overflow.stats(now));
        }
        self.inner
            .origins
            .get(origin)
            .map(|(_, node)| node.stats(now))
    }

    /// Entries whose origin was not tracked on its own because the origin cap was reached.
    pub fn origin_overflows(&self) -> u64 {
        self.inner.origin_overflows.sum()
    }
}

/// Where an entry's origin statistics go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OriginSlot {
    /// No origin given.
    None,
    /// A tracked origin, by position in the resource's origin map.
    At(usize),
    /// Past the origin cap.
    Overflow,
}

impl ResourceInner {
    /// The slot of `origin`, created on first use; past the cap, the overflow node (counted).
    #[inline]
    pub(crate) fn origin_slot(&self, origin: &str) -> OriginSlot {
        if let Some(position) = self.origins.position(origin) {
            return OriginSlot::At(position);
        }
        let config = self.core.node_config;
        match self
            .origins
            .position_or_insert_with(origin, |_| ResourceNode::new(config))
        {
            Ok(position) => OriginSlot::At(position),
            Err(_) => {
                self.origin_overflows.increment();
                OriginSlot::Overflow
            }
        }
    }

    #[inline]
    pub(crate) fn origin_node(&self, slot: OriginSlot) -> Option<&ResourceNode> {
        match slot {
            OriginSlot::None => None,
            OriginSlot::At(position) => Some(&self.origins.at(position).1),
            OriginSlot::Overflow => Some(&self.origin_overflow),
        }
    }
}

impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resource")
            .field("name", &self.inner.name)
            .field("origins", &self.inner.origins.len())
            .finish_non_exhaustive()
    }
}

/// A handle is never refused once resolved; this alias documents what resolving can return.
pub(crate) type Resolved<'a> = Result<&'a Resource, BlockError>;
