use super::EntryState;
use crate::resource::Resource;
use std::fmt;

/// An admitted call that owns its resource handle: `'static`, for spawned tasks and response
/// futures. Otherwise the same as [`Entry`](crate::Entry), at the cost of one reference count.
///
/// # Examples
///
/// ```
/// use spillway::{ManualClock, Spillway};
///
/// let clock = ManualClock::new();
/// let spillway = Spillway::new_with_clock(clock.clone());
/// let entry = spillway.entry("jobs").enter_owned()?;
/// std::thread::spawn(move || {
///     // work...
///     drop(entry);
/// })
/// .join()
/// .unwrap();
/// assert_eq!(spillway.resource("jobs")?.stats().concurrency, 0);
/// # Ok::<(), spillway::BlockError>(())
/// ```
#[must_use = "an entry records its completion when dropped; dropping it at once records an RT of ~0"]
pub struct OwnedEntry {
    pub(crate) resource: Resource,
    pub(crate) state: EntryState,
}

impl OwnedEntry {
    /// Marks the call as failed: its completion also counts as an error.
    pub fn mark_error(&mut self) {
        self.state.set_error(true);
    }

    /// Marks the call as dropped (see [`Entry::mark_dropped`](crate::Entry::mark_dropped)).
    pub fn mark_dropped(&mut self) {
        self.state.set_dropped();
    }

    /// Sets whether the call failed.
    pub fn set_error(&mut self, error: bool) {
        self.state.set_error(error);
    }

    /// Marks the call as abandoned (see
    /// [`Entry::mark_abandoned`](crate::Entry::mark_abandoned)): its end frees its place and
    /// counts nothing else.
    pub fn mark_abandoned(&mut self) {
        self.state.set_abandoned();
    }

    /// Whether the call is marked as failed.
    pub fn is_error(&self) -> bool {
        self.state.error()
    }

    /// The resource.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// When the entry was admitted, on the spillway's clock (nanoseconds).
    pub fn started_at_nanos(&self) -> u64 {
        self.state.started_nanos
    }

    /// Ends the entry now (the same as dropping it).
    pub fn exit(self) {}

    /// The id of the first flow rule in shadow mode that would have refused this entry, if any
    /// (see [`Entry::shadow_rule`](crate::Entry::shadow_rule)).
    pub fn shadow_rule(&self) -> Option<&'static str> {
        self.state.shadow_rule()
    }
}

impl Drop for OwnedEntry {
    fn drop(&mut self) {
        self.state.complete(&self.resource.inner);
    }
}

impl fmt::Debug for OwnedEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedEntry")
            .field("resource", &self.resource.name())
            .field("state", &self.state)
            .finish()
    }
}
