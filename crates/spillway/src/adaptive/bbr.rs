//! A BBR that recovers: the limit is the measured bandwidth-delay product (Sentinel's
//! `maxSuccessQps x minRt`), with a robust RT estimate and TCP BBR's gain cycle, which probes
//! upward so that a limit that shrank grows back.

use super::algorithm::{ChangeReason, LimitAlgorithm, LimitUpdate, RttEstimates};
use super::error::{AdaptiveError, Check};
use super::sample::Sample;
use std::collections::VecDeque;
use std::time::Duration;

/// The probing BBR's settings. The gains are TCP BBR's (version 1) but for the startup gain,
/// which is 2 (BBR's `2 / ln 2`, about 2.89, overshoots a service's queue more than a link's).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct BbrConfig {
    /// How long a round lasts: the limit moves once a round (default 100 ms).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub round: Duration,
    /// A round ends only once it has this many completed calls (default 20): fewer say too
    /// little about the rate and the RT.
    pub min_samples: u32,
    /// How many rounds the bandwidth and RT filters remember (default 10). Both remember as
    /// long, so that after the service changes speed they describe the same service.
    pub filter_rounds: u32,
    /// The gain of the start, per round, while the rate keeps growing (default 2).
    pub startup_gain: f64,
    /// The gain of the probing round, one round in 8 (BBR: 1.25).
    pub probe_gain: f64,
    /// The gain of the round after it, which drains the queue the probe built (BBR: 0.75).
    pub drain_gain: f64,
    /// How long after the last RT measurement the next is due (BBR: 10 s); it runs at
    /// `probe_rtt_limit` at the end of the first round the limit binds after that. The first
    /// is due as the start ends.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub probe_rtt_interval: Duration,
    /// The limit while the RT is measured again (BBR: 4), raised to `min_limit` if below it.
    pub probe_rtt_limit: u32,
    /// The limit before anything is measured (default 10).
    pub initial_limit: u32,
    /// The floor (default 1).
    pub min_limit: u32,
    /// The ceiling (default 1000).
    pub max_limit: u32,
    /// How many standard errors each round's mean RT is raised by before the RT filter takes
    /// the smallest, from 0 to 3 (default 0: the calmest round's mean as measured).
    ///
    /// The smallest of several noisy means is below their true mean: by about 1.5 standard
    /// errors for ten rounds. On a service whose calls vary a lot and whose rounds hold few of
    /// them (a slow service: 40 calls a round at 400 a second), that puts the RT, and with it
    /// the limit, well below the service's, and a smaller limit makes rounds with fewer calls
    /// and a lower RT again: on 32 workers of 80 ms the limit falls to a fifth of what the
    /// service can take. A correction of 1 raises each round's mean by `sd / sqrt(calls)`, the
    /// spread of the filter's calls about their rounds' means (pooled over its rounds) over the
    /// root of the round's calls, which stops the fall; on a service of a few workers it lets
    /// a longer queue stand (docs/config.md gives the lab's numbers). A service whose calls
    /// all take the same time is not changed.
    pub rtt_correction: f64,
}

impl Default for BbrConfig {
    fn default() -> Self {
        Self {
            round: Duration::from_millis(100),
            min_samples: 20,
            filter_rounds: 10,
            startup_gain: 2.0,
            probe_gain: 1.25,
            drain_gain: 0.75,
            probe_rtt_interval: Duration::from_secs(10),
            probe_rtt_limit: 4,
            initial_limit: 10,
            min_limit: 1,
            max_limit: 1000,
            rtt_correction: 0.0,
        }
    }
}

impl BbrConfig {
    /// Checks the settings: a round and an RT measurement interval longer than 0, at least
    /// one sample a round, one round in the filters and a limit of 1 while measuring the RT,
    /// `1 <= startup_gain <= 4`, `1 <= probe_gain <= 2`, `0.5 <= drain_gain <= 1`,
    /// `0 <= rtt_correction <= 3`, and `1 <= min_limit <= initial_limit <= max_limit`.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] naming the first field at fault.
    pub fn validate(&self) -> Result<(), AdaptiveError> {
        let check = Check { algorithm: "bbr" };
        check.nonzero_duration("round", self.round)?;
        check.positive("min_samples", self.min_samples)?;
        check.positive("filter_rounds", self.filter_rounds)?;
        check.within("startup_gain", self.startup_gain, 1.0, 4.0)?;
        check.within("probe_gain", self.probe_gain, 1.0, 2.0)?;
        check.within("drain_gain", self.drain_gain, 0.5, 1.0)?;
        check.within("rtt_correction", self.rtt_correction, 0.0, 3.0)?;
        check.nonzero_duration("probe_rtt_interval", self.probe_rtt_interval)?;
        check.positive("probe_rtt_limit", self.probe_rtt_limit)?;
        check.limits(self.min_limit, self.initial_limit, self.max_limit)
    }
}

