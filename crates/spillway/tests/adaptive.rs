//! Adaptive limits against a simulated service on a manual clock: each algorithm's limit settles
//! near the service's concurrency (capacity x minRTT), shrinks when latency rises, recovers when
//! it falls, never leaves its bounds, and Envoy's controller measures its minRTT on schedule.

use spillway::adaptive::{
    AdaptiveLimiter, Aimd, AimdConfig, Bbr, BbrConfig, ChangeReason, EnvoyGradient,
    EnvoyGradientConfig, Gradient2, Gradient2Config, LimitAlgorithm, Outcome, Ticket, Vegas,
    VegasConfig,
};
use spillway::ManualClock;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

const MS: u64 = 1_000_000;
const WORKERS: usize = 8;
/// Each call takes 10 ms of a worker: capacity 800 a second, 8 calls in flight at most without
/// a queue.
const SERVICE: u64 = 10 * MS;

/// From `from` to `to` (nanoseconds), the service's calls take `factor` times as long, and only
/// `workers` of its workers take calls.
#[derive(Clone, Copy)]
struct Slowdown {
    from: u64,
    to: u64,
    factor: u64,
    workers: usize,
}

/// What the limit did over a run: `(time, limit)` after every completion, and the times the
/// limit changed for each reason.
struct Trace {
    limits: Vec<(u64, u32)>,
    changes: Vec<(u64, ChangeReason)>,
    completed: u64,
}

impl Trace {
    /// The mean limit over `from..to`.
    fn mean_limit(&self, from: u64, to: u64) -> f64 {
        let window: Vec<f64> = self
            .limits
            .iter()
            .filter(|(at, _)| (from..to).contains(at))
            .map(|(_, limit)| f64::from(*limit))
            .collect();
        window.iter().sum::<f64>() / window.len().max(1) as f64
    }

    fn min_limit(&self) -> u32 {
        self.limits
            .iter()
            .map(|(_, limit)| *limit)
            .min()
            .unwrap_or(0)
    }

    fn max_limit(&self) -> u32 {
        self.limits
            .iter()
            .map(|(_, limit)| *limit)
            .max()
            .unwrap_or(0)
    }
}

/// Runs `seconds` of a service of `WORKERS` workers, FIFO, with more callers than it can take:
/// whenever the limiter admits, a call enters. Returns the limit's trace.
fn run(algorithm: impl LimitAlgorithm, seconds: u64, slowdown: Option<Slowdown>) -> Trace {
    let clock = ManualClock::new();
    let limiter = AdaptiveLimiter::with_clock(algorithm, clock.clone());
    // Workers' free times, and calls in flight by completion time.
    let mut workers = [0u64; WORKERS];
    let mut calls: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut tickets: Vec<Option<Ticket>> = Vec::new();
    let mut trace = Trace {
        limits: Vec::new(),
        changes: Vec::new(),
        completed: 0,
    };
    let end = seconds * 1_000 * MS;
    let mut last_reason = ChangeReason::Initial;
    let mut now = 0;
    while now < end {
        // Admit as many as the limiter takes.
        while let Ok(ticket) = limiter.admit() {
            // FIFO: the call goes to the worker free first, among those at work then.
            let degraded = slowdown.filter(|s| (s.from..s.to).contains(&now));
            let serving = degraded.map_or(WORKERS, |s| s.workers);
            let (worker, free) = workers[..serving]
                .iter()
                .copied()
                .enumerate()
                .min_by_key(|&(_, free)| free)
                .expect("a worker");
            let start = free.max(now);
            let factor = slowdown
                .filter(|s| (s.from..s.to).contains(&start))
                .map_or(1, |s| s.factor);
            let done = start + SERVICE * factor;
            workers[worker] = done;
            calls.push(Reverse((done, tickets.len() as u64)));
            tickets.push(Some(ticket));
        }
        let Some(Reverse((done, index))) = calls.pop() else {
            break;
        };
        now = done;
        clock.set_nanos(now);
        let ticket = tickets[index as usize].take().expect("released once");
        limiter.release(ticket, Outcome::Success);
        trace.completed += 1;
        let state = limiter.state();
        trace.limits.push((now, state.limit));
        if state.last_change != last_reason || state.updates == 1 {
            trace.changes.push((now, state.last_change));
            last_reason = state.last_change;
        }
    }
    trace
}

