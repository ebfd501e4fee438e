//! Per-origin (or per-entrance) statistics of one resource, capped.

use crate::bounded_map::BoundedMap;
use crate::stats::{NodeConfig, NodeStats, ResourceNode, StripedCounter};
use std::fmt;
use std::sync::Arc;

/// Name of the node that collects the statistics of origins (or entrances) past the cap.
pub const OVERFLOW_ORIGIN: &str = "__overflow__";

/// Where an entry's per-origin (or per-entrance) statistics go: none, a tracked name (by position
/// in the map, plus one), or the overflow node. Four bytes, so that an entry stays small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChildSlot(u32);

impl ChildSlot {
    /// None given.
    pub(crate) const NONE: ChildSlot = ChildSlot(0);
    /// Past the cap.
    const OVERFLOW: ChildSlot = ChildSlot(u32::MAX);

    /// Whether neither slot names a node: one test, where two matches would take four.
    #[inline(always)]
    pub(crate) fn both_none(a: ChildSlot, b: ChildSlot) -> bool {
        a.0 | b.0 == ChildSlot::NONE.0
    }

    fn at(position: usize) -> Self {
        // Positions stay below the cap, which `ChildNodes::new` keeps below u32::MAX - 1.
        ChildSlot(position as u32 + 1)
    }
}

/// Named child nodes of a resource, at most `cap` of them; later names share an overflow node,
/// and every entry that lands there is counted.
pub(crate) struct ChildNodes {
    map: BoundedMap<ResourceNode>,
    overflow: ResourceNode,
    overflows: StripedCounter,
    config: NodeConfig,
}

impl ChildNodes {
    pub(crate) fn new(cap: usize, config: NodeConfig) -> Self {
        Self {
            map: BoundedMap::new(cap.min(u32::MAX as usize - 2)),
            overflow: ResourceNode::new(config),
            overflows: StripedCounter::new(),
            config,
        }
    }

    /// The slot of `name`, created on first use; past the cap, its own if `named(name)` (a
    /// rule names it: it must have its own node whatever the flood of others, and rules bound
    /// how many such there are), else the overflow node (counted).
    #[inline]
    pub(crate) fn slot(&self, name: &str, named: impl FnOnce(&str) -> bool) -> ChildSlot {
        if let Some(position) = self.map.position(name) {
            return ChildSlot::at(position);
        }
        let config = self.config;
        match self
            .map
            .position_or_insert_with(name, |_| ResourceNode::new(config))
        {
            Ok(position) => ChildSlot::at(position),
            Err(_) if named(name) => ChildSlot::at(
                self.map
                    .position_or_insert_beyond_capacity(name, |_| ResourceNode::new(config)),
            ),
            Err(_) => {
                self.overflows.increment();
                ChildSlot::OVERFLOW
            }
        }
    }

    #[inline]
    pub(crate) fn node(&self, slot: ChildSlot) -> Option<&ResourceNode> {
        match slot {
            ChildSlot::NONE => None,
            ChildSlot::OVERFLOW => Some(&self.overflow),
            ChildSlot(position) => Some(&self.map.at(position as usize - 1).1),
        }
    }

    /// Statistics of `name` (or of the overflow node, by [`OVERFLOW_ORIGIN`]).
    pub(crate) fn stats(&self, name: &str, now: u64) -> Option<NodeStats> {
        if name == OVERFLOW_ORIGIN {
            return Some(self.overflow.stats(now));
        }
        self.map.get(name).map(|(_, node)| node.stats(now))
    }

    /// Entries that landed in the overflow node.
    pub(crate) fn overflows(&self) -> u64 {
        self.overflows.sum()
    }

    /// Every child's statistics, in first-seen order, the overflow node last if used.
    pub(crate) fn snapshot(&self, now: u64) -> Vec<(Arc<str>, NodeStats)> {
        let mut all: Vec<_> = self
            .map
            .iter()
            .map(|(name, node)| (name.clone(), node.stats(now)))
            .collect();
        if self.overflows() > 0 {
            all.push((Arc::from(OVERFLOW_ORIGIN), self.overflow.stats(now)));
        }
        all
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

impl fmt::Debug for ChildNodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildNodes")
            .field("len", &self.len())
            .field("overflows", &self.overflows())
            .finish()
    }
}