/// Rounds in one gain cycle: a probe, a drain, six cruising.
const CYCLE: u8 = 8;

/// Rounds without 25% more rate after which the start ends (BBR's full-pipe test).
const FULL_PIPE_ROUNDS: u32 = 3;

/// One call in this many (or more) filled the limit: the round was limited. (1 in 10 lets
/// bursts at low load lower the limit; 1 in 2 misses a slowdown: measured in the lab.)
const LIMITED_SHARE: u32 = 4;

/// A round whose mean RT is at most this many times the calmest round's saw no queue.
const NO_QUEUE_RTT: f64 = 1.2;

/// Where the algorithm is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Multiplying the limit while the rate keeps growing.
    Startup { best_rate: f64, flat_rounds: u32 },
    /// The gain cycle, at this round of it.
    Cycle(u8),
    /// Measuring the RT again at a small limit, with the calls admitted since `epoch`; then back
    /// to the gain cycle at round `resume`.
    ProbeRtt {
        epoch: u64,
        resume: u8,
        count: u32,
        rtt_sum_nanos: u128,
        /// The sum of the RTs' squares, in seconds squared.
        rtt_squares: f64,
    },
}

/// What one round measured.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Round {
    /// Calls completed (not dropped) a second.
    rate: f64,
    /// Their mean RT, when any completed.
    rtt: Option<Duration>,
    /// How many calls the mean is of.
    calls: u64,
    /// The sum of their RTs' squared deviations from the mean, in seconds squared.
    deviations: f64,
}

impl Round {
    /// A round of `calls` calls whose RTs sum to `rtt_sum_nanos` and their squares to
    /// `rtt_squares` (seconds squared), `rate` a second.
    fn of(rate: f64, calls: u64, rtt_sum_nanos: u128, rtt_squares: f64) -> Self {
        let rtt = (calls > 0).then(|| {
            let mean = rtt_sum_nanos / u128::from(calls);
            Duration::from_nanos(u64::try_from(mean).unwrap_or(u64::MAX))
        });
        // About the exact mean (the kept one is rounded down to the nanosecond).
        let deviations = match calls {
            0 => 0.0,
            calls => {
                let mean = rtt_sum_nanos as f64 / 1e9 / calls as f64;
                (rtt_squares - calls as f64 * mean * mean).max(0.0)
            }
        };
        Self {
            rate,
            rtt,
            calls,
            deviations,
        }
    }
}

/// The round being measured.
#[derive(Debug, Clone, Copy, Default)]
struct Open {
    start: Option<u64>,
    count: u32,
    delivered: u64,
    rtt_sum_nanos: u128,
    /// The sum of the delivered calls' RTs' squares, in seconds squared.
    rtt_squares: f64,
    /// Calls that filled the limit when admitted.
    limited: u32,
}

