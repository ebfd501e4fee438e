//! A named resource and its statistics.

mod children;

pub use children::OVERFLOW_ORIGIN;
pub(crate) use children::{ChildNodes, ChildSlot};

use crate::block::BlockError;
use crate::clock::{AnyClock, Clock};
use crate::core::Core;
use crate::flow::InstalledRules;
use crate::kinds::Slots;
use crate::stats::{NodeStats, ResourceNode, WindowSnapshot};
use std::fmt;
use std::sync::Arc;

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
    /// The same name's interned number (see `intern`), for blocks.
    pub(crate) name_number: u32,
    pub(crate) node: ResourceNode,
    pub(crate) origins: ChildNodes,
    pub(crate) entrances: ChildNodes,
    /// This resource's flow rules and their fast state.
    pub(crate) flow: InstalledRules,
    /// This resource's rules of the kinds checked after its flow rules (breakers, adaptive,
    /// cluster, per-key), with a flag per kind.
    pub(crate) slots: Slots,
    /// The instance's clock, a copy of `core.clock` (reading the same time): entries read it
    /// one load closer than through `core`.
    pub(crate) clock: AnyClock,
    pub(crate) core: Arc<Core>,
}

impl ResourceInner {
    /// Where the later kinds' steps of an entry (`inbound` or not) find their rules.
    #[inline(always)]
    pub(crate) fn reach(&self, inbound: bool) -> crate::kinds::Reach<'_> {
        crate::kinds::Reach {
            resource: &self.slots,
            inbound: inbound.then_some(&self.core.inbound_rules),
        }
    }
}

impl crate::flow::RelatedNode for ResourceInner {
    fn node(&self) -> &ResourceNode {
        &self.node
    }
}

impl Resource {
    pub(crate) fn new(name: Arc<str>, core: Arc<Core>) -> Self {
        let config = core.node_config;
        let flow = core.flow.load().by_resource.get(&*name).cloned();
        let slots = Slots::new(&core.sets, &name);
        let resource = Self {
            inner: Arc::new(ResourceInner {
                name_number: crate::intern::intern_numbered(&name).number,
                name,
                node: ResourceNode::new(config),
                origins: ChildNodes::new(core.max_origins, config),
                entrances: ChildNodes::new(core.max_origins, config),
                flow: InstalledRules::new(),
                slots,
                clock: core.clock.clone(),
                core,
            }),
        };
        resource.inner.flow.install(flow);
        resource
    }

    /// The resource's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The resource's live statistics node.
    pub fn node(&self) -> &ResourceNode {
        &self.inner.node
    }

    /// Every statistic of the resource, read now.
    pub fn stats(&self) -> NodeStats {
        self.inner.node.stats(self.inner.clock.now_nanos())
    }

    /// The last complete second, as the minute window counted it: exact per-second counts for a
    /// table or a log line. ([`stats`](Self::stats)' `pass_qps` reads the sliding second window,
    /// which just after a bucket starts covers little more than half a second.)
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// let orders = spillway.resource("orders")?;
    /// for _ in 0..3 {
    ///     drop(orders.entry().enter()?);
    /// }
    /// clock.advance_millis(1_000);
    /// assert_eq!(orders.last_second().pass, 3);
    /// # Ok::<(), spillway::BlockError>(())
    /// ```
    pub fn last_second(&self) -> WindowSnapshot {
        self.inner
            .node
            .previous_second(self.inner.clock.now_nanos())
    }

    /// Statistics of one origin, if entries came from it (origins past the cap are gathered
    /// under [`OVERFLOW_ORIGIN`]).
    pub fn origin_stats(&self, origin: &str) -> Option<NodeStats> {
        self.inner
            .origins
            .stats(origin, self.inner.clock.now_nanos())
    }

    /// Statistics of the entries that came through one entrance (see
    /// [`EntryBuilder::entrance`](crate::EntryBuilder::entrance)).
    pub fn entrance_stats(&self, entrance: &str) -> Option<NodeStats> {
        self.inner
            .entrances
            .stats(entrance, self.inner.clock.now_nanos())
    }

    /// Counts `count` calls refused by a check outside spillway (a limit in front of it, such as
    /// a Dubbo limit in a proxy), so that the resource's block statistics include them.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// let orders = spillway.resource("orders")?;
    /// orders.record_block(2);
    /// assert_eq!(orders.stats().block_qps, 2.0);
    /// # Ok::<(), spillway::BlockError>(())
    /// ```
    pub fn record_block(&self, count: u32) {
        let now = self.inner.clock.now_nanos();
        self.inner.node.add_block(now, u64::from(count));
    }

    /// Entries whose origin was not tracked on its own because the origin cap was reached.
    pub fn origin_overflows(&self) -> u64 {
        self.inner.origins.overflows()
    }
}

impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resource")
            .field("name", &self.inner.name)
            .field("origins", &self.inner.origins)
            .finish_non_exhaustive()
    }
}

/// A handle is never refused once resolved; this alias documents what resolving can return.
pub(crate) type Resolved<'a> = Result<&'a Resource, BlockError>;
