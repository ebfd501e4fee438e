use super::{Entry, EntryState, OwnedEntry, TrafficType};
use crate::block::BlockError;
use crate::clock::Clock;
use crate::resource::{OriginSlot, Resource};
use crate::spillway::Spillway;
use std::fmt;

/// Describes an entry before it is attempted: count, origin, traffic type.
///
/// Made by [`Spillway::entry`] (by name) or [`Resource::entry`] (pre-resolved, no lookup).
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
    count: u32,
    origin: Option<&'a str>,
    traffic: TrafficType,
}

enum Target<'a> {
    Name(&'a Spillway, &'a str),
    Handle(&'a Resource),
}

impl<'a> EntryBuilder<'a> {
    pub(crate) fn for_name(spillway: &'a Spillway, name: &'a str) -> Self {
        Self::new(Target::Name(spillway, name))
    }

    pub(crate) fn for_resource(resource: &'a Resource) -> Self {
        Self::new(Target::Handle(resource))
    }

    fn new(target: Target<'a>) -> Self {
        Self {
            target,
            count: 1,
            origin: None,
            traffic: TrafficType::default(),
        }
    }

    /// How many permits the call takes (default 1; Sentinel's `batchCount`). It counts as that
    /// many passes and completions, and as one entry in flight. 0 counts no permits (the entry is
    /// still in flight until it ends).
    pub fn count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    /// The caller's origin (an application or client name), tracked in its own statistics.
    pub fn origin(mut self, origin: &'a str) -> Self {
        self.origin = Some(origin);
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

    #[inline]
    fn resolve(&self) -> Result<&'a Resource, BlockError> {
        match self.target {
            Target::Name(spillway, name) => spillway.resolve(name),
            Target::Handle(resource) => Ok(resource),
        }
    }

    #[inline]
    fn admit(&self, resource: &Resource) -> EntryState {
        let inner = &*resource.inner;
        let now = inner.core.clock.now_nanos();
        let origin = match self.origin {
            Some(origin) => inner.origin_slot(origin),
            None => OriginSlot::None,
        };
        EntryState::admit(
            inner,
            origin,
            now,
            self.count,
            self.traffic == TrafficType::Inbound,
        )
    }

    /// Attempts the entry.
    ///
    /// # Errors
    ///
    /// A [`BlockError`] saying which check refused it and why.
    #[inline]
    pub fn enter(self) -> Result<Entry<'a>, BlockError> {
        let resource = self.resolve()?;
        let state = self.admit(resource);
        Ok(Entry {
            resource: &resource.inner,
            state,
        })
    }

    /// Attempts the entry, returning an owned (`'static`) entry.
    ///
    /// # Errors
    ///
    /// A [`BlockError`] saying which check refused it and why.
    pub fn enter_owned(self) -> Result<OwnedEntry, BlockError> {
        let resource = self.resolve()?;
        let state = self.admit(resource);
        Ok(OwnedEntry {
            resource: resource.clone(),
            state,
        })
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
            .field("traffic", &self.traffic)
            .finish()
    }
}
