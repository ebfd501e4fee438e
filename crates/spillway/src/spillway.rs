//! The instance: clock, resources, (later) rules.

use crate::block::BlockError;
use crate::clock::Clock;
use crate::core::Core;
use crate::entry::EntryBuilder;
use crate::flow::{FlowRule, FlowRuleError, FlowRuleSet};
use crate::kinds::Kind;
use crate::registry::Registry;
use crate::resource::Resource;
use crate::snapshot::{ResourceSnapshot, Snapshot};
use crate::stats::{NodeStats, ResourceNode};
use crate::system::{SystemRule, SystemRuleError, SystemRules};
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// Default cap on origins tracked per resource.
pub const DEFAULT_MAX_ORIGINS: usize = 1_024;

mod adaptive;
mod breaker;
mod builder;
mod cluster;
mod keyed;
mod quota;
mod unentered;

pub use builder::SpillwayBuilder;
pub use unentered::UnenteredRule;

/// One spillway: a clock, a registry of resources with their statistics, and (as later modules
/// land) the rules checked on every entry.
///
/// There is no hidden global: create as many as you like (tests usually make one per test with a
/// [`ManualClock`](crate::ManualClock)). [`Spillway::global`] is a process-wide default for
/// convenience. Clones are cheap and share everything.
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, Spillway};
///
/// let clock = ManualClock::starting_at_millis(1_700_000_000_000);
/// let spillway = Spillway::new_with_clock(clock.clone());
/// let mut entry = spillway.entry("db.query").enter()?;
/// clock.advance_millis(12);
/// entry.mark_error();
/// drop(entry);
///
/// let stats = spillway.resource("db.query")?.stats();
/// assert_eq!((stats.total_pass, stats.total_success, stats.total_error), (1, 1, 1));
/// assert_eq!(stats.avg_rt_micros, 12_000.0);
/// # Ok::<(), spillway::BlockError>(())
/// ```
#[derive(Clone)]
pub struct Spillway {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    registry: Registry,
}

impl Spillway {
    /// A spillway on the [`SystemClock`](crate::SystemClock) with default settings.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A spillway on `clock` with default settings.
    pub fn new_with_clock<C: Clock>(clock: C) -> Self {
        Self::builder().clock(clock).build()
    }

    /// Settings beyond the clock.
    pub fn builder() -> SpillwayBuilder {
        SpillwayBuilder::default()
    }

