//! Entries a pacing rule queued: reserved now, entered after a wait, or given back.

use super::held::{give_back, Held};
use super::{Entry, EntryState, OwnedEntry};
use crate::clock::Clock;
use crate::flow::ResourceRules;
use crate::resource::{ChildSlot, Resource, ResourceInner};
use crate::step::PlaceWait;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A queued admission, handed to the way in that asked: how long a pacing rule makes it wait
/// (when `paced`), the place it waits for under an adaptive limit (if any), when it was
/// decided, what is held, the rules that hold it, and the entry's nodes.
pub(super) struct Queued<'r> {
    pub(super) wait: Duration,
    pub(super) paced: bool,
    pub(super) place: Option<PlaceWait>,
    pub(super) decided: u64,
    pub(super) held: Held,
    pub(super) rules: Option<&'r Arc<ResourceRules>>,
    pub(super) queue: Queue,
}

/// What a queued entry holds, whoever holds the resource.
pub(crate) struct PendingState {
    rules: Option<Arc<ResourceRules>>,
    queue: Queue,
    held: Held,
    wait: Duration,
    count: u32,
    inbound: bool,
    done: bool,
}

impl PendingState {
    pub(super) fn new(queued: Queued<'_>, count: u32, inbound: bool) -> Self {
        Self::paced(
            queued.rules.cloned(),
            queued.queue,
            queued.held,
            queued.wait,
            count,
            inbound,
        )
    }

    /// An entry a pacing rule holds for `wait` from now.
    pub(super) fn paced(
        rules: Option<Arc<ResourceRules>>,
        queue: Queue,
        held: Held,
        wait: Duration,
        count: u32,
        inbound: bool,
    ) -> Self {
        Self {
            rules,
            queue,
            held,
            wait,
            count,
            inbound,
            done: false,
        }
    }

    /// Counts the admission now, at the clock's current time.
    fn enter(&mut self, resource: &ResourceInner) -> EntryState {
        self.done = true;
        let now = resource.clock.now_nanos();
        // What the later kinds took follows the entry to its start (a breaker's probe place,
        // so that the call's completion is known as the probe's).
        self.held.later.rebase(resource.reach(self.inbound), now);
        EntryState::admit(
            resource,
            self.queue.origin,
            self.queue.entrance,
            now,
            self.count,
            self.inbound,
            self.held.limited,
            self.queue.occupied,
        )
        .with_held(&self.held)
    }

    /// Gives the reservations back, unless the entry was entered.
    fn abandon(&mut self, resource: &ResourceInner) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        give_back(
            resource,
            self.rules.as_deref(),
            self.queue.origin,
            self.queue.entrance,
            self.inbound,
            &self.held,
        );
    }
}

/// An entry queued by a pacing rule: its slot is reserved for [`wait`](Self::wait) from now.
///
/// Core never sleeps: the caller waits (a thread sleep, an async timer, or
/// [`Clock::sleep`](crate::Clock::sleep)) and then calls [`enter`](Self::enter). Dropping it instead
/// gives its reservations back (its queue slot, if it is still the last one, any place it
/// holds under a concurrency rule, and any breaker probe place).
#[must_use = "the slot is given back when a pending entry is dropped"]
pub struct Pending<'a> {
    resource: &'a ResourceInner,
    state: PendingState,
}

impl<'a> Pending<'a> {
    pub(super) fn new(resource: &'a ResourceInner, state: PendingState) -> Self {
        Self { resource, state }
    }

    /// How long to wait, from the check, before entering.
    pub fn wait(&self) -> Duration {
        self.state.wait
    }

    /// Enters after the wait: counts the pass at the clock's current time.
    pub fn enter(mut self) -> Entry<'a> {
        let state = self.state.enter(self.resource);
        Entry {
            resource: self.resource,
            state,
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.state.abandon(self.resource);
    }
}

impl fmt::Debug for Pending<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("resource", &self.resource.name)
            .field("wait", &self.state.wait)
            .finish_non_exhaustive()
    }
}

/// A [`Pending`] that owns its resource handle: `'static`, for futures and tasks. See
/// [`EntryBuilder::try_enter_owned`](crate::EntryBuilder::try_enter_owned).
#[must_use = "the slot is given back when a pending entry is dropped"]
pub struct OwnedPending {
    resource: Resource,
    state: PendingState,
}

impl OwnedPending {
    pub(super) fn new(resource: Resource, state: PendingState) -> Self {
        Self { resource, state }
    }

    /// How long to wait, from the check, before entering.
    pub fn wait(&self) -> Duration {
        self.state.wait
    }

    /// Enters after the wait: counts the pass at the clock's current time.
    pub fn enter(mut self) -> OwnedEntry {
        let state = self.state.enter(&self.resource.inner);
        OwnedEntry::new(self.resource.clone(), state)
    }
}

impl Drop for OwnedPending {
    fn drop(&mut self) {
        self.state.abandon(&self.resource.inner);
    }
}

impl fmt::Debug for OwnedPending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedPending")
            .field("resource", &self.resource.name())
            .field("wait", &self.state.wait)
            .finish_non_exhaustive()
    }
}

/// Where a queued entry will count, and whether it borrowed its passes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Queue {
    pub(super) origin: ChildSlot,
    pub(super) entrance: ChildSlot,
    pub(super) occupied: bool,
}
