//! Calls fed to an adaptive algorithm as they end, on a nanosecond time axis.

use spillway::adaptive::{ChangeReason, LimitAlgorithm, Sample};
use std::time::Duration;

const MS: u64 = 1_000_000;

/// Feeds `algorithm` calls that end every `gap_ms` from `from_ms` to `to_ms`, each taking
/// `rtt(end)` ms and finding `in_flight(limit)` calls in flight when admitted; returns every
/// update as (the call's end in ms, the new limit, why).
pub(crate) fn feed_calls(
    algorithm: &mut dyn LimitAlgorithm,
    limit: &mut u32,
    (from_ms, to_ms, gap_ms): (u64, u64, u64),
    rtt: impl Fn(u64) -> u64,
    in_flight: impl Fn(u32) -> u32,
) -> Vec<(u64, u32, ChangeReason)> {
    let mut updates = Vec::new();
    let mut end = from_ms;
    while end < to_ms {
        let rtt_ms = rtt(end);
        let sample = Sample {
            started_nanos: (end - rtt_ms) * MS,
            rtt: Duration::from_millis(rtt_ms),
            in_flight: in_flight(*limit),
            dropped: false,
        };
        if let Some(update) = algorithm.on_sample(&sample, end * MS, *limit) {
            *limit = update.limit;
            updates.push((end, update.limit, update.reason));
        }
        end += gap_ms;
    }
    updates
}

/// A call that ends at `end_ms` after `rtt_ms`, admitted with `in_flight` calls in flight.
pub(crate) fn call(end_ms: u64, rtt_ms: u64, in_flight: u32) -> Sample {
    Sample {
        started_nanos: (end_ms - rtt_ms) * MS,
        rtt: Duration::from_millis(rtt_ms),
        in_flight,
        dropped: false,
    }
}