fn second(s: f64) -> u64 {
    (s * 1e9) as u64
}

/// The service's concurrency: capacity x minRTT = `WORKERS`.
const IDEAL: f64 = WORKERS as f64;

fn gradient2() -> Gradient2 {
    Gradient2::new(Gradient2Config {
        initial_limit: 4,
        min_limit: 2,
        max_limit: 200,
        ..Gradient2Config::default()
    })
    .unwrap()
}

fn vegas() -> Vegas {
    Vegas::with_seed(
        VegasConfig {
            initial_limit: 4,
            ..VegasConfig::default()
        },
        11,
    )
    .unwrap()
}

fn aimd() -> Aimd {
    Aimd::new(AimdConfig {
        initial_limit: 4,
        min_limit: 2,
        // Twice the no-load RTT counts as a drop.
        timeout: Duration::from_millis(20),
        ..AimdConfig::default()
    })
    .unwrap()
}

fn envoy() -> EnvoyGradient {
    EnvoyGradient::with_seed(
        EnvoyGradientConfig {
            min_rtt_interval: Duration::from_secs(10),
            ..EnvoyGradientConfig::default()
        },
        5,
    )
    .unwrap()
}

fn bbr() -> Bbr {
    Bbr::new(BbrConfig {
        initial_limit: 2,
        ..BbrConfig::default()
    })
    .unwrap()
}

/// Each algorithm's steady limit, as a multiple of the service's concurrency: it must settle
/// above it (the workers kept busy) and within a few times it (the queue kept short).
fn assert_settles(name: &str, trace: &Trace, low: f64, high: f64) {
    let mean = trace.mean_limit(second(40.0), second(60.0));
    assert!(
        (low * IDEAL..=high * IDEAL).contains(&mean),
        "{name}: mean limit {mean:.1} over the last 20 s, expected {low} to {high} x {IDEAL}"
    );
}

#[test]
fn each_limit_settles_near_the_service_s_concurrency() {
    // Gradient2 allows a queue of 4 and RTTs up to 1.5 x its long-term average; Vegas a queue
    // of up to 6 x log10(limit); AIMD grows until calls pass its 20 ms timeout (2 x the
    // no-load RTT); Envoy's allows its 25% buffer and sqrt(limit) headroom.
    assert_settles("gradient2", &run(gradient2(), 60, None), 1.0, 3.0);
    assert_settles("vegas", &run(vegas(), 60, None), 1.0, 3.0);
    assert_settles("aimd", &run(aimd(), 60, None), 1.0, 2.5);
    assert_settles("envoy", &run(envoy(), 60, None), 1.0, 2.0);
    // BBR: the bandwidth-delay product, 1.25 x it one round in 8 and 0.75 x it the next, and
    // one more call a round while the RT stays within 1.2 x the calmest round's (here, a
    // queue of up to 1.6 calls on 8 workers).
    assert_settles("bbr", &run(bbr(), 60, None), 0.95, 1.3);
}

