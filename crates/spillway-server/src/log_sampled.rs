//! Log lines for events that can come thousands of times a second (a request shadow mode
//! would have blocked): at most one line an interval, saying how many events it stands for.

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// One kind of frequent event.
#[derive(Debug)]
pub(crate) struct Sampled {
    interval: Duration,
    /// When the last line was written, and the events since then not written.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Sampled {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            state: Mutex::new((None, 0)),
        }
    }

    /// Notes one event at `now`. When a line is due (the first event, or the first one an
    /// interval after the last line), returns how many events it stands for: this one and
    /// those not written since the last line.
    pub(crate) fn note(&self, now: Instant) -> Option<u64> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (last, unwritten) = &mut *state;
        *unwritten += 1;
        if last.is_some_and(|last| now.saturating_duration_since(last) < self.interval) {
            return None;
        }
        *last = Some(now);
        Some(std::mem::take(unwritten))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_an_interval_counting_the_events_between() {
        let sampled = Sampled::new(Duration::from_secs(1));
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        assert_eq!(sampled.note(at(0)), Some(1), "the first event is written");
        for ms in 1..1000 {
            assert_eq!(sampled.note(at(ms)), None);
        }
        // 999 events unwritten, and this one.
        assert_eq!(sampled.note(at(1000)), Some(1000));
        assert_eq!(sampled.note(at(1500)), None);
        assert_eq!(sampled.note(at(5000)), Some(2));
    }
}
