use super::{EntryState, LeftOut};
use crate::clock::Clock;
use crate::resource::Resource;
use std::fmt;
use std::time::Duration;

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
    /// The time its call waited on its caller, left out of its response time.
    pub(crate) left_out: LeftOut,
}

impl OwnedEntry {
    pub(crate) fn new(resource: Resource, state: EntryState) -> Self {
        Self {
            resource,
            state,
            left_out: LeftOut::NONE,
        }
    }

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

    /// Leaves `time` out of the call's response time: time the call waited on its caller
    /// rather than on what the entry protects (a client that sent its request body slowly,
    /// say). The response time the entry records at its end, which the statistics, the
    /// breakers' slow-call test and the system rules read, is the rest, never below zero; an
    /// adaptive limit's latency sample is the rest too, as if the call had started that much
    /// later. The call holds its place, and counts in flight, for the whole time.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::{ManualClock, Spillway};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// let mut entry = spillway.entry("uploads").enter_owned()?;
    /// clock.advance_millis(900); // the client sent its body slowly
    /// entry.leave_out(Duration::from_millis(880));
    /// clock.advance_millis(20); // the service's work
    /// entry.exit();
    /// assert_eq!(spillway.resource("uploads")?.stats().avg_rt_micros, 40_000.0);
    /// # Ok::<(), spillway::BlockError>(())
    /// ```
    pub fn leave_out(&mut self, time: Duration) {
        let nanos = u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
        self.left_out.add(nanos);
    }

    /// Says whether the call is waiting on its caller from now on: from `true` until `false`
    /// (or the entry's end), the time is left out of its response time as
    /// [`leave_out`](Self::leave_out) leaves it out. For a response body handed out frame by
    /// frame: the time between handing one frame out and being asked for the next is the
    /// reader's, not the service's. Saying what is already so changes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let clock = ManualClock::new();
    /// let spillway = Spillway::new_with_clock(clock.clone());
    /// let mut entry = spillway.entry("downloads").enter_owned()?;
    /// clock.advance_millis(10); // the service's time to its first bytes
    /// entry.set_waiting_on_caller(true);
    /// clock.advance_millis(5_000); // a slow reader
    /// entry.set_waiting_on_caller(false);
    /// clock.advance_millis(10); // the service's time to its last bytes
    /// entry.set_waiting_on_caller(true);
    /// clock.advance_millis(1_000); // the reader takes them
    /// entry.exit();
    /// assert_eq!(spillway.resource("downloads")?.stats().avg_rt_micros, 20_000.0);
    /// # Ok::<(), spillway::BlockError>(())
    /// ```
    pub fn set_waiting_on_caller(&mut self, waiting: bool) {
        if waiting == self.left_out.waiting() {
            return;
        }
        let now = self.resource.inner.clock.now_nanos();
        if waiting {
            self.left_out.begin(now);
        } else {
            self.left_out.end(now);
        }
    }

    /// The time left out of the call's response time so far (see
    /// [`leave_out`](Self::leave_out) and
    /// [`set_waiting_on_caller`](Self::set_waiting_on_caller)), an open wait up to now
    /// included.
    pub fn left_out(&self) -> Duration {
        if self.left_out.is_none() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.left_out.at(self.resource.inner.clock.now_nanos()))
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
        if self.left_out.is_none() {
            self.state.complete(&self.resource.inner);
        } else {
            (self.state).complete_leaving_out(&self.resource.inner, self.left_out);
        }
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
