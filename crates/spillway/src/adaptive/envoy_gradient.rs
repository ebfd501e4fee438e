//! Envoy's adaptive concurrency gradient controller: a no-load RTT measured periodically at a
//! minimal limit, and a limit that follows `(minRTT + buffer) / sampleRTT` with `sqrt` headroom.

use super::algorithm::{ChangeReason, LimitAlgorithm, LimitUpdate, Quiet, RttEstimates};
use super::buffer_scaling::{spread_of, BufferScaling};
use super::error::{AdaptiveError, Check};
use super::random::Jitter;
use super::sample::{Sample, SampleWindow};
use std::collections::VecDeque;
use std::time::Duration;

/// The gradient controller's settings. Defaults are Envoy's where Envoy has one (jitter 15%,
/// minimum concurrency 3, 50 requests per minRTT measurement, the median, a 25% buffer, a
/// maximum of 1000); Envoy requires the two intervals, and spillway defaults them to Envoy's
/// documented example (60 s between minRTT measurements, 100 ms sample windows). Three
/// defaults are spillway's departures: `remeasure`, `window_min_rtts` (windows of at least
/// 12 minRTTs, longer than 100 ms on a service whose minRTT is over 8.3 ms) and
/// `in_flight_floor` (a latency rise the limit did not cause shrinks it only so far).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct EnvoyGradientConfig {
    /// How long each sample window lasts at least (Envoy's `concurrency_update_interval`);
    /// longer on a slow service, see `window_min_rtts`.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub update_interval: Duration,
    /// Time between minRTT measurements (Envoy's `min_rtt_calc_params.interval`).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub min_rtt_interval: Duration,
    /// Each interval is lengthened by up to this fraction at random, 0 to 1 (Envoy: 0.15).
    pub jitter: f64,
    /// The limit while the minRTT is measured, and the floor (Envoy: 3).
    pub min_concurrency: u32,
    /// Samples one minRTT measurement takes (Envoy: 50).
    pub min_rtt_request_count: u32,
    /// The percentile of a minRTT measurement's RTTs taken as the minRTT, 0 to 1 (Envoy: the
    /// median, 0.5). A sample window's RTT is its `window_percentile`.
    pub sample_percentile: f64,
    /// The minRTT is raised by this fraction before the gradient, 0 to 1 (Envoy: 0.25).
    pub buffer: f64,
    /// The limit never goes above this (Envoy: 1000).
    pub max_limit: u32,
    /// Whether a scheduled minRTT measurement pins the limit to `min_concurrency` even when
    /// the limit does not bind (Envoy: always). spillway's default, `when_bound`, measures
    /// without pinning, from sample windows in which no call found the limit full, and then
    /// takes the result only if it is at most `1 + buffer` times the minRTT; it pins only if
    /// the limit binds in 5 sample windows first: below its limit, the service is not kept
    /// from working, so refusing calls to measure it would refuse below capacity.
    pub remeasure: Remeasure,
    /// The percentile of a sample window's RTTs compared with the minRTT, 0 to 1 (default
    /// 0.5, the median, as Envoy, which takes `sample_percentile` for both). Near capacity a
    /// small service queues in bursts that drain, and a burst lifts a window's median above
    /// the minRTT; a lower percentile, such as the first quartile (0.25), rises only when most
    /// calls of the window waited, as under an overload. In the simulated shape matrix's long
    /// run, 0.25 refused 1.05 to 10 times fewer calls below capacity; on a service whose
    /// calls all take about as long, it lets a deeper queue stand (p99 2.4 times the unloaded
    /// p99 against 1.7 to 2.2 with the median, in the loopback lab's runs with Envoy's 100 ms
    /// windows), so it is not the default.
    pub window_percentile: f64,
    /// The open start: the limit from the start until the first minRTT is measured (default
    /// `0`: Envoy's start). Envoy measures the first minRTT at once, pinned to
    /// `min_concurrency`, which refuses every call beyond 3 in flight, even on a service far
    /// below its capacity. With a `start_limit`, calls are admitted up to it and the first
    /// minRTT is measured from the calls as they come, from the end of the first sample
    /// window (the calls that end in it are the short ones); the limit stays at
    /// `start_limit` until `min_rtt_request_count` have ended. A sample window in which the
    /// limit binds before then (a service loaded from its start) measures pinned, as Envoy
    /// does, and goes back to `start_limit` after. In the simulated shape matrix's long run,
    /// 50 refuses nothing in the first 10 s on the 4-, 8- and 32-worker exponential services,
    /// where Envoy's start refuses; in the lab's scenarios with claims, overloaded and queued
    /// from their first instant, criticality classes meet fewer of their targets with it than
    /// with Envoy's start, so it is not the default (docs/config.md says when to set it).
    /// When not `0`, at least `min_concurrency` and at most `max_limit`.
    pub start_limit: u32,
    /// How `buffer` is applied (default `fixed`: as configured, Envoy's). With
    /// [`BufferScaling::Spread`], it is multiplied by the spread of the service's RTTs in the
    /// last pinned minRTT measurement or the open start's (third quartile over median), and
    /// capped at 1: a service whose calls vary widely may queue more before the limit shrinks.
    /// The check that keeps a queued unpinned measurement out still uses the configured buffer.
    pub buffer_scaling: BufferScaling,
    /// Once the minRTT is known, each sample window lasts at least this many minRTTs, and at
    /// least `update_interval` (default 12; `0`: Envoy's, `update_interval` alone). Envoy's
    /// fixed 100 ms window holds about ten round trips of a service whose calls take 10 ms, but
    /// about one of a service whose calls take 80 ms: after the limit grows, the calls that end
    /// in the next window are the short ones of the new burst, the long ones still run, the
    /// window looks fast and the limit grows again before the queue shows, then falls for
    /// several windows. A window of 12 minRTTs is as long, in round trips, on every service:
    /// on one whose minRTT is under 8.3 ms it is `update_interval`, as Envoy's. In the
    /// simulated shape matrix with every mean at 80 ms (and `start_limit = 50`), Envoy's
    /// window meets the overload target on 6 of the 15 shapes, 12 minRTTs on 11, where the
    /// 10 ms matrix meets it on 13. The price: a slow service's limit reacts later, and after a
    /// slowdown that a pinned measurement saw, the windows stay as long as that slower minRTT
    /// until the next measurement. From 0 to 100.
    pub window_min_rtts: f64,
    /// In a sample window in which no call found the limit full, the limit falls no lower
    /// than this many times the most calls in flight in any of the last 50 sample windows
    /// whose RTT was within the buffer (default 6; `0`: Envoy's, no floor). Below capacity a
    /// service queues in bursts that drain, and a burst lifts a window's RTT past the buffer
    /// although the limit admitted every call: Envoy's gradient then shrinks the limit, a few
    /// such windows in a row take it under the next burst, and that burst is refused. The
    /// floor keeps the limit above what the service carried at a latency within the buffer
    /// in its last 50 windows with calls; once the limit binds (an overload: calls find it full),
    /// Envoy's gradient applies unchanged, and windows whose RTT is past the buffer (a queue)
    /// do not raise the floor, so an overload that starts while the limit is high brings it
    /// down to the floor, where it holds until calls find it full. In the simulated shape
    /// matrix's long run (0.5x to 0.9x of capacity), 6 refuses well under half as many calls
    /// below capacity after the start as Envoy's gradient alone, about as many as the best
    /// fixed limit chosen in hindsight, and nothing on the 32-worker services, with as many
    /// overload and recovery targets met. The price: a higher limit lets more calls wait where
    /// the service itself keeps them long (more clients time out on 1 and 2 workers), and
    /// after a slowdown, while the clients' retries take the service past its capacity, calls
    /// wait longer before the limit binds (docs/config.md has the numbers). From 0 to 100.
    pub in_flight_floor: f64,
}

