use super::pending::{OwnedPending, Pending, PendingState, Queued};
use super::waiting::{Admission, OwnedAdmission, OwnedWaiting, Waiting, WaitingState};
use super::{Entry, EntryState, OwnedEntry, TrafficType};
use crate::adaptive::{Claim, NO_DEADLINE};
use crate::block::BlockError;
use crate::clock::Clock;
use crate::registry::Registry;
use crate::resource::{ChildSlot, Resource, ResourceInner};
use crate::Criticality;
use std::fmt;
use std::time::Duration;

/// Describes an entry before it is attempted: count, origin, entrance, traffic type.
///
/// Made by [`Spillway::entry`](crate::Spillway::entry) (by name) or [`Resource::entry`] (pre-resolved, no lookup).
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, Spillway, TrafficType};
///
/// let spillway = Spillway::new_with_clock(ManualClock::new());
/// let entry = spillway
///     .entry("GET /search")
///     .count(2)
///     .origin("mobile-app")
///     .traffic(TrafficType::Inbound)
///     .enter()?;
/// drop(entry);
/// assert_eq!(spillway.inbound_stats().total_pass, 2);
/// # Ok::<(), spillway::BlockError>(())
/// ```
#[must_use = "nothing happens until `enter` is called"]
pub struct EntryBuilder<'a> {
    target: Target<'a>,
    pub(super) count: u32,
    pub(super) origin: Option<&'a str>,
    pub(super) entrance: Option<&'a str>,
    pub(super) traffic: TrafficType,
    pub(super) prioritized: bool,
    /// The fingerprints of the keys per-key rules limit, by position (Sentinel's argument
    /// index); 0: none at that position.
    pub(super) keys: crate::keyed::Keys,
    /// What the entry claims in an adaptive limit's queue; its deadline is the time left, in
    /// nanoseconds from the entry ([`NO_DEADLINE`] for none), made absolute when it enters.
    pub(super) claim: Claim,
}

enum Target<'a> {
    Name(&'a Registry, &'a str),
    Handle(&'a Resource),
}

impl Resource {
    /// Starts building an entry into this resource.
    pub fn entry(&self) -> EntryBuilder<'_> {
        EntryBuilder::for_resource(self)
    }
}

impl<'a> EntryBuilder<'a> {
    pub(crate) fn for_name(registry: &'a Registry, name: &'a str) -> Self {
        Self::new(Target::Name(registry, name))
    }

    pub(crate) fn for_resource(resource: &'a Resource) -> Self {
        Self::new(Target::Handle(resource))
    }

    fn new(target: Target<'a>) -> Self {
        Self {
            target,
            count: 1,
            origin: None,
            entrance: None,
            traffic: TrafficType::default(),
            prioritized: false,
            keys: crate::keyed::Keys::NONE,
            claim: Claim::default(),
        }
    }

    /// Marks the entry as prioritized: when a QPS reject rule would refuse it, it may instead
    /// borrow room from the next buckets of the second window and wait up to the rule's
    /// `occupy_timeout` (Sentinel's occupy mechanism). Its passes are counted in the bucket it
    /// borrowed from, and as occupied passes now.
    pub fn prioritized(mut self) -> Self {
        self.prioritized = true;
        self
    }

    /// How many permits the call takes (default 1; Sentinel's `batchCount`). It counts as that
    /// many passes and completions, and as one entry in flight. 0 counts no permits (the entry is
    /// still in flight until it ends).
    pub fn count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    /// The caller's origin (an application or client name), tracked in its own statistics and
    /// matched against rules' `limit_app`.
    pub fn origin(mut self, origin: &'a str) -> Self {
        self.origin = Some(origin);
        self
    }

    /// The entrance the call came through (Sentinel's context name, for example the inbound
    /// endpoint that leads to this resource), tracked in its own statistics and matched against
    /// `chain` rules.
    pub fn entrance(mut self, entrance: &'a str) -> Self {
        self.entrance = Some(entrance);
        self
    }

    /// The key the resource's per-key rules ([`KeyedRule`](crate::keyed::KeyedRule)) limit the
    /// entry by: a user, an IP, a tenant. Any hashable value, reduced to its
    /// [`fingerprint`](crate::keyed::fingerprint) here (nothing is allocated or kept). It is
    /// the key at position 0, which rules use unless their `param` says otherwise; a rule whose
    /// key the entry does not have does not apply to it.
    pub fn key<K: std::hash::Hash + ?Sized>(self, key: &K) -> Self {
        self.key_at(0, key)
    }