/// A BBR for services: it limits calls in flight to the bandwidth-delay product the service
/// has shown, `max rate x RT`, and keeps probing for more.
///
/// Sentinel's BBR check (`threads > maxSuccessQps x minRt`, in [`system`](crate::system))
/// measures its limit on the traffic it admits, so once the limit shrinks nothing makes it grow,
/// and its minimum RT, the fastest single call, is far below a variable service's mean: after a
/// slowdown it can stay at a fraction of capacity for good. This one differs in five ways:
///
/// - **A robust RT.** Each round's RT is the mean of its calls, and the estimate is the
///   smallest round mean in the filter: the calmest round, which one fast call cannot drag
///   down (kratos' BBR estimates its minimum RT the same way). The smallest of noisy means is
///   below their mean, so [`BbrConfig::rtt_correction`] can first raise each round's mean by
///   that many standard errors: off by default, for slow services whose calls vary.
/// - **Filters of one length.** The rate (largest round rate) and the RT (smallest round mean)
///   are remembered for the same `filter_rounds`, so that after the service changes speed both
///   describe the new service, and their product stays its concurrency.
/// - **It probes.** The limit is `gain x max rate x RT`, the gain cycling through TCP BBR's
///   `probe_gain`, `drain_gain` and six rounds of 1: the probe admits more than the pipe held,
///   and if the service delivers more, the rate filter and the limit grow; the drain empties the
///   queue the probe built, which keeps the RT estimate clean. From the start (and until the
///   rate stops growing by 25% for 3 rounds) the limit doubles each round it is reached.
/// - **It measures the RT again** (BBR's ProbeRTT): as the start ends and then every
///   `probe_rtt_interval`, at the end of the first round the limit binds (a drain round does
///   not count: its limit is below the product on purpose), the limit drops to
///   `probe_rtt_limit` until `min_samples` calls admitted since then complete, and their mean
///   RT joins the filter. Without it, a limit above what the service can work on at once would
///   hold: every round would queue, and `rate x RT` of a queue is just the calls in flight
///   (Little's law), so it would measure the limit itself. That is why the first is due as the
///   start ends: a start under overload queues from its first round, so every RT it measured
///   had a queue in it. While the limit does not bind, the RT is the service's, and it waits:
///   a service below its limit is not refused for the measurement.
/// - **Bursts are not overload.** A limit at the product is the service's mean concurrency,
///   and random arrivals fill it at times well below capacity: the refused calls lower the
///   rate, and with it the next limit, round after round, until the limit sits well below
///   capacity and stays there (the lab's 4-worker service never recovered after a slowdown).
///   So a round the limit bound while
///   its mean RT stayed within 1.2 times the calmest round's, which shows the service had room,
///   raises the limit one call above the product, or above the limit.
///
/// A round the limit did not bind (the offered load was below it) cannot lower the limit: the
/// rate it measured is the load's, not the service's.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{Bbr, BbrConfig, LimitAlgorithm, Sample};
/// use std::time::Duration;
///
/// let config = BbrConfig { initial_limit: 4, min_samples: 40, ..Default::default() };
/// let mut bbr = Bbr::new(config)?;
/// let ms = 1_000_000;
/// // A service of 10 ms calls, the limit of 4 full: every 10 ms, 4 calls complete.
/// let mut limit = bbr.initial_limit();
/// for end in (10..=100).step_by(10) {
///     let sample = Sample {
///         started_nanos: (end - 10) * ms,
///         rtt: Duration::from_millis(10),
///         in_flight: 4,
///         dropped: false,
///     };
///     for _ in 0..4 {
///         if let Some(update) = bbr.on_sample(&sample, end * ms, limit) {
///             limit = update.limit;
///         }
///     }
/// }
/// // The first round: 40 calls in 100 ms, 400 a second x 10 ms = 4 in flight, and the start
/// // doubles it.
/// assert_eq!(limit, 8);
/// assert_eq!(bbr.estimates().baseline, Some(Duration::from_millis(10)));
/// # Ok::<(), spillway::adaptive::AdaptiveError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Bbr {
    config: BbrConfig,
    phase: Phase,
    open: Open,
    rounds: VecDeque<Round>,
    /// When the RT is next measured at the small limit (set when the start ends).
    next_probe_rtt: Option<u64>,
}

impl Bbr {
    /// The algorithm with `config`.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] if `config` does not [validate](BbrConfig::validate).
    pub fn new(config: BbrConfig) -> Result<Self, AdaptiveError> {
        config.validate()?;
        Ok(Self {
            config,
            phase: Phase::Startup {
                best_rate: 0.0,
                flat_rounds: 0,
            },
            open: Open::default(),
            rounds: VecDeque::new(),
            next_probe_rtt: None,
        })
    }

    /// Whether the start is over (the gain cycle runs, or the RT is being measured again).
    pub fn is_cycling(&self) -> bool {
        !matches!(self.phase, Phase::Startup { .. })
    }

    /// Whether the RT is being measured again at the small limit now.
    pub fn is_probing_rtt(&self) -> bool {
        matches!(self.phase, Phase::ProbeRtt { .. })
    }

    fn nanos(duration: Duration) -> u64 {
        u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
    }

    /// The limit that fits the filters' bandwidth-delay product times `gain`, when the filters
    /// hold an RT.
    fn bdp_limit(&self, gain: f64) -> Option<u32> {
        let bdp = self.max_rate() * self.min_rtt()?.as_secs_f64();
        Some((gain * bdp).ceil().min(f64::from(u32::MAX)) as u32)
    }

    fn clamp(&self, limit: u32) -> u32 {
        limit.clamp(self.config.min_limit, self.config.max_limit)
    }