/// The sample windows whose calls in flight [`EnvoyGradientConfig::in_flight_floor`] counts.
const IN_FLIGHT_FLOOR_WINDOWS: usize = 50;

/// When a scheduled minRTT measurement of [`EnvoyGradient`] pins the limit to
/// `min_concurrency`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Remeasure {
    /// Only when the limit keeps binding: the calls are measured as they come, all admitted,
    /// from a sample window in which no call found the limit full (the next one, if the limit
    /// binds when the measurement falls due), and a result more than `1 + buffer` times the
    /// minRTT is kept out. A window in which the limit binds gives the measurement up; it
    /// starts again at the next window that does not. If the limit binds in 5 sample windows,
    /// counting the one in which the measurement fell due, before it has its calls, it pins
    /// (4 to 5 sample windows after Envoy would, if every window binds: 400 to 500 ms with
    /// 100 ms windows). A
    /// measurement that has not got its calls when the next falls due (a quiet service) goes
    /// on, its bound windows counted from 0 again. A service that got slower shows it as rising RTTs, which shrink the
    /// limit: if it then keeps binding, the measurement pins; if not, a result above
    /// `1 + buffer` times the minRTT is kept out, and the minRTT stays until the limit is held
    /// at `min_concurrency`, which measures pinned, as Envoy does. The start is
    /// `start_limit`'s, with either `remeasure`.
    #[default]
    WhenBound,
    /// Always, as Envoy does: calls beyond `min_concurrency` are refused while it measures.
    Always,
}

