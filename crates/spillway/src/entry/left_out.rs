//! Time an owned entry's call spent waiting on its caller, left out of its response time.

/// [`LeftOut::since`] when no wait on the caller is open.
const NOT_WAITING: u64 = u64::MAX;

/// The time an [`OwnedEntry`](crate::OwnedEntry)'s call waited on its caller (a slow upload, a
/// slow reader): closed waits summed, and the open one's start. Two words, on the owned entry
/// alone, so that the borrowed [`Entry`](crate::Entry) stays five (`entry::layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeftOut {
    /// Nanoseconds of the closed waits.
    total: u64,
    /// When the open wait began, or [`NOT_WAITING`].
    since: u64,
}

impl LeftOut {
    /// Nothing left out.
    pub(crate) const NONE: Self = Self {
        total: 0,
        since: NOT_WAITING,
    };

    /// Whether nothing is left out, and no wait is open.
    #[inline(always)]
    pub(crate) fn is_none(&self) -> bool {
        *self == Self::NONE
    }

    /// Leaves `nanos` more out.
    pub(crate) fn add(&mut self, nanos: u64) {
        self.total = self.total.saturating_add(nanos);
    }

    /// A wait on the caller begins at `now` (none if one is open).
    pub(crate) fn begin(&mut self, now: u64) {
        if self.since == NOT_WAITING {
            self.since = now.min(NOT_WAITING - 1);
        }
    }

    /// The open wait, if any, ends at `now`.
    pub(crate) fn end(&mut self, now: u64) {
        if self.since != NOT_WAITING {
            self.add(now.saturating_sub(self.since));
            self.since = NOT_WAITING;
        }
    }

    /// Whether a wait is open.
    pub(crate) fn waiting(&self) -> bool {
        self.since != NOT_WAITING
    }

    /// Nanoseconds left out at `now`: the closed waits and the open one up to `now`.
    pub(crate) fn at(&self, now: u64) -> u64 {
        let mut left = *self;
        left.end(now);
        left.total
    }
}

#[cfg(test)]
mod tests {
    use super::LeftOut;

    #[test]
    fn closed_and_open_waits_add_up() {
        let mut left = LeftOut::NONE;
        assert!(left.is_none());
        left.begin(10);
        left.begin(15); // already open: its start stays
        assert!(left.waiting());
        assert_eq!(left.at(30), 20);
        left.end(40);
        left.end(50); // none open
        assert_eq!(left.at(100), 30);
        left.add(5);
        left.begin(200);
        assert_eq!(left.at(201), 36);
        assert_eq!(left.at(100), 35); // a clock read behind the start adds nothing
    }

    #[test]
    fn it_saturates() {
        let mut left = LeftOut::NONE;
        left.add(u64::MAX - 1);
        left.begin(0);
        assert_eq!(left.at(u64::MAX), u64::MAX);
    }
}
