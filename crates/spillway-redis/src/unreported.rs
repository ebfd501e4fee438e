//! The passes a fallback admitted that Redis never counted: kept by the time they were admitted,
//! for as long as a window of the limit could still hold them, and reported to Redis when it
//! answers again, so that the first window after a failure counts what the fleet admitted
//! during it (a Redis that kept its state, or one that restarted empty alike).

use std::collections::VecDeque;

/// The width of a slot of the ledger, in milliseconds.
const SLOT_MS: u64 = 100;

/// Passes admitted without Redis, by 100 ms slot of this process's clock.
#[derive(Debug, Default)]
pub(crate) struct Unreported {
    /// (slot start in ms, passes), oldest first.
    slots: VecDeque<(u64, u64)>,
}

/// Passes to report: how long ago (the newest time they may have been admitted at) and how
/// many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Report {
    /// Milliseconds before the report's time.
    pub(crate) age_ms: u64,
    /// Passes.
    pub(crate) count: u64,
}

impl Unreported {
    /// `count` passes admitted at `now_ms`; slots older than `keep_ms` are dropped.
    pub(crate) fn add(&mut self, now_ms: u64, count: u64, keep_ms: u64) {
        let slot = now_ms - now_ms % SLOT_MS;
        match self.slots.back_mut() {
            Some((start, passes)) if *start == slot => *passes += count,
            _ => self.slots.push_back((slot, count)),
        }
        self.forget_before(now_ms, keep_ms);
    }

    /// Takes what is still within `keep_ms` of `now_ms`, summed by groups of `group_ms` (a
    /// window's bucket width: one report per bucket it can land in), each at the age of the
    /// newest time any of its passes may have been admitted at (the end of its last slot), so
    /// that it stays counted at least as long as it should, and is known to be older than a
    /// bucket made after it.
    pub(crate) fn take(&mut self, now_ms: u64, keep_ms: u64, group_ms: u64) -> Vec<Report> {
        self.forget_before(now_ms, keep_ms);
        let group_ms = group_ms.max(1);
        // (group, passes, the start of its last slot)
        let mut reports: Vec<(u64, u64, u64)> = Vec::new();
        for (start, passes) in self.slots.drain(..) {
            let group = start / group_ms;
            match reports.last_mut() {
                Some((last, sum, last_slot)) if *last == group => {
                    *sum += passes;
                    *last_slot = start;
                }
                _ => reports.push((group, passes, start)),
            }
        }
        reports
            .into_iter()
            .map(|(group, count, last_slot)| {
                let newest = ((group + 1) * group_ms - 1)
                    .min(last_slot + SLOT_MS - 1)
                    .min(now_ms);
                Report {
                    age_ms: now_ms.saturating_sub(newest),
                    count,
                }
            })
            .collect()
    }

    /// Puts back `reports` taken at `now_ms` that could not be sent.
    pub(crate) fn restore(&mut self, now_ms: u64, reports: &[Report], keep_ms: u64) {
        let mut back: Vec<(u64, u64)> = reports
            .iter()
            .map(|report| {
                let at = now_ms.saturating_sub(report.age_ms);
                (at - at % SLOT_MS, report.count)
            })
            .collect();
        back.extend(self.slots.drain(..));
        back.sort_unstable();
        for (start, passes) in back {
            match self.slots.back_mut() {
                Some((last, sum)) if *last == start => *sum += passes,
                _ => self.slots.push_back((start, passes)),
            }
        }
        self.forget_before(now_ms, keep_ms);
    }

    /// Drops the slots that ended `keep_ms` or more before `now_ms`.
    fn forget_before(&mut self, now_ms: u64, keep_ms: u64) {
        while let Some(&(start, _)) = self.slots.front() {
            if start + SLOT_MS + keep_ms <= now_ms {
                self.slots.pop_front();
            } else {
                break;
            }
        }
    }

    /// Whether nothing is waiting to be reported.
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_are_reported_by_group_at_their_newest_age_and_old_ones_forgotten() {
        let mut ledger = Unreported::default();
        // A second's window in 500 ms buckets: passes at 100, 450, 620 and 990 ms.
        ledger.add(100, 1, 1000);
        ledger.add(450, 2, 1000);
        ledger.add(620, 4, 1000);
        ledger.add(990, 8, 1000);
        let reports = ledger.take(1000, 1000, 500);
        assert_eq!(
            reports,
            [
                // 0-499: newest 499, 501 ms before.
                Report {
                    age_ms: 501,
                    count: 3
                },
                // 500-999: newest 999.
                Report {
                    age_ms: 1,
                    count: 12
                },
            ]
        );
        assert!(ledger.is_empty());
        // Put back, then 1.2 s on: the slot of 100 ms and the one of 400 ms are past keeping.
        ledger.restore(1000, &reports, 1000);
        let later = ledger.take(1550, 1000, 500);
        let total: u64 = later.iter().map(|r| r.count).sum();
        assert_eq!(
            total, 12,
            "only the 500-999 ms passes are still in a window"
        );
    }

    #[test]
    fn a_report_is_as_old_as_the_end_of_its_last_slot() {
        let mut ledger = Unreported::default();
        // Passes at 620 ms only: in the 500-999 group, admitted by 699 ms at the latest.
        ledger.add(620, 5, 1000);
        let reports = ledger.take(1000, 1000, 500);
        assert_eq!(
            reports,
            [Report {
                age_ms: 301,
                count: 5
            }]
        );
    }
}
