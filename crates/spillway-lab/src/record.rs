//! What one run measured, and the arithmetic both labs compute it with.

use serde::Serialize;

/// The width of a time-series bucket, in ns.
pub const BUCKET_NANOS: u64 = 100_000_000;
/// Buckets in the 1-second windows that goodput and p99 series are read over.
pub const WINDOW_BUCKETS: usize = 10;

/// One point of a run's time series: the 1-second window ending at `t_s`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesPoint {
    /// Seconds from the start of the run (the window's end).
    pub t_s: f64,
    /// Answers within the client timeout over the window, as a fraction of capacity.
    pub goodput: f64,
    /// The p99 latency of the admitted requests that finished in the window, in ms (0 if none).
    pub p99_ms: f64,
    /// Requests in the service (queued or in work) at `t_s`.
    pub in_flight: u64,
    /// The concurrency the protection admitted at `t_s`, where it has one (static concurrency,
    /// or the BBR estimate `max_success_qps x min_rt` while BBR is checked).
    pub limit: Option<f64>,
}

/// The counts of one run, over the attempts sent in the measured interval.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Requests (first attempts) sent.
    pub requests: u64,
    /// Attempts sent: requests plus retries.
    pub attempts: u64,
    /// Retries sent.
    pub retries: u64,
    /// Attempts admitted into the service.
    pub admitted: u64,
    /// Attempts refused by the protection.
    pub refused: u64,
    /// Attempts answered within the client timeout.
    pub answered: u64,
    /// Attempts whose client stopped waiting.
    pub timed_out: u64,
    /// Attempts that ended in an error other than a refusal: another status or a broken
    /// connection (real labs only; always 0 in the simulation).
    pub failed: u64,
    /// Requests a real load generator could not send because too many were outstanding
    /// (always 0 in the simulation).
    pub skipped: u64,
}

/// One run: a strategy in a scenario at a load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    /// `sweep`, `spike` or `slowdown`.
    pub scenario: &'static str,
    /// The strategy's name.
    pub strategy: &'static str,
    /// The (base) offered load as a multiple of capacity.
    pub load: f64,
    /// Answers within the client timeout per second, as a fraction of capacity.
    pub goodput: f64,
    /// Mean latency of the admitted attempts, in ms.
    pub mean_ms: f64,
    /// Latency of the admitted attempts (from send to the end of their work), in ms.
    pub p50_ms: f64,
    /// See `p50_ms`.
    pub p99_ms: f64,
    /// See `p50_ms`.
    pub p999_ms: f64,
    /// Seconds from the trigger's end to the start of the first 1-second window with goodput of
    /// at least 90% of capacity (spike and slowdown); `None` if none comes before the run ends.
    pub recovery_s: Option<f64>,
    /// The counts.
    pub counts: Counts,
    /// The time series (spike and slowdown; empty for a sweep).
    pub series: Vec<SeriesPoint>,
}

/// The value at quantile `q` of `sorted` (nearest rank), 0 if there are none.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Seconds from `trigger_end` to the first 1-second window (stepping one bucket) whose answers
/// reach `threshold`, among windows that end by `run_end` (times in ns from the start of the run;
/// `answered_per_bucket` counts answers by the bucket they came in).
pub fn recovery(
    answered_per_bucket: &[u64],
    trigger_end: u64,
    run_end: u64,
    threshold: f64,
) -> Option<f64> {
    let first = usize::try_from(trigger_end / BUCKET_NANOS).ok()?;
    let last = usize::try_from(run_end / BUCKET_NANOS).ok()?;
    (first..=last.saturating_sub(WINDOW_BUCKETS))
        .find(|&start| {
            let window = answered_per_bucket.get(start..start + WINDOW_BUCKETS);
            window.is_some_and(|w| w.iter().sum::<u64>() as f64 >= threshold)
        })
        .map(|start| (start - first) as f64 * BUCKET_NANOS as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let values: Vec<u64> = (1..=1000).collect();
        assert_eq!(quantile(&values, 0.5), 500);
        assert_eq!(quantile(&values, 0.99), 990);
        assert_eq!(quantile(&values, 0.999), 999);
        assert_eq!(quantile(&values, 1.0), 1000);
        assert_eq!(quantile(&[7], 0.99), 7);
        assert_eq!(quantile(&[], 0.99), 0);
    }

    #[test]
    fn recovery_is_the_start_of_the_first_good_window() {
        // 100 ms buckets; the trigger ends at 1 s; 10 answers a bucket from 1.5 s on.
        let mut answered = vec![0u64; 40];
        for bucket in answered.iter_mut().skip(15) {
            *bucket = 10;
        }
        let end = 1_000_000_000;
        assert_eq!(recovery(&answered, end, 4_000_000_000, 100.0), Some(0.5));
        assert_eq!(recovery(&answered, end, 4_000_000_000, 101.0), None);
        // A window must end by the end of the run.
        assert_eq!(recovery(&answered, end, 2_400_000_000, 100.0), None);
    }
}
