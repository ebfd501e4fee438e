//! What one run measured, and the arithmetic both labs compute it with.

use crate::params::LabParams;
use crate::scenario::Scenario;
use crate::strategy::Strategy;
use serde::Serialize;
use spillway::adaptive::RttEstimates;
use std::time::Duration;

/// The width of a time-series bucket, in ns.
pub const BUCKET_NANOS: u64 = 100_000_000;
/// Buckets in the 1-second windows that goodput and p99 series are read over.
pub const WINDOW_BUCKETS: usize = 10;
/// The long run's refusals are counted in periods this long.
const TEN_SECONDS: u64 = 10_000_000_000;

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
    /// The adaptive limit's baseline RTT at `t_s` ([`RttEstimates::baseline`]: Vegas's no-load
    /// RTT, Envoy's minRTT, Gradient2's long-term average, BBR's calmest round's mean), in ms,
    /// once it has one.
    pub baseline_rtt_ms: Option<f64>,
    /// The RTT the adaptive limit last computed its limit from at `t_s`
    /// ([`RttEstimates::latest`]), in ms, once it has one.
    pub latest_rtt_ms: Option<f64>,
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
    /// Attempts admitted into the service, or waiting for a place in an adaptive limit's
    /// queue when their client gave up or the run ended (a client cannot tell a wait from
    /// work).
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
    /// `sweep`, `spike`, `slowdown` or `long_run`.
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
    /// The time series (spike, slowdown and long run; empty for a sweep).
    pub series: Vec<SeriesPoint>,
    /// The long run's refusals in each 10 s of it, from the start (empty for the other
    /// scenarios): when a protection refuses below capacity, at start-up or later.
    pub refused_by_10s: Vec<u64>,
}

/// A run's numbers and its time series ([`RunRecord::trace`]), whatever its scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Traced {
    /// The run's numbers.
    pub run: RunResult,
    /// A point a tick (100 ms), each the 1-second window ending there.
    pub trace: Vec<SeriesPoint>,
}

/// How an attempt ended for its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered within the client's timeout.
    Answered,
    /// Refused by the protection.
    Refused,
    /// The client stopped waiting.
    TimedOut,
    /// Another error: a status other than a refusal, or a broken connection (real labs).
    Failed,
}

/// One attempt as a lab saw it; times in ns from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptRecord {
    /// When it was sent (for a first attempt, its planned time).
    pub sent: u64,
    /// Whether it is a request's first attempt (else a retry).
    pub first: bool,
    /// How it ended for its client; `None` if its client still waited when the run ended.
    pub outcome: Option<Outcome>,
    /// Whether the protection admitted it.
    pub admitted: bool,
    /// When its latency ends: when its work ended (the simulation sees that even after its
    /// client left) or when its client stopped waiting (a real lab); an answered attempt's is the
    /// answer's time. `None` if it had not ended when the run did.
    pub ended: Option<u64>,
}

/// The state of a run at a sampling tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    /// When, in ns from the start of the run.
    pub at: u64,
    /// Requests in the service.
    pub in_flight: u64,
    /// The concurrency the protection admitted, where it has one.
    pub limit: Option<f64>,
    /// What the adaptive limit believed about latency (none for the other strategies).
    pub rtt: RttEstimates,
}

/// What one run saw, to be measured.
#[derive(Debug, Clone, Copy)]
pub struct RunRecord<'a> {
    /// The parameters: the capacity and the run's times.
    pub params: &'a LabParams,
    /// The scenario.
    pub scenario: Scenario,
    /// The strategy.
    pub strategy: Strategy,
    /// Every attempt, in the order they were sent.
    pub attempts: &'a [AttemptRecord],
    /// The ticks, in time order.
    pub ticks: &'a [Tick],
    /// When the run ended, in ns from its start.
    pub end: u64,
    /// Requests a real generator could not send.
    pub skipped: u64,
}