impl Default for EnvoyGradientConfig {
    fn default() -> Self {
        Self {
            update_interval: Duration::from_millis(100),
            min_rtt_interval: Duration::from_secs(60),
            jitter: 0.15,
            min_concurrency: 3,
            min_rtt_request_count: 50,
            sample_percentile: 0.5,
            buffer: 0.25,
            max_limit: 1000,
            remeasure: Remeasure::WhenBound,
            window_percentile: 0.5,
            start_limit: 0,
            buffer_scaling: BufferScaling::Fixed,
            window_min_rtts: 12.0,
            in_flight_floor: 6.0,
        }
    }
}

impl EnvoyGradientConfig {
    /// Checks the settings: intervals longer than 0, fractions in `0..=1`, `window_min_rtts`
    /// and `in_flight_floor` in `0..=100`,
    /// `1 <= min_concurrency <= max_limit`, at least one request per minRTT measurement, a
    /// `start_limit` of `0` or from `min_concurrency` to `max_limit`.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] naming the first field at fault.
    pub fn validate(&self) -> Result<(), AdaptiveError> {
        let check = Check {
            algorithm: "envoy_gradient",
        };
        check.nonzero_duration("update_interval", self.update_interval)?;
        check.nonzero_duration("min_rtt_interval", self.min_rtt_interval)?;
        check.within("jitter", self.jitter, 0.0, 1.0)?;
        check.positive("min_concurrency", self.min_concurrency)?;
        check.ordered(
            "min_concurrency",
            self.min_concurrency,
            "max_limit",
            self.max_limit,
        )?;
        check.positive("min_rtt_request_count", self.min_rtt_request_count)?;
        check.within("sample_percentile", self.sample_percentile, 0.0, 1.0)?;
        check.within("window_percentile", self.window_percentile, 0.0, 1.0)?;
        check.within("buffer", self.buffer, 0.0, 1.0)?;
        check.within("window_min_rtts", self.window_min_rtts, 0.0, 100.0)?;
        check.within("in_flight_floor", self.in_flight_floor, 0.0, 100.0)?;
        if self.start_limit != 0 {
            check.ordered(
                "min_concurrency",
                self.min_concurrency,
                "start_limit",
                self.start_limit,
            )?;
            check.at_most("start_limit", self.start_limit, "max_limit", self.max_limit)?;
        }
        Ok(())
    }
}

/// Windows at the minimum limit in a row after which the minRTT is measured again (Envoy: 5).
const MIN_WINDOWS_BEFORE_REMEASURE: u32 = 5;

/// Sample windows in which the limit bound after which a scheduled unpinned measurement that
/// has not got its calls pins instead (`remeasure = "when_bound"`).
const BOUND_WINDOWS_BEFORE_PINNING: u32 = 5;

