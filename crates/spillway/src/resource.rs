//! A named resource and its statistics.

mod children;

pub use children::OVERFLOW_ORIGIN;
pub(crate) use children::{ChildNodes, ChildSlot};

use crate::adaptive::InstalledAdaptive;
use crate::block::BlockError;
use crate::breaker::ResourceBreakers;
use crate::clock::{AnyClock, Clock};
use crate::cluster::ResourceCluster;
use crate::core::Core;
use crate::flow::InstalledRules;
use crate::stats::{NodeStats, ResourceNode, WindowSnapshot};
use arc_swap::ArcSwapOption;
use std::fmt;
use std::sync::atomic::AtomicU8;
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
    /// This resource's circuit breakers, swapped whole when breaker rules are loaded.
    pub(crate) breakers: ArcSwapOption<ResourceBreakers>,
    /// Which checks after the flow rules this resource has (`LATER_*` bits): one load tells an
    /// entry whether it may skip them all.
    pub(crate) later: AtomicU8,
    /// This resource's adaptive limit, swapped whole when adaptive rules are loaded.
    pub(crate) adaptive: ArcSwapOption<InstalledAdaptive>,
    /// This resource's cluster rules, swapped whole when cluster rules are loaded.
    pub(crate) cluster: ArcSwapOption<ResourceCluster>,
    /// This resource's per-key rules, swapped whole when per-key rules are loaded.
    pub(crate) keyed: ArcSwapOption<crate::keyed::ResourceKeyed>,
    /// The instance's clock, a copy of `core.clock` (reading the same time): entries read it
    /// one load closer than through `core`.
    pub(crate) clock: AnyClock,
    pub(crate) core: Arc<Core>,
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
        let breakers = core.breakers.load().by_resource.get(&*name).cloned();
        let adaptive = core.adaptive.load().by_resource.get(&*name).cloned();
        let cluster = core.cluster.load().by_resource.get(&*name).cloned();
        let keyed = core.keyed.load().by_resource.get(&*name).cloned();
        let resource = Self {
            inner: Arc::new(ResourceInner {
                name_number: crate::intern::intern_numbered(&name).number,
                name,
                node: ResourceNode::new(config),
                origins: ChildNodes::new(core.max_origins, config),
                entrances: ChildNodes::new(core.max_origins, config),
                flow: InstalledRules::new(),
                later: AtomicU8::new(
                    if adaptive.is_some() {
                        LATER_ADAPTIVE
                    } else {
                        0
                    } | if breakers.is_some() {
                        LATER_BREAKERS
                    } else {
                        0
                    } | if cluster.is_some() { LATER_CLUSTER } else { 0 }
                        | if keyed.is_some() { LATER_KEYED } else { 0 },
                ),
                adaptive: ArcSwapOption::new(adaptive),
                cluster: ArcSwapOption::new(cluster),
                keyed: ArcSwapOption::new(keyed),
                breakers: ArcSwapOption::new(breakers),
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

/// The resource has circuit breakers.
pub(crate) const LATER_BREAKERS: u8 = 1;
/// The resource has an adaptive limit.
pub(crate) const LATER_ADAPTIVE: u8 = 2;
/// The resource has cluster rules.
pub(crate) const LATER_CLUSTER: u8 = 4;
/// The resource has per-key rules.
pub(crate) const LATER_KEYED: u8 = 8;

impl ResourceInner {
    /// Whether the resource has breakers. Relaxed, as every rule flag: a stale answer only
    /// delays seeing a load by a moment.
    #[inline(always)]
    pub(crate) fn has_breakers(&self) -> bool {
        self.later.load(std::sync::atomic::Ordering::Relaxed) & LATER_BREAKERS != 0
    }

    /// Whether the resource has an adaptive limit (relaxed, likewise).
    #[inline(always)]
    pub(crate) fn has_adaptive(&self) -> bool {
        self.later.load(std::sync::atomic::Ordering::Relaxed) & LATER_ADAPTIVE != 0
    }

    /// Whether the resource has cluster rules (relaxed, likewise).
    #[inline(always)]
    pub(crate) fn has_cluster(&self) -> bool {
        self.later.load(std::sync::atomic::Ordering::Relaxed) & LATER_CLUSTER != 0
    }

    /// Whether the resource has per-key rules (relaxed, likewise).
    #[inline(always)]
    pub(crate) fn has_keyed(&self) -> bool {
        self.later.load(std::sync::atomic::Ordering::Relaxed) & LATER_KEYED != 0
    }

    /// Whether the resource has any check after its flow rules (relaxed, likewise).
    #[inline(always)]
    pub(crate) fn has_later_checks(&self) -> bool {
        self.later.load(std::sync::atomic::Ordering::Relaxed) != 0
    }
}

impl ResourceInner {
    /// Installs this resource's breakers (under the core's rules lock), flag ordered as in
    /// [`InstalledRules::install`].
    pub(crate) fn set_breakers(&self, breakers: Option<Arc<ResourceBreakers>>) {
        use std::sync::atomic::Ordering;
        if breakers.is_some() {
            self.breakers.store(breakers);
            self.later.fetch_or(LATER_BREAKERS, Ordering::Release);
        } else {
            self.later.fetch_and(!LATER_BREAKERS, Ordering::Release);
            self.breakers.store(None);
        }
    }

    /// Installs this resource's cluster rules (under the core's rules lock), flag ordered as in
    /// [`set_breakers`](Self::set_breakers).
    pub(crate) fn set_cluster(&self, cluster: Option<Arc<ResourceCluster>>) {
        use std::sync::atomic::Ordering;
        if cluster.is_some() {
            self.cluster.store(cluster);
            self.later.fetch_or(LATER_CLUSTER, Ordering::Release);
        } else {
            self.later.fetch_and(!LATER_CLUSTER, Ordering::Release);
            self.cluster.store(None);
        }
    }

    /// Installs this resource's per-key rules (under the core's rules lock), flag ordered as in
    /// [`set_breakers`](Self::set_breakers).
    pub(crate) fn set_keyed(&self, keyed: Option<Arc<crate::keyed::ResourceKeyed>>) {
        use std::sync::atomic::Ordering;
        if keyed.is_some() {
            self.keyed.store(keyed);
            self.later.fetch_or(LATER_KEYED, Ordering::Release);
        } else {
            self.later.fetch_and(!LATER_KEYED, Ordering::Release);
            self.keyed.store(None);
        }
    }

    /// Installs this resource's adaptive limit (under the core's rules lock), flag ordered as
    /// in [`set_breakers`](Self::set_breakers).
    pub(crate) fn set_adaptive(&self, adaptive: Option<Arc<InstalledAdaptive>>) {
        use std::sync::atomic::Ordering;
        if adaptive.is_some() {
            self.adaptive.store(adaptive);
            self.later.fetch_or(LATER_ADAPTIVE, Ordering::Release);
        } else {
            self.later.fetch_and(!LATER_ADAPTIVE, Ordering::Release);
            self.adaptive.store(None);
        }
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
