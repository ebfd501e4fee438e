//! Entries waiting in an adaptive limit's queue: handed a place by a finishing call, then on
//! through the rest of the pipeline; or given up after the queue's timeout.

use super::held::{give_back, Held};
use super::pending::{OwnedPending, Pending, PendingState, Queue, Queued};
use super::refusal::count_refusal;
use super::{Entry, EntryState, OwnedEntry};
use crate::adaptive::Granted;
use crate::block::{BlockError, BlockKind};
use crate::clock::Clock;
use crate::flow::ResourceRules;
use crate::keyed::Keys;
use crate::resource::{Resource, ResourceInner};
use crate::step::{At, PlaceWait, Stop};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// An entry the flow rules let through, now or after a wait.
#[derive(Debug)]
pub enum Admission<'a> {
    /// Admitted now.
    Ready(Entry<'a>),
    /// Admitted after [`Pending::wait`]: a queue slot is reserved; wait, then
    /// [`Pending::enter`]. Dropping the `Pending` gives the slot back.
    Queued(Pending<'a>),
    /// Waiting for a place under a full adaptive limit, in its queue: await
    /// [`Waiting::granted`] for at most [`Waiting::timeout`], then [`Waiting::resume`].
    /// Dropping the `Waiting` leaves the queue.
    Waiting(Waiting<'a>),
}

/// An owned [`Admission`]: see [`EntryBuilder::try_enter_owned`](super::EntryBuilder::try_enter_owned).
#[derive(Debug)]
pub enum OwnedAdmission {
    /// Admitted now.
    Ready(OwnedEntry),
    /// Admitted after [`OwnedPending::wait`]; dropping it gives the slot back.
    Queued(OwnedPending),
    /// Waiting for a place under a full adaptive limit (see [`Admission::Waiting`]).
    Waiting(OwnedWaiting),
}

/// What a waiting entry holds, whoever holds the resource.
pub(crate) struct WaitingState {
    place: PlaceWait,
    rules: Option<Arc<ResourceRules>>,
    queue: Queue,
    held: Held,
    /// When a pacing rule lets it start, if one queued it too.
    paced_until: Option<u64>,
    count: u32,
    inbound: bool,
    done: bool,
}

/// Where a waiting entry goes once it has its place.
pub(crate) enum Resumed {
    Ready(EntryState),
    Paced(PendingState),
    Waiting(WaitingState),
}

impl WaitingState {
    /// The state of `queued`, which waits for `place`.
    pub(super) fn new(place: PlaceWait, queued: Queued<'_>, count: u32, inbound: bool) -> Self {
        let wait = u64::try_from(queued.wait.as_nanos()).unwrap_or(u64::MAX);
        Self {
            place,
            rules: queued.rules.cloned(),
            queue: queued.queue,
            held: queued.held,
            paced_until: queued.paced.then(|| queued.decided.saturating_add(wait)),
            count,
            inbound,
            done: false,
        }
    }

    /// How long the entry may still wait at `now`: the queue's timeout, or less if its
    /// deadline comes first.
    fn timeout(&self, now: u64) -> Duration {
        let queue = self
            .place
            .adaptive
            .limiter
            .queue()
            .map_or(Duration::ZERO, |queue| queue.timeout);
        let left = self.place.slot.claim.left(now);
        queue.min(Duration::from_nanos(left))
    }

    fn granted(&self) -> Granted<'_> {
        Granted {
            slot: &self.place.slot,
        }
    }

    /// Refuses the entry, as counted and given back as any refusal.
    fn refuse(&mut self, resource: &ResourceInner, error: BlockError) -> BlockError {
        let queue = self.queue;
        give_back(
            resource,
            self.rules.as_deref(),
            queue.origin,
            queue.entrance,
            self.inbound,
            &self.held,
        );
        let now = resource.clock.now_nanos();
        count_refusal(
            resource,
            queue.origin,
            queue.entrance,
            now,
            self.count,
            self.inbound,
        );
        error
    }

    /// Stops waiting: the queue refused the entry (another took its place, or its deadline
    /// came), or the caller gives up. Either way it is refused as the limit refuses.
    fn give_up(&mut self, resource: &ResourceInner) -> BlockError {
        self.done = true;
        let adaptive = Arc::clone(&self.place.adaptive);
        let slot = Arc::clone(&self.place.slot);
        let stopped = adaptive.limiter.stop_waiting(&slot, true);
        let kind = if stopped.deadline {
            BlockKind::Deadline
        } else {
            BlockKind::Adaptive
        };
        let error =
            crate::adaptive::blocked_as(kind, resource.name_number, &adaptive, stopped.refusal)
                .with_criticality(slot.claim.criticality);
        self.refuse(resource, error)
    }

    /// With its place: the later kinds' steps after the one that queued it, then admitted,
    /// paced, or waiting again (under the inbound limit). Not yet granted a place, it gives up.
    fn resume(&mut self, resource: &ResourceInner) -> Result<Resumed, BlockError> {
        if !self.place.slot.is_granted() {
            return Err(self.give_up(resource));
        }
        self.done = true;
        self.held.later.granted(self.place.position);
        let now = resource.clock.now_nanos();
        let at = At {
            resource: resource.name_number,
            now,
            count: self.count,
            // Per-key rules were checked before the entry waited.
            keys: Keys::NONE,
            can_wait: true,
            claim: self.place.slot.claim,
        };
        let reach = resource.reach(self.inbound);
        match self.held.later.take(reach, &at, self.place.position + 1) {
            // A per-key pacing rule's wait was taken before the entry waited (`paced_until`).
            Ok(()) => {}
            Err(Stop::Refused(error)) => return Err(self.refuse(resource, error)),
            Err(Stop::Waiting(place)) => {
                return Ok(Resumed::Waiting(WaitingState {
                    place,
                    rules: self.rules.clone(),
                    done: false,
                    ..*self
                }));
            }
        }
        let queue = self.queue;
        if let Some(until) = self.paced_until {
            let wait = Duration::from_nanos(until.saturating_sub(now));
            return Ok(Resumed::Paced(PendingState::paced(
                self.rules.clone(),
                queue,
                self.held,
                wait,
                self.count,
                self.inbound,
            )));
        }
        Ok(Resumed::Ready(
            EntryState::admit(
                resource,
                queue.origin,
                queue.entrance,
                now,
                self.count,
                self.inbound,
                self.held.limited,
                queue.occupied,
            )
            .with_held(&self.held),
        ))
    }

    /// Leaves the queue (or passes on a place handed to it) and gives back what is held,
    /// unless it was resumed or given up.
    fn abandon(&mut self, resource: &ResourceInner) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        self.place
            .adaptive
            .limiter
            .stop_waiting(&self.place.slot, false);
        let queue = self.queue;
        give_back(
            resource,
            self.rules.as_deref(),
            queue.origin,
            queue.entrance,
            self.inbound,
            &self.held,
        );
    }
}