    /// While the RT is measured again: counts `sample` if it was admitted since the
    /// measurement began; once `min_samples` are in, their mean RT joins the RT filter, the
    /// gain cycle resumes, and the limit is the new bandwidth-delay product.
    fn probe_rtt(&mut self, sample: &Sample, now: u64) -> Option<LimitUpdate> {
        let Phase::ProbeRtt {
            epoch,
            resume,
            count,
            rtt_sum_nanos,
            rtt_squares,
        } = &mut self.phase
        else {
            return None;
        };
        if sample.started_nanos < *epoch || sample.dropped {
            return None;
        }
        *count += 1;
        *rtt_sum_nanos += sample.rtt.as_nanos();
        *rtt_squares += sample.rtt.as_secs_f64().powi(2);
        if *count < self.config.min_samples {
            return None;
        }
        let round = Round::of(0.0, u64::from(*count), *rtt_sum_nanos, *rtt_squares);
        self.phase = Phase::Cycle(*resume);
        self.push(round);
        self.open = Open {
            start: Some(now),
            ..Open::default()
        };
        self.next_probe_rtt = Some(now.saturating_add(Self::nanos(self.config.probe_rtt_interval)));
        let limit = self.clamp(self.bdp_limit(1.0)?);
        Some(LimitUpdate::new(limit, ChangeReason::MinRttMeasured))
    }

    fn push(&mut self, round: Round) {
        self.rounds.push_back(round);
        while self.rounds.len() > self.config.filter_rounds as usize {
            self.rounds.pop_front();
        }
    }

    /// The largest round rate in the filter, calls a second.
    fn max_rate(&self) -> f64 {
        self.rounds
            .iter()
            .map(|round| round.rate)
            .fold(0.0, f64::max)
    }

    /// The RT estimate: the smallest round mean RT in the filter, each raised by
    /// `rtt_correction` standard errors.
    fn min_rtt(&self) -> Option<Duration> {
        let means = self.rounds.iter().filter_map(|round| round.rtt);
        let correction = self.config.rtt_correction;
        if correction == 0.0 {
            return means.min();
        }
        let variance = self.pooled_variance();
        self.rounds
            .iter()
            .filter_map(|round| {
                // A round with an RT has at least one call.
                let rtt = round.rtt?;
                let error = correction * (variance / round.calls as f64).sqrt();
                let raised = Duration::try_from_secs_f64(error).unwrap_or(Duration::MAX);
                Some(rtt.saturating_add(raised))
            })
            .min()
    }

    /// The variance of the filter's RTs about their rounds' means, pooled over its rounds, in
    /// seconds squared (0 with no round of two calls).
    fn pooled_variance(&self) -> f64 {
        let (deviations, freedom) = self.rounds.iter().filter(|round| round.calls > 1).fold(
            (0.0, 0u64),
            |(deviations, freedom), round| {
                (deviations + round.deviations, freedom + round.calls - 1)
            },
        );
        match freedom {
            0 => 0.0,
            freedom => deviations / freedom as f64,
        }
    }

    /// Ends the open round at `now`, when it is due; returns what it measured and whether the
    /// limit bound it.
    fn close_round(&mut self, now: u64) -> Option<(Round, bool)> {
        let start = self.open.start?;
        let length = now.saturating_sub(start);
        let due = u64::try_from(self.config.round.as_nanos()).unwrap_or(u64::MAX);
        if length < due || self.open.count < self.config.min_samples {
            return None;
        }
        let open = std::mem::take(&mut self.open);
        let rate = open.delivered as f64 * 1e9 / length as f64;
        let round = Round::of(rate, open.delivered, open.rtt_sum_nanos, open.rtt_squares);
        // The limit bound the round (it measured the limit, not the offered load) when at
        // least one call in 4 filled it: a burst now and then does not.
        Some((
            round,
            open.limited.saturating_mul(LIMITED_SHARE) >= open.count,
        ))
    }

    /// Whether `round`'s mean RT shows no queue against the RT estimate (the calmest round's
    /// mean, corrected if `rtt_correction` says so: the estimate of the service's RT without a
    /// queue, which a round's mean is compared with. Against the uncorrected smallest mean the
    /// slow, varied service of the lab's test held p99 at 2.3 times the unloaded p99, against
    /// 1.4 to 1.6).
    fn no_queue(&self, round: Round) -> bool {
        round
            .rtt
            .zip(self.min_rtt())
            .is_some_and(|(rtt, min)| rtt.as_secs_f64() <= min.as_secs_f64() * NO_QUEUE_RTT)
    }

