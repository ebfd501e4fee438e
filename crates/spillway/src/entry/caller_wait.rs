//! The time an owned entry's call waited on its caller, which tells whether its caller paced
//! it.

/// [`CallerTime::since`] when no wait on the caller is open.
const NOT_WAITING: u64 = u64::MAX;

/// A call is paced by its caller when it waited on its caller for more than this share of its
/// time (a quarter) ...
const PACED_SHARE: u64 = 4;

/// ... and for more than this many nanoseconds, so that the microseconds a fast call spends
/// between two frames of its response do not make it paced.
const PACED_MIN_NANOS: u64 = 250_000;

/// The time an [`OwnedEntry`](crate::OwnedEntry)'s call waited on its caller (a slow upload,
/// a slow reader): closed waits summed, and the open one's start. Two words, on the owned entry
/// alone, so that the borrowed [`Entry`](crate::Entry) stays five (`entry::layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallerTime {
    /// Nanoseconds of the closed waits.
    total: u64,
    /// When the open wait began, or [`NOT_WAITING`].
    since: u64,
}

impl CallerTime {
    /// No wait.
    pub(crate) const NONE: Self = Self {
        total: 0,
        since: NOT_WAITING,
    };

    /// Whether there was no wait, and none is open.
    #[inline(always)]
    pub(crate) fn is_none(&self) -> bool {
        *self == Self::NONE
    }

    /// Adds `nanos` of waiting.
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

    /// Nanoseconds waited at `now`: the closed waits and the open one up to `now`.
    pub(crate) fn at(&self, now: u64) -> u64 {
        let mut waited = *self;
        waited.end(now);
        waited.total
    }

    /// Whether a call that started at `started` and ends at `now` was paced by its caller: it
    /// waited on it for more than a quarter of its time, and more than 250 µs.
    pub(crate) fn paced(&self, started: u64, now: u64) -> bool {
        paced_nanos(self.at(now), now.saturating_sub(started))
    }
}

/// Whether a call that took `took` and waited on its caller for `waited` of it was paced by its
/// caller: it waited for more than a quarter of its time, and more than 250 µs. Such a call's
/// time says as much about its caller as about the service: it is no latency sample for an
/// adaptive limit and no verdict for a slow-call breaker (see
/// [`OwnedEntry::set_waiting_on_caller`](crate::OwnedEntry::set_waiting_on_caller)), and a
/// caller that runs a call out of its time by pacing it is at fault, not the service (the
/// `spillway` binary answers such a call 408).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let (ms, us) = (Duration::from_millis, Duration::from_micros);
/// assert!(spillway::paced_by_caller(ms(300), ms(1_000)));
/// assert!(!spillway::paced_by_caller(ms(250), ms(1_000)), "a quarter is not more");
/// assert!(!spillway::paced_by_caller(us(200), us(300)), "nor 250 µs or less");
/// ```
pub fn paced_by_caller(waited: std::time::Duration, took: std::time::Duration) -> bool {
    let nanos = |time: std::time::Duration| u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
    paced_nanos(nanos(waited), nanos(took))
}

/// [`paced_by_caller`] in nanoseconds.
fn paced_nanos(waited: u64, took: u64) -> bool {
    waited > PACED_MIN_NANOS && waited > took / PACED_SHARE
}

#[cfg(test)]
mod tests {
    use super::CallerTime;

    #[test]
    fn closed_and_open_waits_add_up() {
        let mut waited = CallerTime::NONE;
        assert!(waited.is_none());
        waited.begin(10);
        waited.begin(15); // already open: its start stays
        assert!(waited.waiting());
        assert_eq!(waited.at(30), 20);
        waited.end(40);
        waited.end(50); // none open
        assert_eq!(waited.at(100), 30);
        waited.add(5);
        waited.begin(200);
        assert_eq!(waited.at(201), 36);
        assert_eq!(waited.at(100), 35); // a clock read behind the start adds nothing
    }

    #[test]
    fn it_saturates() {
        let mut waited = CallerTime::NONE;
        waited.add(u64::MAX - 1);
        waited.begin(0);
        assert_eq!(waited.at(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_call_is_paced_past_a_quarter_of_its_time_and_250_microseconds() {
        let ms = 1_000_000;
        let mut waited = CallerTime::NONE;
        waited.add(25 * ms);
        assert!(
            !waited.paced(0, 100 * ms),
            "a quarter is not more than a quarter"
        );
        assert!(waited.paced(0, 99 * ms));
        let mut fast = CallerTime::NONE;
        fast.add(200_000);
        assert!(!fast.paced(0, 300_000), "two thirds, but only 200 µs");
        fast.add(60_000);
        assert!(fast.paced(0, 300_000));
    }
}