    /// The process-wide default instance (system clock, default settings), created on first use.
    pub fn global() -> &'static Spillway {
        static GLOBAL: OnceLock<Spillway> = OnceLock::new();
        GLOBAL.get_or_init(Spillway::new)
    }

    /// Starts building an entry into the resource `name` (registered on first use).
    pub fn entry<'a>(&'a self, name: &'a str) -> EntryBuilder<'a> {
        EntryBuilder::for_name(&self.inner.registry, name)
    }

    /// The resource `name`, registered if new: a handle whose entries skip the name lookup.
    ///
    /// # Errors
    ///
    /// A [`BlockKind::ResourceCap`](crate::BlockKind::ResourceCap) error when the registry is full
    /// and its policy is [`OverflowPolicy::Reject`](crate::OverflowPolicy::Reject). Under the default policy a full registry
    /// returns the shared overflow resource instead.
    pub fn resource(&self, name: &str) -> Result<Resource, BlockError> {
        self.resolve(name).cloned()
    }

    #[inline]
    pub(crate) fn resolve(&self, name: &str) -> Result<&Resource, BlockError> {
        self.inner.registry.resolve(name)
    }

    /// The clock this instance reads.
    pub fn clock(&self) -> &dyn Clock {
        &self.inner.core.clock
    }

    /// The global inbound node: statistics of every inbound entry (Sentinel's `ENTRY_NODE`).
    pub fn inbound_node(&self) -> &ResourceNode {
        &self.inner.core.inbound
    }

    /// Resources registered (not counting the overflow resource).
    pub fn resource_count(&self) -> usize {
        self.inner.registry.len()
    }

    /// Entries for new names that met a full registry (each handled by the overflow policy).
    pub fn resource_overflows(&self) -> u64 {
        self.inner.registry.overflows()
    }

    /// A read-only copy of every resource's statistics, taken now.
    pub fn snapshot(&self) -> Snapshot {
        let now = self.inner.core.clock.now_nanos();
        let registry = &self.inner.registry;
        let overflow = registry.overflow();
        let resources = registry
            .iter()
            .chain((registry.overflows() > 0).then_some(overflow))
            .map(|resource| ResourceSnapshot::read(resource, now))
            .collect();
        Snapshot {
            at_nanos: now,
            inbound: self.inner.core.inbound.stats(now),
            resources,
            resource_overflows: registry.overflows(),
        }
    }

    /// Validates `rules` and, if every one is good, replaces the flow rules with them at once.
    ///
    /// A rule that is unchanged (same id, same fields) keeps its controller state: warm-up
    /// tokens, its place in a throttle schedule, the admissions a QPS reject rule counted (see
    /// [`flow`](crate::flow#reloads)). A `relate` rule registers the resource it reads if that
    /// resource is new.
    ///
    /// # Errors
    ///
    /// A [`FlowRuleError`] naming the first bad rule (position and id) and field; the rules in
    /// force do not change.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::FlowRule;
    /// use spillway::{BlockKind, ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::starting_at_millis(1_700_000_000_000));
    /// spillway.load_flow_rules(vec![FlowRule::qps("orders-qps", "orders", 2.0)])?;
    /// let _a = spillway.entry("orders").enter().unwrap();
    /// let _b = spillway.entry("orders").enter().unwrap();
    /// let blocked = spillway.entry("orders").enter().unwrap_err();
    /// assert_eq!((blocked.kind(), blocked.rule_id()), (BlockKind::Flow, Some("orders-qps")));
    ///
    /// // A bad set changes nothing.
    /// assert!(spillway.load_flow_rules(vec![FlowRule::qps("x", "orders", -1.0)]).is_err());
    /// assert_eq!(spillway.flow_rules()[0].id, "orders-qps");
    /// # Ok::<(), spillway::flow::FlowRuleError>(())
    /// ```
    pub fn load_flow_rules(&self, rules: Vec<FlowRule>) -> Result<(), FlowRuleError> {
        let core = &self.inner.core;
        let registry = &self.inner.registry;
        let _lock = core.rules_lock.lock().unwrap_or_else(|e| e.into_inner());
        let previous = core.flow.load_full();
        // `relate` targets are registered (outside the rules lock's reach: registering takes it).
        let set = FlowRuleSet::build(rules, &previous, |name| {
            // A full registry gives no node to read (the rule then passes, as Sentinel's does
            // for a resource it has never seen), never the shared overflow resource.
            registry
                .resolve_locked(name)
                .ok()
                .filter(|resource| resource.name() == name)
                .map(|resource| {
                    let weak = Arc::downgrade(&resource.inner);
                    let related: std::sync::Weak<dyn crate::flow::RelatedNode> = weak;
                    related
                })
        })?;
        core.flow.store(Arc::new(set));
        let set = core.flow.load();
        for resource in registry.iter().chain(std::iter::once(registry.overflow())) {
            resource
                .inner
                .flow
                .install(set.by_resource.get(resource.name()).cloned());
        }
        Ok(())
    }

    /// Replaces one kind's rules: under the rules lock, `build` makes the new set from the
    /// loaded one (a bad set returns its error and changes nothing), and every resource then
    /// installs its rules of the new set. One place for every kind checked after the flow rules.
    pub(crate) fn replace_rules<K: Kind, E>(
        &self,
        build: impl FnOnce(&K::Set) -> Result<K::Set, E>,
    ) -> Result<(), E> {
        let core = &self.inner.core;
        let registry = &self.inner.registry;
        let _lock = core.rules_lock.lock().unwrap_or_else(|e| e.into_inner());
        let set = Arc::new(build(&core.sets.get::<K>())?);
        core.sets.store::<K>(Arc::clone(&set));
        for resource in registry.iter().chain(std::iter::once(registry.overflow())) {
            resource.inner.slots.set::<K>(K::of(&set, resource.name()));
        }
        Ok(())
    }

    /// Validates `rules` and, if every one is good, replaces the system rules with them at once.
    /// An empty set turns system protection off.
    ///
    /// System rules check inbound entries only ([`EntryBuilder::inbound`]), before flow rules;
    /// see [`SystemRule`] for the checks and [`system`](crate::system) for the BBR check.
    ///
    /// # Errors
    ///
    /// A [`SystemRuleError`] naming the first bad rule and field; the rules in force do not
    /// change.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::system::{ManualProbe, SystemCheck, SystemRule};
    /// use spillway::{BlockKind, ManualClock, Spillway};
    ///
    /// let spillway = Spillway::builder()
    ///     .clock(ManualClock::starting_at_millis(1_700_000_000_000))
    ///     .system_probe(ManualProbe::new())
    ///     .build();
    /// spillway.load_system_rules(vec![SystemRule::new("guard").with_max_concurrency(1)])?;
    /// let _a = spillway.entry("api").inbound().enter().unwrap();
    /// let blocked = spillway.entry("api").inbound().enter().unwrap_err();
    /// assert_eq!(blocked.kind(), BlockKind::System(SystemCheck::Concurrency));
    /// assert_eq!((blocked.observed(), blocked.threshold()), (1.0, 1.0));
    /// // Outbound entries are not checked.
    /// assert!(spillway.entry("db").enter().is_ok());
    /// # Ok::<(), spillway::system::SystemRuleError>(())
    /// ```
    pub fn load_system_rules(&self, rules: Vec<SystemRule>) -> Result<(), SystemRuleError> {
        let core = &self.inner.core;
        let set = SystemRules::new(rules)?;
        let _lock = core.rules_lock.lock().unwrap_or_else(|e| e.into_inner());
        let any = !set.is_empty();
        core.system.store(Arc::new(set));
        core.has_system.store(any, Ordering::Release);
        Ok(())
    }

    /// The system rules in force, exactly as loaded.
    pub fn system_rules(&self) -> Vec<SystemRule> {
        self.inner.core.system.load().rules().to_vec()
    }

    /// The flow rules in force, exactly as loaded.
    pub fn flow_rules(&self) -> Vec<FlowRule> {
        self.inner.core.flow.load().loaded.clone()
    }

    /// Reads the flow rule `id`, if one is loaded, without copying the rule set (for a block's
    /// response headers, say).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::FlowRule;
    /// use spillway::Spillway;
    ///
    /// let spillway = Spillway::new();
    /// spillway.load_flow_rules(vec![FlowRule::qps("search", "GET /search", 50.0)])?;
    /// assert_eq!(spillway.with_flow_rule("search", |rule| rule.count), Some(50.0));
    /// assert_eq!(spillway.with_flow_rule("nope", |rule| rule.count), None);
    /// # Ok::<(), spillway::flow::FlowRuleError>(())
    /// ```
    pub fn with_flow_rule<R>(&self, id: &str, read: impl FnOnce(&FlowRule) -> R) -> Option<R> {
        let set = self.inner.core.flow.load();
        set.loaded.iter().find(|rule| rule.id == id).map(read)
    }

    /// What the flow rule `id` has counted of its own (for a rule in shadow mode, the refusals it
    /// did not make), if one is loaded.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::FlowRule;
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// spillway.load_flow_rules(vec![FlowRule::in_flight("db", 1).with_id("try-1").with_shadow(true)])?;
    /// let first = spillway.entry("db").enter()?;
    /// let second = spillway.entry("db").enter()?; // admitted: the rule is in shadow mode
    /// assert_eq!(second.shadow_rule(), Some("try-1"));
    /// assert_eq!(spillway.flow_rule_stats("try-1").unwrap().shadow_refusals, 1);
    /// # drop((first, second));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flow_rule_stats(&self, id: &str) -> Option<crate::flow::FlowRuleStats> {
        let set = self.inner.core.flow.load();
        set.by_resource
            .values()
            .flat_map(|rules| &rules.rules)
            .find(|compiled| compiled.rule.id == id)
            .map(|compiled| compiled.counters.stats())
    }

    /// What the flow rule `id`'s controller holds now, if one is loaded: a warm-up rule's
    /// allowed QPS, a pacing rule's queue, a shadow rule's refusals not made.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::{Behavior, FlowRule};
    /// use spillway::{ManualClock, Spillway};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// let paced = FlowRule::qps("paced", "jobs", 10.0).with_behavior(Behavior::Throttle {
    ///     max_queueing_time: Duration::from_secs(1),
    ///     stat_duration: Duration::from_secs(1),
    /// });
    /// spillway.load_flow_rules(vec![paced])?;
    /// let state = spillway.flow_rule_state("paced").unwrap();
    /// assert_eq!(state.queue_wait, Some(Duration::ZERO));
    /// assert_eq!(state.allowed_qps, None);
    /// # Ok::<(), spillway::flow::FlowRuleError>(())
    /// ```
    pub fn flow_rule_state(&self, id: &str) -> Option<crate::flow::FlowRuleState> {
        let set = self.inner.core.flow.load();
        let now = self.inner.core.clock.now_nanos();
        set.by_resource
            .values()
            .flat_map(|rules| &rules.rules)
            .find(|compiled| compiled.rule.id == id)
            .map(|compiled| {
                let (allowed_qps, queue_wait) = compiled.controller.state(now);
                crate::flow::FlowRuleState {
                    allowed_qps,
                    queue_wait,
                    shadow_refusals: compiled.counters.stats().shadow_refusals,
                }
            })
    }

    /// Statistics of the global inbound node, read now.
    pub fn inbound_stats(&self) -> NodeStats {
        self.inner
            .core
            .inbound
            .stats(self.inner.core.clock.now_nanos())
    }
}

impl Default for Spillway {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Spillway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spillway")
            .field("clock", &self.inner.core.clock)
            .field("registry", &self.inner.registry)
            .finish()
    }
}