/// Envoy's gradient controller.
///
/// - **minRTT.** At the start, every `min_rtt_interval` (lengthened by up to `jitter` at
///   random), and after 5 sample windows in a row at `min_concurrency`, the limit drops to
///   `min_concurrency` while `min_rtt_request_count` calls started since then complete; the
///   `sample_percentile` of their RTTs is the new minRTT, and the limit goes back to what it
///   was. spillway's first departure, [`Remeasure::WhenBound`] (the default): a scheduled
///   measurement takes the calls as they come instead, from a sample window in which the
///   limit does not bind, and refuses nothing; it pins only if the limit binds in 5 windows
///   first.
///   The second, an option: the open start (`start_limit`): the first minRTT is measured
///   from the calls as they come, admitted up to `start_limit`, unless a sample window binds
///   first.
///   The third, an option: [`BufferScaling::Spread`] multiplies the buffer by the spread of
///   the service's RTTs in the last pinned minRTT measurement (or the open start's).
///   The fourth, the default: a sample window lasts at least `window_min_rtts` (12) minRTTs,
///   so that it holds as many round trips on a slow service as on a fast one.
///   The fifth, the default: in a window in which the limit did not bind, the limit falls no
///   lower than `in_flight_floor` (6) times the most calls in flight in the last 50 windows
///   whose RTT was within the buffer.
/// - **Sample windows.** Otherwise every `update_interval` (or `window_min_rtts` minRTTs,
///   whichever is longer), the `window_percentile` of the
///   window's RTTs is the sample RTT, and `gradient = clamp((minRTT x (1 + buffer)) /
///   sampleRTT, 0.5, 2)`; the new limit is `limit x gradient + sqrt(limit x gradient)`,
///   truncated and clamped to `min_concurrency..=max_limit`. RTTs are whole microseconds, as
///   Envoy's. The window's percentile can differ from the minRTT's (`window_percentile`;
///   Envoy takes `sample_percentile` for both, as the default does).
///
/// Envoy's timers become times checked at each sample: with no traffic nothing happens, and a
/// window that ended long ago is closed by the next sample.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{EnvoyGradient, EnvoyGradientConfig, LimitAlgorithm, Sample};
/// use std::time::Duration;
///
/// let config = EnvoyGradientConfig { min_rtt_request_count: 3, ..Default::default() };
/// let mut envoy = EnvoyGradient::with_seed(config, 1)?;
/// assert_eq!(envoy.initial_limit(), 3); // measuring the minRTT first
/// let ms = 1_000_000;
/// let sample = |at_ms: u64, rtt_ms| Sample {
///     started_nanos: at_ms * ms,
///     rtt: Duration::from_millis(rtt_ms),
///     in_flight: 3,
///     dropped: false,
/// };
/// let mut limit = 3;
/// for at in 0..3 {
///     if let Some(update) = envoy.on_sample(&sample(at, 10), (at + 10) * ms, limit) {
///         limit = update.limit;
///     }
/// }
/// assert_eq!(envoy.estimates().baseline, Some(Duration::from_millis(10)));
/// // A call in the first sample window (it ends 12 minRTTs, 120 ms, after the measurement)...
/// assert_eq!(envoy.on_sample(&sample(50, 10), 60 * ms, limit), None);
/// // ... and the window ends: its median is the minRTT, so the gradient is 1.25, and the
/// // limit 3 x 1.25 + sqrt(3.75) = 5.69.
/// let update = envoy.on_sample(&sample(150, 10), 200 * ms, limit).unwrap();
/// assert_eq!(update.limit, 5);
/// # Ok::<(), spillway::adaptive::AdaptiveError>(())
/// ```
#[derive(Debug, Clone)]
pub struct EnvoyGradient {
    config: EnvoyGradientConfig,
    min_rtt_micros: Option<u64>,
    sample_rtt_micros: Option<u64>,
    /// Whether the minRTT is being measured, since when, and the limit to go back to.
    measuring: bool,
    /// An unpinned measurement's calls, as they end, while one runs.
    unpinned: Option<SampleWindow>,
    /// Whether the last unpinned measurement was given up (a window bound): the next window
    /// that does not bind starts it again.
    unpinned_again: bool,
    epoch: u64,
    deferred_limit: u32,
    /// When the next minRTT measurement is due; when the current sample window ends.
    next_min_rtt: Option<u64>,
    next_window_end: Option<u64>,
    window: SampleWindow,
    windows_at_min: u32,
    /// Whether a call of the last sample window found the limit full.
    last_window_bound: bool,
    /// While a scheduled unpinned measurement waits for its calls: the sample windows since it
    /// fell due in which the limit bound.
    bound_while_due: Option<u32>,
    jitter: Jitter,
    /// The spread of the RTTs of the last pinned minRTT measurement, or of the open start's
    /// (see [`BufferScaling`]).
    spread: f64,
    /// The most calls in flight in each of the last [`IN_FLIGHT_FLOOR_WINDOWS`] sample
    /// windows, oldest first; 0 for a window whose RTT was past the buffer.
    carried: VecDeque<u32>,
}

impl EnvoyGradient {
    /// The controller with `config`, its intervals jittered at random.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] if `config` does not [validate](EnvoyGradientConfig::validate).
    pub fn new(config: EnvoyGradientConfig) -> Result<Self, AdaptiveError> {
        Self::with_jitter(config, Jitter::random())
    }