    /// The gain this round, and the phase after it.
    fn step(&mut self, round: Round, limited: bool, now: u64) -> (f64, ChangeReason) {
        match &mut self.phase {
            Phase::Startup {
                best_rate,
                flat_rounds,
            } => {
                if limited {
                    if round.rate >= *best_rate * 1.25 {
                        *best_rate = round.rate;
                        *flat_rounds = 0;
                    } else {
                        *flat_rounds += 1;
                    }
                }
                if *flat_rounds >= FULL_PIPE_ROUNDS {
                    // Every RT the start measured had the queue the start itself built (the
                    // limit doubled each round until the rate stopped growing), so the RT is
                    // measured again at once: in the first round the limit binds.
                    self.next_probe_rtt = Some(now);
                    // The pipe is full: drain what the start queued, then cruise.
                    self.phase = Phase::Cycle(2);
                    (self.config.drain_gain, ChangeReason::Draining)
                } else {
                    (self.config.startup_gain, ChangeReason::Grew)
                }
            }
            Phase::Cycle(index) => {
                let at = *index;
                // Only a limit that binds can measure its own queue: below it, the RT is the
                // service's, and measuring again would refuse calls the service can take. A
                // drain round (the round that closes at 2, after the start's end or a probe)
                // set its limit below the product on purpose, so that it binds says nothing.
                let drained = at == 2;
                if limited && !drained && self.next_probe_rtt.is_some_and(|due| now >= due) {
                    self.phase = Phase::ProbeRtt {
                        epoch: now,
                        resume: at,
                        count: 0,
                        rtt_sum_nanos: 0,
                        rtt_squares: 0.0,
                    };
                    return (0.0, ChangeReason::MeasuringMinRtt);
                }
                *index = (at + 1) % CYCLE;
                match at {
                    0 => (self.config.probe_gain, ChangeReason::Probing),
                    1 => (self.config.drain_gain, ChangeReason::Draining),
                    _ => (1.0, ChangeReason::BandwidthDelay),
                }
            }
            Phase::ProbeRtt { .. } => (1.0, ChangeReason::BandwidthDelay),
        }
    }
}

impl LimitAlgorithm for Bbr {
    fn initial_limit(&self) -> u32 {
        self.config.initial_limit
    }

    fn on_sample(&mut self, sample: &Sample, now_nanos: u64, limit: u32) -> Option<LimitUpdate> {
        if self.is_probing_rtt() {
            return self.probe_rtt(sample, now_nanos);
        }
        let open = &mut self.open;
        open.start
            .get_or_insert(sample.started_nanos.min(now_nanos));
        open.count = open.count.saturating_add(1);
        open.limited += u32::from(sample.in_flight >= limit);
        if !sample.dropped {
            open.delivered += 1;
            open.rtt_sum_nanos += sample.rtt.as_nanos();
            open.rtt_squares += sample.rtt.as_secs_f64().powi(2);
        }
        let (round, limited) = self.close_round(now_nanos)?;
        self.open.start = Some(now_nanos);
        self.push(round);
        let (gain, reason) = self.step(round, limited, now_nanos);
        if reason == ChangeReason::MeasuringMinRtt {
            let small = self.config.probe_rtt_limit.min(limit);
            return Some(LimitUpdate::new(self.clamp(small), reason));
        }
        let target = self.bdp_limit(gain)?;
        let new = if !limited || reason == ChangeReason::Grew {
            // A round the limit did not bind measured the load, not the service: it cannot
            // lower the limit; nor can the start.
            target.max(limit)
        } else if reason == ChangeReason::BandwidthDelay && self.no_queue(round) {
            // A cruising round the limit bound, yet calls took no longer than in the calmest
            // round: the service had room, and calls arriving in bursts found the limit full
            // below capacity (a limit at the mean concurrency refuses a share of a random
            // load). Grow past the product, by one call a round. (Not as the start ends, nor
            // into a probe or a drain, which set their own limits.)
            target.max(limit).saturating_add(1)
        } else {
            target
        };
        let new = self.clamp(new);
        (new != limit).then(|| LimitUpdate::new(new, reason))
    }

    fn estimates(&self) -> RttEstimates {
        RttEstimates {
            baseline: self.min_rtt(),
            latest: self.rounds.back().and_then(|round| round.rtt),
        }
    }
}
