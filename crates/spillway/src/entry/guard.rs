use crate::clock::Clock;
use crate::resource::{OriginSlot, ResourceInner};
use crate::sync::thread_slot;
use std::fmt;

/// What an entry must remember to record its completion.
#[derive(Debug)]
pub(crate) struct EntryState {
    pub(crate) origin: OriginSlot,
    pub(crate) started_nanos: u64,
    pub(crate) count: u32,
    pub(crate) inbound: bool,
    pub(crate) error: bool,
    pub(crate) done: bool,
}

impl EntryState {
    /// Counts an admission: concurrency + 1 and `count` passes, on the resource, its origin and
    /// (inbound) the global inbound node, in Sentinel's order.
    #[inline]
    pub(crate) fn admit(
        resource: &ResourceInner,
        origin: OriginSlot,
        now: u64,
        count: u32,
        inbound: bool,
    ) -> Self {
        let slot = thread_slot();
        let count64 = u64::from(count);
        resource.node.record_admission(slot, now, count64);
        if let Some(node) = resource.origin_node(origin) {
            node.record_admission(slot, now, count64);
        }
        if inbound {
            resource.core.inbound.record_admission(slot, now, count64);
        }
        Self {
            origin,
            started_nanos: now,
            count,
            inbound,
            error: false,
            done: false,
        }
    }

    /// Records the completion once: RT in microseconds (saturating at zero should the clock read
    /// behind the start), completion and error counts, concurrency - 1.
    #[inline]
    pub(crate) fn complete(&mut self, resource: &ResourceInner) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let now = resource.core.clock.now_nanos();
        let slot = thread_slot();
        let rt_micros = now.saturating_sub(self.started_nanos) / 1_000;
        let count = u64::from(self.count);
        resource
            .node
            .record_exit(slot, now, rt_micros, count, self.error);
        if let Some(node) = resource.origin_node(self.origin) {
            node.record_exit(slot, now, rt_micros, count, self.error);
        }
        if self.inbound {
            resource
                .core
                .inbound
                .record_exit(slot, now, rt_micros, count, self.error);
        }
    }
}

/// An admitted call. Dropping it (or calling [`exit`](Self::exit)) records the completion:
/// response time in microseconds, one completion, an error if it was marked, one fewer in flight.
///
/// It borrows the [`Resource`](crate::Resource) or [`Spillway`](crate::Spillway) it came from, so
/// it costs no reference counting; use [`OwnedEntry`](crate::OwnedEntry) where a `'static` value
/// is needed (spawned tasks, response futures).
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, Spillway};
///
/// let clock = ManualClock::new();
/// let spillway = Spillway::new_with_clock(clock.clone());
/// let resource = spillway.resource("payments")?;
/// let mut entry = resource.entry().enter()?;
/// clock.advance_millis(40);
/// if true { // the call failed
///     entry.mark_error();
/// }
/// entry.exit();
/// assert_eq!(resource.stats().error_qps, 1.0);
/// # Ok::<(), spillway::BlockError>(())
/// ```
#[must_use = "an entry records its completion when dropped; dropping it at once records an RT of ~0"]
pub struct Entry<'a> {
    pub(crate) resource: &'a ResourceInner,
    pub(crate) state: EntryState,
}

impl Entry<'_> {
    /// Marks the call as failed: its completion also counts as an error.
    pub fn mark_error(&mut self) {
        self.state.error = true;
    }

    /// Sets whether the call failed.
    pub fn set_error(&mut self, error: bool) {
        self.state.error = error;
    }

    /// Whether the call is marked as failed.
    pub fn is_error(&self) -> bool {
        self.state.error
    }

    /// The resource's name.
    pub fn resource_name(&self) -> &str {
        &self.resource.name
    }

    /// When the entry was admitted, on the spillway's clock (nanoseconds).
    pub fn started_at_nanos(&self) -> u64 {
        self.state.started_nanos
    }

    /// Ends the entry now (the same as dropping it).
    pub fn exit(self) {}
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        self.state.complete(self.resource);
    }
}

impl fmt::Debug for Entry<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("resource", &self.resource.name)
            .field("state", &self.state)
            .finish()
    }
}
