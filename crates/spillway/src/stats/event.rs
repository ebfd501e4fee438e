/// What a window bucket counts.
///
/// The names follow Sentinel's `MetricEvent`. Note Sentinel's meaning of *success*: every
/// completed entry, whether or not it was marked as an error; [`Event::Error`] counts the subset
/// marked as errors, and [`Event::Rt`] sums the response times of all completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event {
    /// Entries admitted.
    Pass,
    /// Entries refused.
    Block,
    /// Entries completed (Sentinel's "success": completed, with or without error).
    Success,
    /// Completed entries marked as errors.
    Error,
    /// Sum of response times of completed entries, in microseconds.
    Rt,
    /// Entries admitted by borrowing from a future window (Sentinel's occupy mechanism).
    OccupiedPass,
}

impl Event {
    /// Every event, in storage order.
    pub const ALL: [Event; 6] = [
        Event::Pass,
        Event::Block,
        Event::Success,
        Event::Error,
        Event::Rt,
        Event::OccupiedPass,
    ];

    /// Storage slot of the event inside a bucket.
    pub(crate) const fn slot(self) -> usize {
        match self {
            Event::Pass => 0,
            Event::Block => 1,
            Event::Success => 2,
            Event::Error => 3,
            Event::Rt => 4,
            Event::OccupiedPass => 5,
        }
    }
}

/// Slot of the minimum response time inside a bucket (after the summed events).
pub(crate) const MIN_RT_SLOT: usize = 6;
/// Number of atomic words in a bucket.
pub(crate) const SLOTS: usize = 7;