    /// The controller with `config`, its jitter drawn from `seed` (reproducible).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_seed(config: EnvoyGradientConfig, seed: u64) -> Result<Self, AdaptiveError> {
        Self::with_jitter(config, Jitter::with_seed(seed))
    }

    fn with_jitter(config: EnvoyGradientConfig, jitter: Jitter) -> Result<Self, AdaptiveError> {
        config.validate()?;
        Ok(Self {
            config,
            min_rtt_micros: None,
            sample_rtt_micros: None,
            // Envoy measures the minRTT as soon as it starts, at the minimum limit; the open
            // start (`start_limit`) from the end of the first sample window, as calls come.
            measuring: config.start_limit == 0,
            unpinned: None,
            unpinned_again: config.start_limit != 0,
            epoch: 0,
            deferred_limit: config.start_limit.max(config.min_concurrency),
            next_min_rtt: None,
            next_window_end: None,
            window: SampleWindow::default(),
            windows_at_min: 0,
            last_window_bound: false,
            bound_while_due: None,
            jitter,
            spread: 1.0,
            carried: VecDeque::with_capacity(IN_FLIGHT_FLOOR_WINDOWS),
        })
    }

    /// Whether the minRTT is being measured now: pinned, or from the calls as they come at
    /// the open start (`start_limit`).
    pub fn is_measuring_min_rtt(&self) -> bool {
        self.measuring || self.min_rtt_micros.is_none()
    }

    fn nanos(duration: Duration) -> u64 {
        u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Envoy's `applyJitter`: `interval + random % ceil(interval_ms x jitter)` milliseconds.
    fn jittered(&mut self, interval: Duration) -> Duration {
        let millis = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        let range = (millis as f64 * self.config.jitter).ceil() as u64;
        if range == 0 {
            return interval;
        }
        interval + Duration::from_millis(self.jitter.next_u64() % range)
    }

    /// The window's percentile in whole microseconds (Envoy's histogram is of microseconds).
    fn take_percentile(&mut self, percentile: f64) -> Option<u64> {
        let window = std::mem::take(&mut self.window);
        let rtt = window.percentile(percentile)?;
        Some(u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX))
    }

    /// How long a sample window lasts: `update_interval`, or `window_min_rtts` minRTTs once
    /// the minRTT is known, whichever is longer.
    fn window_nanos(&self) -> u64 {
        let interval = Self::nanos(self.config.update_interval);
        let Some(min_rtt) = self.min_rtt_micros else {
            return interval;
        };
        // Nanoseconds; a product past u64::MAX saturates in the cast.
        let rtts = (min_rtt as f64 * 1000.0 * self.config.window_min_rtts) as u64;
        interval.max(rtts)
    }

    /// The minRTT raised by the buffer, in microseconds (the sample's own RTT before the
    /// first minRTT).
    fn buffered_min_rtt(&self, sample_micros: u64) -> f64 {
        let min_rtt = self.min_rtt_micros.unwrap_or(sample_micros) as f64;
        let buffer = self
            .config
            .buffer_scaling
            .apply(self.config.buffer, self.spread);
        min_rtt + min_rtt * buffer
    }

    /// Envoy's `calculateNewLimit`.
    fn new_limit(&self, limit: u32, sample_micros: u64) -> u32 {
        let buffered = self.buffered_min_rtt(sample_micros);
        let gradient = (buffered / sample_micros.max(1) as f64).clamp(0.5, 2.0);
        let scaled = f64::from(limit) * gradient;
        let new = (scaled + scaled.sqrt()) as u32;
        new.clamp(self.config.min_concurrency, self.config.max_limit)
    }

    /// The new limit `new` of a window whose most calls in flight were `peak` and whose RTT
    /// was `sample_micros`, with the floor of `in_flight_floor` (see
    /// [`EnvoyGradientConfig::in_flight_floor`]): in a window in which the limit did not bind,
    /// a fall stops at the floor (never above the limit it falls from).
    fn floored(&mut self, limit: u32, new: u32, sample_micros: u64, peak: u32) -> u32 {
        if self.config.in_flight_floor == 0.0 {
            return new;
        }
        let within_buffer = sample_micros as f64 <= self.buffered_min_rtt(sample_micros);
        if self.carried.len() == IN_FLIGHT_FLOOR_WINDOWS {
            self.carried.pop_front();
        }
        self.carried.push_back(if within_buffer { peak } else { 0 });
        if self.last_window_bound || new >= limit {
            return new;
        }
        let carried = self.carried.iter().copied().max().unwrap_or(0);
        // A product past u32::MAX saturates in the cast; the limit it falls from caps it.
        let floor = (f64::from(carried) * self.config.in_flight_floor) as u32;
        new.max(floor.min(limit))
    }

    /// At the end of a sample window, ends an unpinned measurement that has its calls: one
    /// the limit bound is given up (and starts again at the next window that does not bind),
    /// and a result well above the minRTT (a queue, not the service) is kept out.
    fn close_unpinned(&mut self) {
        let Some(calls) = &self.unpinned else {
            return;
        };
        if self.last_window_bound {
            // A burst filled the limit: this measurement may have queued. Start again from
            // the next window that does not bind.
            self.unpinned = None;
            self.unpinned_again = true;
            return;
        }
        if calls.count() < u64::from(self.config.min_rtt_request_count) {
            return;
        }
        let first = self.min_rtt_micros.is_none();
        if first {
            // The open start's measurement also gives the buffer's spread; a later unpinned one
            // runs among calls that may queue, and leaves it as it was.
            self.spread = self.spread_of(calls);
        }
        self.bound_while_due = None;
        let measured = self
            .unpinned
            .take()
            .and_then(|calls| calls.percentile(self.config.sample_percentile))
            .map(|rtt| u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX));
        self.min_rtt_micros = match (measured, self.min_rtt_micros) {
            // The open start's measurement: the first minRTT.
            (Some(measured), None) => Some(measured),
            (Some(measured), Some(old))
                if measured as f64 <= old as f64 * (1.0 + self.config.buffer) =>
            {
                Some(measured)
            }
            (_, old) => old,
        };
    }

    /// The spread of a measurement's calls for the buffer (see [`BufferScaling`]); 1 with
    /// Envoy's fixed buffer, which does not read it.
    fn spread_of(&self, calls: &SampleWindow) -> f64 {
        match self.config.buffer_scaling {
            BufferScaling::Fixed => 1.0,
            BufferScaling::Spread => spread_of(calls),
        }
    }

    /// Starts a pinned minRTT measurement at `now`, from a limit of `limit`.
    fn pin(&mut self, now: u64, limit: u32) -> Option<LimitUpdate> {
        self.unpinned = None;
        self.unpinned_again = false;
        self.bound_while_due = None;
        self.measuring = true;
        self.epoch = now;
        self.deferred_limit = limit;
        self.window = SampleWindow::default();
        self.windows_at_min = 0;
        Some(LimitUpdate::new(
            self.config.min_concurrency,
            ChangeReason::MeasuringMinRtt,
        ))
    }

    /// Envoy's timers, at `now`: a minRTT measurement that is due starts; a sample window that
    /// ended updates the limit.
    fn tick(&mut self, now: u64, limit: u32) -> Option<LimitUpdate> {
        if self.measuring {
            return None;
        }
        if self.next_min_rtt.is_some_and(|due| now >= due) {
            if self.config.remeasure == Remeasure::WhenBound
                && self.windows_at_min < MIN_WINDOWS_BEFORE_REMEASURE
                && self.min_rtt_micros.is_some()
            {
                // The calls as they come measure it: every call that ends from now until
                // `min_rtt_request_count` have, at the end of a sample window (all that end,
                // not the first calls admitted, of which the short ones would end first). If
                // the limit binds now, from the next window that does not; if it binds in
                // `BOUND_WINDOWS_BEFORE_PINNING` windows first, the measurement pins. One that
                // still waits for its calls (a quiet service) goes on, as Envoy's pinned one
                // waits for its calls however long they take; its bound windows count from 0.
                let bound = self.window.max_in_flight() >= limit || self.last_window_bound;
                let waiting = self.unpinned.is_some() || self.unpinned_again;
                if !waiting && bound {
                    self.unpinned_again = true;
                } else if !waiting {
                    self.unpinned = Some(SampleWindow::default());
                }
                self.bound_while_due = Some(0);
                let interval = self.jittered(self.config.min_rtt_interval);
                self.next_min_rtt = Some(now.saturating_add(Self::nanos(interval)));
            } else {
                return self.pin(now, limit);
            }
        }
        // The open start's first sample window begins when its first call ends.
        let end = *self
            .next_window_end
            .get_or_insert(now.saturating_add(self.window_nanos()));
        if now < end {
            return None;
        }
        self.last_window_bound = self.window.max_in_flight() >= limit;
        if self.last_window_bound && self.min_rtt_micros.is_none() {
            // The open start bound: the service may be loaded from its start, so its calls
            // may have queued. Measure pinned, as Envoy does.
            return self.pin(now, limit);
        }
        if self.last_window_bound {
            if let Some(windows) = self.bound_while_due.as_mut() {
                *windows += 1;
                if *windows >= BOUND_WINDOWS_BEFORE_PINNING {
                    // The limit keeps binding: the service is loaded, and may queue; measure
                    // pinned, as Envoy does.
                    return self.pin(now, limit);
                }
            }
        }
        self.close_unpinned();
        if self.unpinned_again && !self.last_window_bound && self.unpinned.is_none() {
            self.unpinned_again = false;
            self.unpinned = Some(SampleWindow::default());
        }
        // After `close_unpinned`, which may have measured the minRTT the window's length
        // follows (the open start's first, or one taken from the calls as they come).
        self.next_window_end = Some(now.saturating_add(self.window_nanos()));
        if self.min_rtt_micros.is_none() {
            // The open start is still measuring: the limit holds at `start_limit`.
            self.window = SampleWindow::default();
            return None;
        }
        if self.next_min_rtt.is_none() {
            // The open start measured the first minRTT: the next is due an interval later.
            let interval = self.jittered(self.config.min_rtt_interval);
            self.next_min_rtt = Some(now.saturating_add(Self::nanos(interval)));
        }
        let peak = self.window.max_in_flight();
        let sample = self.take_percentile(self.config.window_percentile)?;
        self.sample_rtt_micros = Some(sample);
        let new = self.new_limit(limit, sample);
        let new = self.floored(limit, new, sample, peak);
        let min = self.config.min_concurrency;
        if limit == min && new == min {
            self.windows_at_min += 1;
            if self.windows_at_min >= MIN_WINDOWS_BEFORE_REMEASURE {
                // The minRTT is likely wrong: measure it again at the next tick.
                self.next_min_rtt = Some(now);
            }
        } else {
            self.windows_at_min = 0;
        }
        let reason = if new < limit {
            ChangeReason::LatencyRose
        } else {
            ChangeReason::Grew
        };
        (new != limit).then(|| LimitUpdate::new(new, reason))
    }
}