/// Three quarters of the workers stop for 10 s: the service's concurrency falls from 8 to 2, a
/// queue builds at the old limit, and latency rises.
#[test]
fn each_limit_shrinks_when_latency_rises_and_recovers_when_it_falls() {
    let slowdown = Slowdown {
        from: second(20.0),
        to: second(30.0),
        factor: 1,
        workers: 2,
    };
    for (name, trace) in [
        ("gradient2", run(gradient2(), 60, Some(slowdown))),
        ("vegas", run(vegas(), 60, Some(slowdown))),
        ("aimd", run(aimd(), 60, Some(slowdown))),
        ("envoy", run(envoy(), 60, Some(slowdown))),
        ("bbr", run(bbr(), 60, Some(slowdown))),
    ] {
        let before = trace.mean_limit(second(10.0), second(20.0));
        let during = trace.mean_limit(second(25.0), second(30.0));
        assert!(
            during <= 0.95 * before,
            "{name}: the limit did not shrink ({before:.1} before, {during:.1} during)"
        );
        let after = trace.mean_limit(second(50.0), second(60.0));
        assert!(
            after >= 0.8 * before.min(IDEAL * 2.0),
            "{name}: the limit did not recover ({before:.1} before, {after:.1} after)"
        );
    }
}

#[test]
fn no_limit_leaves_its_bounds() {
    let slowdown = Slowdown {
        from: second(10.0),
        to: second(20.0),
        factor: 20,
        workers: WORKERS,
    };
    let trace = run(gradient2(), 30, Some(slowdown));
    assert!(trace.min_limit() >= 2 && trace.max_limit() <= 200);
    let trace = run(aimd(), 30, Some(slowdown));
    assert!(trace.min_limit() >= 2 && trace.max_limit() <= 200);
    let trace = run(vegas(), 30, Some(slowdown));
    assert!(trace.min_limit() >= 1 && trace.max_limit() <= 1000);
    let trace = run(envoy(), 30, Some(slowdown));
    assert!(trace.min_limit() >= 3 && trace.max_limit() <= 1000);
    let bounded = Bbr::new(BbrConfig {
        min_limit: 4,
        initial_limit: 4,
        max_limit: 6,
        ..BbrConfig::default()
    })
    .unwrap();
    let trace = run(bounded, 30, Some(slowdown));
    assert!(trace.min_limit() >= 4 && trace.max_limit() <= 6);
}

/// The trap of Sentinel's BBR check: every call takes 5 times as long for 5 s. While they do,
/// the service's concurrency is unchanged (a fifth of the rate, five times the RT), and once
/// they are fast again, the limit must not stay at the slow service's rate times the fast RT.
#[test]
fn bbr_keeps_the_concurrency_through_a_slowdown_and_probes_back_at_once() {
    let slowdown = Slowdown {
        from: second(20.0),
        to: second(25.0),
        factor: 5,
        workers: WORKERS,
    };
    let trace = run(bbr(), 40, Some(slowdown));
    let before = trace.mean_limit(second(10.0), second(20.0));
    assert!((7.5..=10.5).contains(&before), "before: {before:.1}");
    let during = trace.mean_limit(second(22.0), second(25.0));
    assert!(
        during >= 0.8 * IDEAL,
        "the limit fell to {during:.1} during the slowdown"
    );
    // Within 2 s of the end (the last slow calls end 50 ms after it), back near 8.
    let after = trace.mean_limit(second(25.5), second(27.0));
    assert!(after >= 0.9 * IDEAL, "after: {after:.1}");
    // The gain cycle ran all along: probes above the product and drains below it.
    let reasons: Vec<ChangeReason> = trace.changes.iter().map(|(_, reason)| *reason).collect();
    for reason in [
        ChangeReason::Grew,
        ChangeReason::Probing,
        ChangeReason::Draining,
        ChangeReason::BandwidthDelay,
    ] {
        assert!(reasons.contains(&reason), "no {reason} in {reasons:?}");
    }
}

