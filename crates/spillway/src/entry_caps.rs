//! How many rules' state one entry carries inline (so that entering never allocates): read by
//! the entry's holdings and by the flow rules that must fit in them.

/// Most queueing (throttle or warm-up + throttle) rules one entry may be queued by.
pub(crate) const MAX_QUEUED: usize = 4;

/// Most QPS reject rules of one resource that count their own admissions for one entry.
pub(crate) const MAX_COUNTED: usize = 4;