/// An entry waiting for a place under a full adaptive limit, in the limit's queue (see
/// [`AdaptiveQueue`](crate::adaptive::AdaptiveQueue)).
///
/// Core never sleeps: await [`granted`](Self::granted) for at most [`timeout`](Self::timeout)
/// (`spillway_tower::enter` does, on a tokio timer), then [`resume`](Self::resume); or, when
/// the time is up, [`give_up`](Self::give_up), which refuses it. Dropping it instead leaves the
/// queue (a place handed to it meanwhile goes to the next caller) and gives back what it holds:
/// it is cancellation-safe.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule, AimdConfig};
/// use spillway::{Admission, ManualClock, Spillway};
///
/// let spillway = Spillway::new_with_clock(ManualClock::new());
/// let aimd = AimdConfig { initial_limit: 1, min_limit: 1, max_limit: 1, ..Default::default() };
/// spillway.load_adaptive_rules(vec![
///     AdaptiveRule::resource("one-at-a-time", "export", AdaptiveAlgorithm::Aimd(aimd))
///         .with_queue(AdaptiveQueue::default()),
/// ])?;
/// let first = spillway.entry("export").enter()?;
/// let Admission::Waiting(waiting) = spillway.entry("export").try_enter()? else {
///     unreachable!("the limit of 1 is full")
/// };
/// assert!(!waiting.is_granted());
/// drop(first); // its place goes to the waiting entry
/// assert!(waiting.is_granted());
/// let Admission::Ready(second) = waiting.resume()? else { unreachable!() };
/// # drop(second);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a waiting entry leaves the queue when dropped"]
pub struct Waiting<'a> {
    resource: &'a ResourceInner,
    state: WaitingState,
}

impl<'a> Waiting<'a> {
    pub(super) fn new(resource: &'a ResourceInner, state: WaitingState) -> Self {
        Self { resource, state }
    }

    /// The longest it should wait from now: the queue's timeout, or less if its deadline
    /// ([`EntryBuilder::deadline`](crate::EntryBuilder::deadline)) comes first.
    pub fn timeout(&self) -> Duration {
        self.state.timeout(self.resource.clock.now_nanos())
    }

    /// Whether a place was handed to it.
    pub fn is_granted(&self) -> bool {
        self.state.place.slot.is_granted()
    }