/// As the start ends (its RTs were measured with the queue it built), then every 10 s (BBR's
/// interval), the limit drops to 4 until 20 calls admitted since then have completed, and
/// comes back.
#[test]
fn bbr_measures_its_rtt_again_on_schedule() {
    let trace = run(bbr(), 45, None);
    let at = |wanted: ChangeReason| -> Vec<u64> {
        trace
            .changes
            .iter()
            .filter(|(_, reason)| *reason == wanted)
            .map(|(at, _)| *at)
            .collect()
    };
    let starts = at(ChangeReason::MeasuringMinRtt);
    let ends = at(ChangeReason::MinRttMeasured);
    assert_eq!(starts.len(), 5, "measurements began at {starts:?}");
    assert_eq!(ends.len(), 5, "measurements ended at {ends:?}");
    // The first in the first round the limit binds after the start: within its first second.
    assert!(starts[0] < second(1.0), "measurements began at {starts:?}");
    // Never at the end of a drain round, whose limit was set below the product on purpose:
    // that it bound says nothing about a queue.
    for start in &starts {
        let before = trace.changes.iter().rev().find(|(at, _)| at < start);
        assert!(
            before.is_some_and(|(_, reason)| *reason != ChangeReason::Draining),
            "a measurement at {start} right after {before:?}"
        );
    }
    for (start, end) in starts.iter().zip(&ends) {
        // 20 calls of 10 ms, 4 at a time, after the ones in flight: 50 to 70 ms.
        assert!(
            (start + 40 * MS..=start + 80 * MS).contains(end),
            "a measurement from {start} to {end}"
        );
        let during: Vec<u32> = trace
            .limits
            .iter()
            .filter(|(at, _)| (*start..*end).contains(at))
            .map(|(_, limit)| *limit)
            .collect();
        assert!(during.iter().all(|limit| *limit == 4), "{during:?}");
    }
    for pair in starts.windows(2) {
        // 10 s after the end of the last one, at the next round's end.
        let gap = pair[1] - pair[0];
        assert!(
            (second(10.0)..=second(10.3)).contains(&gap),
            "{:.3} s between measurements",
            gap as f64 / 1e9
        );
    }
}

/// From a limit of 2, the start doubles the limit each round the limit binds, until the rate
/// stops growing: well before 8 rounds (800 ms) the limit has reached the service's 8.
#[test]
fn bbr_starts_fast() {
    let trace = run(bbr(), 2, None);
    let reached = trace
        .limits
        .iter()
        .find(|(_, limit)| f64::from(*limit) >= IDEAL)
        .map(|(at, _)| *at)
        .expect("the limit reached the service's concurrency");
    assert!(reached <= second(0.8), "reached 8 at {reached} ns");
    assert!(trace.max_limit() <= 2 * WORKERS as u32 + 1);
}

/// A start that queues from its first round (an initial limit five times what the service
/// works on at once, every round full) measured no RT without a queue: the limit it ends with
/// would stand at the queue it built until the next RT measurement, 10 s later. The
/// measurement due as the start ends (in the first round after its drain that the limit
/// binds) brings it down to the service's concurrency within the first seconds.
#[test]
fn bbr_measures_its_rtt_as_the_start_ends() {
    let initial = 5 * WORKERS as u32;
    let config = BbrConfig {
        initial_limit: initial,
        ..BbrConfig::default()
    };
    let trace = run(Bbr::new(config).unwrap(), 10, None);
    let mean = trace.mean_limit(second(2.0), second(9.5));
    assert!(
        (IDEAL..=1.5 * IDEAL).contains(&mean),
        "mean limit {mean:.1} from 2 s to 9.5 s"
    );
}

#[test]
fn envoy_measures_its_min_rtt_on_schedule() {
    let trace = run(envoy(), 60, None);
    let measurements: Vec<u64> = trace
        .changes
        .iter()
        .filter(|(_, reason)| *reason == ChangeReason::MeasuringMinRtt)
        .map(|(at, _)| *at)
        .collect();
    // Every 10 s, lengthened by up to 15% (and by the 50 calls a measurement takes); the
    // service is loaded, so each pins once its limit has bound in 5 windows (of 12 minRTTs,
    // 120 ms) from the one it fell due in: at most 1.5 + 0.6 s late.
    assert!(
        (4..=6).contains(&measurements.len()),
        "measurements at {measurements:?}"
    );
    for pair in measurements.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            (second(10.0)..=second(12.1)).contains(&gap),
            "{:.3} s between measurements",
            gap as f64 / 1e9
        );
    }
    assert!(trace.completed > 0);
}