    /// The key at `position` (0 to 3; Sentinel's argument index), for the per-key rules whose
    /// `param` is `position`: a per-IP rule and a per-user rule on one resource each read their
    /// own. A position past 3 is ignored.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::keyed::KeyedRule;
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// spillway.load_keyed_rules(vec![
    ///     KeyedRule::qps("per-ip", "login", 5.0),
    ///     KeyedRule::qps("per-user", "login", 1.0).with_param(1),
    /// ])?;
    /// let login = |ip: &str, user: &str| spillway.entry("login").key(ip).key_at(1, user).enter();
    /// assert!(login("10.0.0.1", "alice").is_ok());
    /// let err = login("10.0.0.2", "alice").unwrap_err(); // alice's one a second is spent
    /// assert_eq!(err.rule_id(), Some("per-user"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_at<K: std::hash::Hash + ?Sized>(mut self, position: usize, key: &K) -> Self {
        self.keys.set(position, crate::keyed::fingerprint(key));
        self
    }

    /// How much the call matters when an adaptive limit must turn some away (default
    /// [`Criticality::Critical`]). With a queue ([`AdaptiveQueue`](crate::adaptive::AdaptiveQueue)),
    /// a freed place goes to the most critical waiter first, and a caller that finds the queue
    /// full takes the place of a less critical waiter, which is refused. Callers that cannot
    /// wait ([`enter`](Self::enter)) are refused at a full limit whatever their criticality.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule, AimdConfig};
    /// use spillway::{Admission, Criticality, ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// let one = AimdConfig { initial_limit: 1, min_limit: 1, max_limit: 1, ..AimdConfig::default() };
    /// spillway.load_adaptive_rules(vec![AdaptiveRule::resource("one", "api", AdaptiveAlgorithm::Aimd(one))
    ///     .with_queue(AdaptiveQueue::default())])?;
    /// let running = spillway.entry("api").enter()?;
    /// let wait = |criticality| match spillway.entry("api").criticality(criticality).try_enter() {
    ///     Ok(Admission::Waiting(waiting)) => waiting,
    ///     other => panic!("{other:?}"),
    /// };
    /// let prefetch = wait(Criticality::Sheddable);
    /// let checkout = wait(Criticality::CriticalPlus);
    /// drop(running);
    /// // The checkout, though it came second, has the freed place.
    /// assert!(checkout.is_granted() && !prefetch.is_granted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn criticality(mut self, criticality: Criticality) -> Self {
        self.claim.criticality = criticality;
        self
    }

    /// The tenant the call is for (an API key, an account): within a criticality, an adaptive
    /// limit's queue gives its places to tenants in turn, so that one that floods waits behind
    /// its own calls, not in front of the others'. Any hashable value, reduced to its
    /// [`fingerprint`](crate::keyed::fingerprint); the queue keeps no state per tenant (see
    /// [`AdaptiveQueue`](crate::adaptive::AdaptiveQueue) for what that costs).
    pub fn tenant<K: std::hash::Hash + ?Sized>(mut self, tenant: &K) -> Self {
        self.claim.tenant = crate::keyed::fingerprint(tenant).max(1);
        self
    }

    /// [`tenant`](Self::tenant), by a fingerprint the caller made: for a simulation that must
    /// give the same numbers in every process ([`fingerprint`](crate::keyed::fingerprint)'s
    /// seed is random per process). Never from a value a client chooses: a fixed hash lets one
    /// compute names that share a chosen tenant's turns.
    ///
    /// # Examples
    ///
    /// ```
    /// # let spillway = spillway::Spillway::new();
    /// let entry = spillway.entry("orders").tenant_fingerprint(0x9e37_79b9_7f4a_7c15);
    /// # drop(entry.try_enter());
    /// ```
    pub fn tenant_fingerprint(mut self, fingerprint: u64) -> Self {
        self.claim.tenant = fingerprint.max(1);
        self
    }

    /// The time the caller has left to be answered, from now (a gRPC `grpc-timeout`, a
    /// client's deadline). An adaptive limit's queue refuses a waiting caller
    /// ([`BlockKind::Deadline`](crate::BlockKind::Deadline)) once its deadline has passed, or
    /// when it cannot be done by it at the limit's current latency (an average of its recent
    /// calls' times, bodies included), before it costs the service anything; a caller waits at
    /// most until its deadline. Only a caller that must wait is checked: one admitted at once,
    /// or by a resource without an adaptive limit with a queue, goes on whatever its deadline
    /// (the tower layer and the proxy check it before they call).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule, AimdConfig};
    /// use spillway::{Admission, BlockKind, ManualClock, Spillway};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// let one = AimdConfig { initial_limit: 1, min_limit: 1, max_limit: 1, ..AimdConfig::default() };
    /// spillway.load_adaptive_rules(vec![AdaptiveRule::resource("one", "api", AdaptiveAlgorithm::Aimd(one))
    ///     .with_queue(AdaptiveQueue::default())])?;
    /// let running = spillway.entry("api").enter()?;
    /// let Ok(Admission::Waiting(waiting)) =
    ///     spillway.entry("api").deadline(Duration::from_millis(50)).try_enter()
    /// else {
    ///     panic!("it waits")
    /// };
    /// // It waits no longer than its deadline ...
    /// assert_eq!(waiting.timeout(), Duration::from_millis(50));
    /// // ... and a place freed after it is not handed to it.
    /// clock.advance(Duration::from_millis(60));
    /// drop(running);
    /// assert!(!waiting.is_granted());
    /// assert_eq!(waiting.resume().unwrap_err().kind(), BlockKind::Deadline);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deadline(mut self, left: Duration) -> Self {
        self.claim.deadline = u64::try_from(left.as_nanos())
            .unwrap_or(NO_DEADLINE - 1)
            .min(NO_DEADLINE - 1);
        self
    }

    /// Inbound or outbound (default outbound).
    pub fn traffic(mut self, traffic: TrafficType) -> Self {
        self.traffic = traffic;
        self
    }

    /// Shorthand for `traffic(TrafficType::Inbound)`.
    pub fn inbound(self) -> Self {
        self.traffic(TrafficType::Inbound)
    }

    /// The resource the builder names, if it exists (a name is looked up, never registered).
    pub(super) fn existing(&self) -> Option<&'a Resource> {
        match self.target {
            Target::Name(registry, name) => registry.get(name),
            Target::Handle(resource) => Some(resource),
        }
    }

    /// The resource: a handle's at once, a name's through the registry. Always inlined: out of
    /// line, it returned the resource through memory, in a `Result` as wide as a block.
    #[inline(always)]
    fn resolve(&self) -> Result<&'a Resource, BlockError> {
        match self.target {
            Target::Name(registry, name) => registry.resolve(name),
            Target::Handle(resource) => Ok(resource),
        }
    }

    /// The entry's origin and entrance child nodes (created on first use, within the cap; an
    /// origin or entrance that a flow rule of the resource names has its own past the cap).
    #[inline]
    pub(super) fn child_slots(&self, inner: &ResourceInner) -> (ChildSlot, ChildSlot) {
        let origin = self.origin.map_or(ChildSlot::NONE, |o| {
            inner.origins.slot(o, |o| named(inner, o, Named::Origin))
        });
        let entrance = self.entrance.map_or(ChildSlot::NONE, |e| {
            inner
                .entrances
                .slot(e, |e| named(inner, e, Named::Entrance))
        });
        (origin, entrance)
    }

    /// Attempts the entry without waiting: admitted now, queued by a pacing rule (with the
    /// wait), waiting in an adaptive limit's queue, or refused.
    ///
    /// # Errors
    ///
    /// A [`BlockError`] saying which check refused it and why.
    pub fn try_enter(self) -> Result<Admission<'a>, BlockError> {
        let resource = self.resolve()?;
        let inner = &*resource.inner;
        let (count, inbound) = (self.count, self.traffic == TrafficType::Inbound);
        self.run(
            resource,
            true,
            |state| {
                Ok(Admission::Ready(Entry {
                    resource: inner,
                    state,
                }))
            },
            |mut queued| {
                if let Some(place) = queued.place.take() {
                    let state = WaitingState::new(place, queued, count, inbound);
                    return Ok(Admission::Waiting(Waiting::new(inner, state)));
                }
                Ok(Admission::Queued(Pending::new(
                    inner,
                    PendingState::new(queued, count, inbound),
                )))
            },
            Err,
        )
    }

    /// Attempts the entry, waiting on the clock if a pacing rule queues it
    /// ([`Clock::sleep`](crate::Clock::sleep): the thread sleeps, a `ManualClock` advances).
    /// It does not wait in an adaptive limit's queue: over a full limit it is refused (use
    /// [`try_enter`](Self::try_enter) to wait there).
    ///
    /// # Errors
    ///
    /// A [`BlockError`] saying which check refused it and why.
    #[inline]
    pub fn enter(self) -> Result<Entry<'a>, BlockError> {
        let resource = self.resolve()?;
        let inner = &*resource.inner;
        self.run(
            resource,
            false,
            |state| {
                Ok(Entry {
                    resource: inner,
                    state,
                })
            },
            |queued| {
                Ok(Entry {
                    resource: inner,
                    state: self.after_wait(inner, queued),
                })
            },
            Err,
        )
    }

    /// Waits out a queued admission on the clock, then counts it.
    #[inline(never)]
    fn after_wait(&self, inner: &ResourceInner, mut queued: Queued<'_>) -> EntryState {
        debug_assert!(queued.place.is_none(), "`enter` does not wait for a place");
        inner.clock.sleep(queued.wait);
        let now = inner.clock.now_nanos();
        let inbound = self.traffic == TrafficType::Inbound;
        // What the later kinds took follows the entry to its start.
        queued.held.later.rebase(inner.reach(inbound), now);
        let queue = queued.queue;
        EntryState::admit(
            inner,
            queue.origin,
            queue.entrance,
            now,
            self.count,
            inbound,
            queued.held.limited,
            queue.occupied,
        )
        .with_held(&queued.held)
    }

    /// [`enter`](Self::enter), returning an owned (`'static`) entry.
    ///
    /// # Errors
    ///
    /// A [`BlockError`] saying which check refused it and why.
    pub fn enter_owned(self) -> Result<OwnedEntry, BlockError> {
        let resource = self.resolve()?.clone();
        let entry = self.enter()?;
        let state = entry.state.clone();
        // The owned entry completes the admission: this guard must not.
        std::mem::forget(entry);
        Ok(OwnedEntry::new(resource, state))
    }
}