    /// Whether the queue refused it (a more critical caller took its place in a full queue, or
    /// it could no longer be done by its deadline): [`give_up`](Self::give_up) then says why.
    /// A caller that polls, rather than awaiting [`granted`](Self::granted), learns it here at
    /// once instead of at its timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule, AimdConfig};
    /// use spillway::{Admission, Criticality, ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// let one = AimdConfig { initial_limit: 1, min_limit: 1, max_limit: 1, ..AimdConfig::default() };
    /// let queue = AdaptiveQueue { capacity: 1, ..AdaptiveQueue::default() };
    /// spillway.load_adaptive_rules(vec![AdaptiveRule::resource("one", "api", AdaptiveAlgorithm::Aimd(one))
    ///     .with_queue(queue)])?;
    /// let _running = spillway.entry("api").enter()?;
    /// let wait = |criticality| match spillway.entry("api").criticality(criticality).try_enter() {
    ///     Ok(Admission::Waiting(waiting)) => waiting,
    ///     other => panic!("{other:?}"),
    /// };
    /// let prefetch = wait(Criticality::Sheddable);
    /// assert!(!prefetch.is_refused());
    /// // The queue is full: a checkout takes the prefetch's place.
    /// let checkout = wait(Criticality::CriticalPlus);
    /// assert!(prefetch.is_refused() && !checkout.is_refused());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_refused(&self) -> bool {
        self.state.place.slot.shed().is_some()
    }

    /// Resolves once its wait is decided (runtime-agnostic: a finishing call, or a caller that
    /// takes its place in a full queue, wakes it): a place was handed to it
    /// ([`is_granted`](Self::is_granted)), or the queue refused it, which
    /// [`resume`](Self::resume) then returns.
    pub fn granted(&self) -> impl Future<Output = ()> + Send + '_ {
        self.state.granted()
    }

    /// Goes on with its place: through the rest of the checks, then admitted, paced, or
    /// waiting again (under the limit on all inbound traffic).
    ///
    /// # Errors
    ///
    /// A [`BlockError`] if a later check (the breakers) refuses it, or if it had no place yet
    /// (it gives up, as [`give_up`](Self::give_up)).
    pub fn resume(mut self) -> Result<Admission<'a>, BlockError> {
        let resource = self.resource;
        Ok(match self.state.resume(resource)? {
            Resumed::Ready(state) => Admission::Ready(Entry { resource, state }),
            Resumed::Paced(state) => Admission::Queued(Pending::new(resource, state)),
            Resumed::Waiting(state) => Admission::Waiting(Waiting::new(resource, state)),
        })
    }

    /// Stops waiting, refused: the [`BlockError`] names the adaptive rule, its limit and the
    /// calls in flight (and the caller's criticality), of kind
    /// [`Deadline`](crate::BlockKind::Deadline) if its deadline has come, and is counted as any
    /// refusal.
    pub fn give_up(mut self) -> BlockError {
        self.state.give_up(self.resource)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.state.abandon(self.resource);
    }
}

impl fmt::Debug for Waiting<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiting")
            .field("resource", &self.resource.name)
            .field("granted", &self.is_granted())
            .finish_non_exhaustive()
    }
}

/// A [`Waiting`] that owns its resource handle: `'static`, for futures and tasks.
#[must_use = "a waiting entry leaves the queue when dropped"]
pub struct OwnedWaiting {
    resource: Resource,
    state: WaitingState,
}

impl OwnedWaiting {
    pub(super) fn new(resource: Resource, state: WaitingState) -> Self {
        Self { resource, state }
    }

    /// As [`Waiting::timeout`].
    pub fn timeout(&self) -> Duration {
        self.state.timeout(self.resource.inner.clock.now_nanos())
    }

    /// As [`Waiting::is_granted`].
    pub fn is_granted(&self) -> bool {
        self.state.place.slot.is_granted()
    }

    /// As [`Waiting::is_refused`].
    pub fn is_refused(&self) -> bool {
        self.state.place.slot.shed().is_some()
    }

    /// As [`Waiting::granted`].
    pub fn granted(&self) -> impl Future<Output = ()> + Send + '_ {
        self.state.granted()
    }

    /// As [`Waiting::resume`].
    ///
    /// # Errors
    ///
    /// As [`Waiting::resume`].
    pub fn resume(mut self) -> Result<OwnedAdmission, BlockError> {
        let resource = self.resource.clone();
        Ok(match self.state.resume(&resource.inner)? {
            Resumed::Ready(state) => OwnedAdmission::Ready(OwnedEntry::new(resource, state)),
            Resumed::Paced(state) => OwnedAdmission::Queued(OwnedPending::new(resource, state)),
            Resumed::Waiting(state) => OwnedAdmission::Waiting(OwnedWaiting::new(resource, state)),
        })
    }

    /// As [`Waiting::give_up`].
    pub fn give_up(mut self) -> BlockError {
        let resource = self.resource.clone();
        self.state.give_up(&resource.inner)
    }
}

impl Drop for OwnedWaiting {
    fn drop(&mut self) {
        let resource = self.resource.clone();
        self.state.abandon(&resource.inner);
    }
}

impl fmt::Debug for OwnedWaiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedWaiting")
            .field("resource", &self.resource.name())
            .field("granted", &self.is_granted())
            .finish_non_exhaustive()
    }
}