impl LimitAlgorithm for EnvoyGradient {
    fn initial_limit(&self) -> u32 {
        if self.config.start_limit == 0 {
            self.config.min_concurrency
        } else {
            self.config.start_limit
        }
    }

    fn on_sample(&mut self, sample: &Sample, now_nanos: u64, limit: u32) -> Option<LimitUpdate> {
        let ticked = self.tick(now_nanos, limit);
        // Calls started before a minRTT measurement do not count in it.
        if sample.started_nanos < self.epoch {
            return ticked;
        }
        self.window.add(sample);
        if let Some(calls) = &mut self.unpinned {
            calls.add(sample);
        }
        if !(self.measuring && self.window.count() >= u64::from(self.config.min_rtt_request_count))
        {
            return ticked;
        }
        let spread = self.spread_of(&self.window);
        if let Some(min_rtt) = self.take_percentile(self.config.sample_percentile) {
            self.min_rtt_micros = Some(min_rtt);
            self.spread = spread;
        }
        self.measuring = false;
        let interval = self.jittered(self.config.min_rtt_interval);
        self.next_min_rtt = Some(now_nanos.saturating_add(Self::nanos(interval)));
        self.next_window_end = Some(now_nanos.saturating_add(self.window_nanos()));
        Some(LimitUpdate::new(
            self.deferred_limit,
            ChangeReason::MinRttMeasured,
        ))
    }

    fn estimates(&self) -> RttEstimates {
        RttEstimates {
            baseline: self.min_rtt_micros.map(Duration::from_micros),
            latest: self.sample_rtt_micros.map(Duration::from_micros),
        }
    }

    fn quiet(&self, _: u32) -> Quiet {
        // While the minRTT is measured, the sample that completes the count ends it; after,
        // only the timers (the window's end, the next measurement) move the limit, and a
        // sample before them adds to the window.
        if self.measuring {
            return Quiet::NEVER;
        }
        match (self.next_window_end, self.next_min_rtt) {
            (Some(end), Some(due)) => Quiet::until(end.min(due)),
            (Some(end), None) => Quiet::until(end),
            (None, _) => Quiet::NEVER,
        }
    }
}