impl<'a> EntryBuilder<'a> {
    /// [`try_enter`](Self::try_enter), returning an owned (`'static`) admission: for response
    /// futures and spawned tasks that wait out a queueing rule.
    ///
    /// # Errors
    ///
    /// A [`BlockError`] saying which check refused it and why.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::{Behavior, FlowRule};
    /// use spillway::{ManualClock, OwnedAdmission, Spillway};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// spillway.load_flow_rules(vec![FlowRule::qps("pace", "export", 10.0)
    ///     .with_behavior(Behavior::throttle(Duration::from_secs(1)))])?;
    /// let _first = spillway.entry("export").try_enter_owned()?;
    /// let OwnedAdmission::Queued(pending) = spillway.entry("export").try_enter_owned()? else {
    ///     unreachable!("paced 100 ms apart")
    /// };
    /// let pending = std::thread::spawn(move || pending).join().unwrap(); // 'static
    /// clock.advance(pending.wait());
    /// let entry = pending.enter();
    /// # drop(entry);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_enter_owned(self) -> Result<OwnedAdmission, BlockError> {
        let resource = self.resolve()?;
        let (count, inbound) = (self.count, self.traffic == TrafficType::Inbound);
        self.run(
            resource,
            true,
            |state| {
                Ok(OwnedAdmission::Ready(OwnedEntry::new(
                    resource.clone(),
                    state,
                )))
            },
            |mut queued| {
                if let Some(place) = queued.place.take() {
                    let state = WaitingState::new(place, queued, count, inbound);
                    return Ok(OwnedAdmission::Waiting(OwnedWaiting::new(
                        resource.clone(),
                        state,
                    )));
                }
                Ok(OwnedAdmission::Queued(OwnedPending::new(
                    resource.clone(),
                    PendingState::new(queued, count, inbound),
                )))
            },
            Err,
        )
    }
}

impl fmt::Debug for EntryBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.target {
            Target::Name(_, name) => name,
            Target::Handle(resource) => resource.name(),
        };
        f.debug_struct("EntryBuilder")
            .field("resource", &name)
            .field("count", &self.count)
            .field("origin", &self.origin)
            .field("entrance", &self.entrance)
            .field("traffic", &self.traffic)
            .field("prioritized", &self.prioritized)
            .finish()
    }
}

/// Which child nodes a name is looked up in.
#[derive(Clone, Copy)]
enum Named {
    Origin,
    Entrance,
}

/// Whether a flow rule of the resource names `name` (`limit_app`, or a `chain` rule's
/// entrance): asked only past the cap on child nodes, so that a flood of other names cannot
/// put it in the shared overflow node.
#[cold]
#[inline(never)]
fn named(inner: &ResourceInner, name: &str, kind: Named) -> bool {
    let rules = inner.flow.load();
    rules.as_ref().is_some_and(|rules| match kind {
        Named::Origin => rules.names_origin(name),
        Named::Entrance => rules.names_entrance(name),
    })
}