#[test]
fn bad_configurations_are_errors_that_name_the_field() {
    let bbr = |config: BbrConfig| Bbr::new(config).unwrap_err();
    let err = bbr(BbrConfig {
        round: Duration::ZERO,
        ..BbrConfig::default()
    });
    assert_eq!((err.algorithm(), err.field()), ("bbr", "round"));
    let err = bbr(BbrConfig {
        probe_gain: f64::INFINITY,
        ..BbrConfig::default()
    });
    assert_eq!(err.field(), "probe_gain");
    let err = bbr(BbrConfig {
        drain_gain: 1.5,
        ..BbrConfig::default()
    });
    assert_eq!(err.field(), "drain_gain");
    let err = bbr(BbrConfig {
        min_limit: 20,
        ..BbrConfig::default()
    });
    assert_eq!(err.field(), "initial_limit");
    let err = bbr(BbrConfig {
        filter_rounds: 0,
        ..BbrConfig::default()
    });
    assert_eq!(err.field(), "filter_rounds");

    let gradient2 = |config: Gradient2Config| Gradient2::new(config).unwrap_err();
    let err = gradient2(Gradient2Config {
        min_limit: 0,
        ..Gradient2Config::default()
    });
    assert_eq!((err.algorithm(), err.field()), ("gradient2", "min_limit"));
    let err = gradient2(Gradient2Config {
        smoothing: f64::NAN,
        ..Gradient2Config::default()
    });
    assert_eq!(err.field(), "smoothing");
    assert_eq!(
        err.to_string(),
        "gradient2: `smoothing` must be a number from 0 to 1, got NaN"
    );
    let err = gradient2(Gradient2Config {
        initial_limit: 300,
        ..Gradient2Config::default()
    });
    assert_eq!(err.field(), "max_limit");

    let err = Vegas::new(VegasConfig {
        initial_limit: 0,
        ..VegasConfig::default()
    })
    .unwrap_err();
    assert_eq!((err.algorithm(), err.field()), ("vegas", "initial_limit"));
    let err = Vegas::new(VegasConfig {
        smoothing: -0.5,
        ..VegasConfig::default()
    })
    .unwrap_err();
    assert_eq!(err.field(), "smoothing");

    let err = Aimd::new(AimdConfig {
        backoff_ratio: 1.0,
        ..AimdConfig::default()
    })
    .unwrap_err();
    assert_eq!((err.algorithm(), err.field()), ("aimd", "backoff_ratio"));
    let err = Aimd::new(AimdConfig {
        min_limit: 30,
        max_limit: 10,
        ..AimdConfig::default()
    })
    .unwrap_err();
    assert_eq!(err.field(), "max_limit");
    let err = Aimd::new(AimdConfig {
        timeout: Duration::ZERO,
        ..AimdConfig::default()
    })
    .unwrap_err();
    assert_eq!(err.field(), "timeout");

    let envoy = |config: EnvoyGradientConfig| EnvoyGradient::new(config).unwrap_err();
    let err = envoy(EnvoyGradientConfig {
        update_interval: Duration::ZERO,
        ..EnvoyGradientConfig::default()
    });
    assert_eq!(
        (err.algorithm(), err.field()),
        ("envoy_gradient", "update_interval")
    );
    let err = envoy(EnvoyGradientConfig {
        sample_percentile: 1.5,
        ..EnvoyGradientConfig::default()
    });
    assert_eq!(err.field(), "sample_percentile");
    let err = envoy(EnvoyGradientConfig {
        min_concurrency: 0,
        ..EnvoyGradientConfig::default()
    });
    assert_eq!(err.field(), "min_concurrency");
}