impl RunRecord<'_> {
    /// The run's numbers: over the attempts sent in the measured interval, goodput, the latency
    /// of admitted attempts (one unfinished at the end counts with its age then, a lower bound)
    /// and the counts; for a spike or a slowdown, the recovery and the time series.
    pub fn summarize(&self) -> RunResult {
        let (params, scenario) = (self.params, self.scenario);
        let from = nanos(scenario.measure_from(params));
        let arrivals_end = nanos(scenario.arrivals_end(params));
        let mut counts = Counts {
            skipped: self.skipped,
            ..Counts::default()
        };
        let mut latencies = Vec::new();
        let mut refused_by_10s = Vec::new();
        if scenario == Scenario::LongRun {
            refused_by_10s.resize((arrivals_end - from).div_ceil(TEN_SECONDS) as usize, 0);
        }
        for a in self
            .attempts
            .iter()
            .filter(|a| (from..arrivals_end).contains(&a.sent))
        {
            counts.attempts += 1;
            counts.requests += u64::from(a.first);
            match a.outcome {
                Some(Outcome::Answered) => counts.answered += 1,
                Some(Outcome::Refused) => {
                    counts.refused += 1;
                    if let Some(count) =
                        refused_by_10s.get_mut(((a.sent - from) / TEN_SECONDS) as usize)
                    {
                        *count += 1;
                    }
                }
                Some(Outcome::TimedOut) => counts.timed_out += 1,
                Some(Outcome::Failed) => counts.failed += 1,
                None => {}
            }
            if a.admitted {
                counts.admitted += 1;
                latencies.push(a.ended.unwrap_or(self.end).saturating_sub(a.sent));
            }
        }
        counts.retries = counts.attempts - counts.requests;
        latencies.sort_unstable();
        let ms = |nanos: u64| nanos as f64 / 1e6;
        let capacity = params.capacity();
        let seconds = (arrivals_end - from) as f64 / 1e9;
        let (recovery_s, series) = match scenario.trigger() {
            Some((_, trigger_end)) => {
                let answered = self.answered_per_bucket();
                let recovery =
                    recovery(&answered, nanos(trigger_end), arrivals_end, 0.9 * capacity);
                (recovery, self.series(&answered, arrivals_end))
            }
            None if scenario == Scenario::LongRun => (None, self.trace()),
            None => (None, Vec::new()),
        };
        RunResult {
            scenario: scenario.name(),
            strategy: self.strategy.name(),
            load: scenario.load(),
            goodput: counts.answered as f64 / seconds / capacity,
            mean_ms: ms(latencies.iter().sum::<u64>()) / latencies.len().max(1) as f64,
            p50_ms: ms(quantile(&latencies, 0.5)),
            p99_ms: ms(quantile(&latencies, 0.99)),
            p999_ms: ms(quantile(&latencies, 0.999)),
            recovery_s,
            counts,
            series,
            refused_by_10s,
        }
    }

    /// The run's time series, whatever its scenario: a point a tick (100 ms) up to the end of
    /// arrivals, each the 1-second window ending there: goodput, the p99 of the admitted
    /// attempts that finished in it, and at its end the requests in the service and the limit
    /// the protection admitted. [`summarize`](Self::summarize) keeps it for the scenarios with
    /// a trigger and the long run; `spillway lab --trace` prints it for a sweep, to follow a
    /// limit as it moves.
    pub fn trace(&self) -> Vec<SeriesPoint> {
        let arrivals_end = nanos(self.scenario.arrivals_end(self.params));
        self.series(&self.answered_per_bucket(), arrivals_end)
    }

    /// The run's numbers ([`summarize`](Self::summarize)) with its [`trace`](Self::trace).
    pub fn traced(&self) -> Traced {
        Traced {
            run: self.summarize(),
            trace: self.trace(),
        }
    }

    /// Answers by the 100 ms bucket they came in.
    fn answered_per_bucket(&self) -> Vec<u64> {
        let mut answered = Vec::new();
        for a in self.attempts {
            if let (Some(Outcome::Answered), Some(at)) = (a.outcome, a.ended) {
                let bucket = usize::try_from(at / BUCKET_NANOS).unwrap_or(usize::MAX - 1);
                if answered.len() <= bucket {
                    answered.resize(bucket + 1, 0);
                }
                answered[bucket] += 1;
            }
        }
        answered
    }

    /// One point a tick up to the end of arrivals: goodput and p99 over the second that ends
    /// there.
    fn series(&self, answered: &[u64], arrivals_end: u64) -> Vec<SeriesPoint> {
        let capacity = self.params.capacity();
        let window = BUCKET_NANOS * WINDOW_BUCKETS as u64;
        let mut finished: Vec<(u64, u64)> = self
            .attempts
            .iter()
            .filter(|a| a.admitted)
            .filter_map(|a| a.ended.map(|at| (at, at.saturating_sub(a.sent))))
            .collect();
        finished.sort_by_key(|&(at, _)| at);
        let mut next = 0;
        let mut points = Vec::new();
        for tick in self
            .ticks
            .iter()
            .filter(|t| t.at >= window && t.at <= arrivals_end)
        {
            let start = tick.at - window;
            let buckets = (start / BUCKET_NANOS) as usize..(tick.at / BUCKET_NANOS) as usize;
            let good: u64 = buckets.map(|b| answered.get(b).copied().unwrap_or(0)).sum();
            while next < finished.len() && finished[next].0 < start {
                next += 1;
            }
            let mut latencies: Vec<u64> = finished[next..]
                .iter()
                .take_while(|(at, _)| *at < tick.at)
                .map(|&(_, latency)| latency)
                .collect();
            latencies.sort_unstable();
            points.push(SeriesPoint {
                t_s: tick.at as f64 / 1e9,
                goodput: good as f64 / capacity,
                p99_ms: quantile(&latencies, 0.99) as f64 / 1e6,
                in_flight: tick.in_flight,
                limit: tick.limit,
                baseline_rtt_ms: tick.rtt.baseline.map(|rtt| rtt.as_secs_f64() * 1e3),
                latest_rtt_ms: tick.rtt.latest.map(|rtt| rtt.as_secs_f64() * 1e3),
            });
        }
        points
    }
}

/// A duration in ns, saturating.
pub(crate) fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
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

    const MS: u64 = 1_000_000;

    fn attempt(
        sent_ms: u64,
        first: bool,
        outcome: Outcome,
        ended_ms: Option<u64>,
    ) -> AttemptRecord {
        AttemptRecord {
            sent: sent_ms * MS,
            first,
            outcome: Some(outcome),
            admitted: outcome != Outcome::Refused,
            ended: ended_ms.map(|ms| ms * MS),
        }
    }

    #[test]
    fn a_run_is_measured_over_the_attempts_sent_after_the_warm_up() {
        let params = LabParams {
            workers: 1,
            service_time: crate::ServiceTime::Fixed {
                time: Duration::from_millis(10),
            },
            warm_up: Duration::from_secs(1),
            measure: Duration::from_secs(2),
            ..LabParams::default()
        };
        let attempts = [
            attempt(500, true, Outcome::Answered, Some(510)), // in the warm-up
            attempt(1_000, true, Outcome::Answered, Some(1_020)),
            attempt(1_100, true, Outcome::Refused, None),
            attempt(1_200, false, Outcome::TimedOut, Some(1_600)), // work ended after the client left
            attempt(2_900, true, Outcome::TimedOut, None),         // work unfinished at 4 s
            attempt(3_000, true, Outcome::Answered, Some(3_010)),  // after the arrivals ended
        ];
        let run = RunRecord {
            params: &params,
            scenario: Scenario::Sweep { load: 1.0 },
            strategy: Strategy::None,
            attempts: &attempts,
            ticks: &[],
            end: 4_000 * MS,
            skipped: 0,
        }
        .summarize();
        let c = &run.counts;
        assert_eq!((c.requests, c.retries, c.attempts), (3, 1, 4));
        assert_eq!(
            (c.answered, c.refused, c.timed_out, c.admitted),
            (1, 1, 2, 3)
        );
        // One answer in 2 s against a capacity of 100 a second.
        assert_eq!(run.goodput, 0.005);
        // Admitted latencies: 20 ms, 400 ms, and 1100 ms (unfinished: its age at the end).
        assert_eq!((run.p50_ms, run.p99_ms), (400.0, 1_100.0));
        assert_eq!(run.mean_ms, 1_520.0 / 3.0);
        assert!(run.series.is_empty() && run.recovery_s.is_none());
    }

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
