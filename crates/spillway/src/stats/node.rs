use super::short_line::ShortLine;
use super::window::{SlidingWindow, WindowSnapshot};
use super::window_config::WindowConfig;
use super::Event;
use crate::sync::{thread_slot, AtomicU64};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::time::Duration;

/// The windows a [`ResourceNode`] keeps.
///
/// The default is Sentinel's: a second window of 2 x 500 ms and a minute window of 60 x 1 s.
/// A finer second window (say 10 x 100 ms) slides more smoothly: a burst held back by a QPS
/// limit is released after one bucket rather than half a second. It does not lower the worst case:
/// with any bucket count, bursts timed at bucket edges can fit up to twice a QPS limit's count
/// into some one-second span (see `tests/window_accuracy.rs`), while uniform arrivals get exactly
/// the count. Finer windows read more buckets per check.
///
/// # Examples
///
/// ```
/// use spillway::stats::{NodeConfig, WindowConfig};
/// use std::time::Duration;
///
/// let config = NodeConfig::default()
///     .with_second_window(WindowConfig::new(10, Duration::from_secs(1)).unwrap());
/// assert_eq!(config.second_window().buckets(), 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeConfig {
    second: WindowConfig,
    minute: WindowConfig,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            second: WindowConfig::sentinel_second(),
            minute: WindowConfig::sentinel_minute(),
        }
    }
}

impl NodeConfig {
    /// Sets the second window (the one QPS, RT and concurrency-rate reads use).
    pub fn with_second_window(mut self, window: WindowConfig) -> Self {
        self.second = window;
        self
    }

    /// Sets the minute window (totals and the previous-second reads). Its buckets should be one
    /// second long for "previous second" to mean what it says.
    pub fn with_minute_window(mut self, window: WindowConfig) -> Self {
        self.minute = window;
        self
    }

    /// The second window's shape.
    pub fn second_window(&self) -> &WindowConfig {
        &self.second
    }

    /// The minute window's shape.
    pub fn minute_window(&self) -> &WindowConfig {
        &self.minute
    }
}

/// Sentinel's `StatisticNode`: live statistics of one resource (or of one origin of a resource).
///
/// Every entry adds to the second window (rates, RT) and to the minute window (totals, the
/// previous second), and moves the concurrency gauge (kept per thread beside the second window's
/// counters, on the line the entry writes anyway). Reads are Sentinel's, with Sentinel's
/// arithmetic: rates are window sums divided by the window's interval in seconds.
///
/// # Examples
///
/// ```
/// use spillway::stats::{NodeConfig, ResourceNode};
///
/// let node = ResourceNode::new(NodeConfig::default());
/// let t = 1_700_000_000_000_000_000; // nanoseconds
/// node.add_pass(t, 2);
/// node.add_completion(t + 1_500_000, 1_500, 1, false); // one completion after 1.5 ms
/// assert_eq!(node.pass_qps(t + 1_500_000), 2.0);
/// assert_eq!(node.avg_rt_micros(t + 1_500_000), 1_500.0);
/// ```
pub struct ResourceNode {
    second: SlidingWindow,
    minute: SlidingWindow,
    /// Entries admitted through a concurrency rule on this node and still in flight: one shared
    /// atomic, touched only when a concurrency rule selects this node (check and count in one
    /// compare-and-swap).
    limited: CachePadded<AtomicU64>,
}

/// Every read of a [`ResourceNode`] at one time.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct NodeStats {
    /// Admitted per second over the second window.
    pub pass_qps: f64,
    /// Refused per second over the second window.
    pub block_qps: f64,
    /// Completed per second over the second window.
    pub success_qps: f64,
    /// Errors per second over the second window.
    pub error_qps: f64,
    /// Admitted on a future window's quota, per second.
    pub occupied_pass_qps: f64,
    /// Average RT of completions in the second window, microseconds (0 when none completed).
    pub avg_rt_micros: f64,
    /// Smallest RT in the second window, microseconds.
    pub min_rt_micros: u64,
    /// Sentinel's `maxSuccessQps`: the busiest bucket's completions scaled to a second.
    pub max_success_qps: f64,
    /// Entries in flight.
    pub concurrency: i64,
    /// Admitted in the previous minute-window bucket (the previous second).
    pub previous_pass_qps: u64,
    /// Refused in the previous second.
    pub previous_block_qps: u64,
    /// Admitted over the minute window.
    pub total_pass: u64,
    /// Refused over the minute window.
    pub total_block: u64,
    /// Completed over the minute window.
    pub total_success: u64,
    /// Errors over the minute window.
    pub total_error: u64,
}

impl NodeStats {
    /// Admitted plus refused over the minute window (Sentinel's `totalRequest`).
    pub fn total_request(&self) -> u64 {
        self.total_pass + self.total_block
    }

    /// Admitted plus refused per second (Sentinel's `totalQps`).
    pub fn total_qps(&self) -> f64 {
        self.pass_qps + self.block_qps
    }
}

impl ResourceNode {
    /// An empty node with the given windows.
    pub fn new(config: NodeConfig) -> Self {
        // The minute window is fed by the second window's lines when their buckets align
        // (Sentinel's 500 ms and 1 s do): an entry then writes one window, not two.
        let (second, minute) = SlidingWindow::linked(config.second, config.minute);
        Self {
            second,
            minute,
            limited: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// The second window.
    pub fn second_window(&self) -> &SlidingWindow {
        &self.second
    }

    /// The minute window.
    pub fn minute_window(&self) -> &SlidingWindow {
        &self.minute
    }

    // === recording ===

    /// Records `count` admissions.
    #[inline]
    pub fn add_pass(&self, now_nanos: u64, count: u64) {
        let slot = thread_slot();
        self.add_both(slot, now_nanos, Event::Pass, count);
    }

    /// Records `count` refusals.
    #[inline]
    pub fn add_block(&self, now_nanos: u64, count: u64) {
        self.record_block(thread_slot(), now_nanos, count);
    }

    /// A refusal from thread slot `slot`: `count` blocks.
    #[inline]
    pub(crate) fn record_block(&self, slot: usize, now_nanos: u64, count: u64) {
        self.add_both(slot, now_nanos, Event::Block, count);
    }

    /// Records `count` admissions on a future window's quota, as Sentinel's
    /// `StatisticNode.addOccupiedPass` does: in the minute window, now, as passes and as
    /// occupied passes. The second window counts them as passes of the bucket they were
    /// borrowed from (its waiting count), once that bucket becomes current; its
    /// occupied-pass count is never written, so [`occupied_pass_qps`](Self::occupied_pass_qps)
    /// reads 0, as Sentinel's does.
    pub fn add_occupied_pass(&self, now_nanos: u64, count: u64) {
        self.minute.add(now_nanos, Event::OccupiedPass, count);
        self.minute.add(now_nanos, Event::Pass, count);
    }

    /// Records `count` completions after `rt_micros`; `error` counts them as errors too.
    #[inline]
    pub fn add_completion(&self, now_nanos: u64, rt_micros: u64, count: u64, error: bool) {
        self.record_completion_moving(thread_slot(), now_nanos, rt_micros, count, error, 0);
    }

    /// Counts `count` errors without a completion (Sentinel's `Tracer.trace`).
    pub fn add_error(&self, now_nanos: u64, count: u64) {
        let slot = thread_slot();
        self.add_both(slot, now_nanos, Event::Error, count);
    }

    /// One more entry in flight.
    #[inline]
    pub fn increase_concurrency(&self) {
        self.second.add_in_flight(thread_slot(), 1);
    }

    /// One fewer entry in flight.
    #[inline]
    pub fn decrease_concurrency(&self) {
        self.second.add_in_flight(thread_slot(), u64::MAX);
    }

    /// An admission from thread slot `slot`: one more in flight, `count` passes (Sentinel's order).
    /// The in-flight count lives on the second window's line of the thread, which the pass is
    /// written to anyway.
    #[inline]
    pub(crate) fn record_admission(&self, slot: usize, now_nanos: u64, count: u64) {
        self.second.add_admission_from(slot, now_nanos, count);
        if !self.minute.is_fed() {
            self.minute.add_from(slot, now_nanos, Event::Pass, count);
        }
    }

    /// A completion from thread slot `slot`: RT, completions and errors, one fewer in flight.
    #[inline]
    pub(crate) fn record_exit(
        &self,
        slot: usize,
        now_nanos: u64,
        rt_micros: u64,
        count: u64,
        error: bool,
    ) {
        self.record_completion_moving(slot, now_nanos, rt_micros, count, error, u64::MAX);
    }

    /// The thread's line of the second window, if it holds `now`'s bucket and finding it takes
    /// no slow step (see [`SlidingWindow::short_line`]), and the minute window is fed by the
    /// second (so that the line is the only place an exit or a refusal is counted).
    #[inline(always)]
    pub(crate) fn short_line(&self, slot: usize, now_nanos: u64) -> Option<ShortLine<'_>> {
        if !self.minute.is_fed() {
            return None;
        }
        self.second.short_line(slot, now_nanos)
    }

    /// Adds `count` to `event` in both windows.
    #[inline]
    fn add_both(&self, slot: usize, now_nanos: u64, event: Event, count: u64) {
        self.second.add_from(slot, now_nanos, event, count);
        if !self.minute.is_fed() {
            self.minute.add_from(slot, now_nanos, event, count);
        }
    }

    /// Completions in both windows, adding `in_flight` (wrapping: `u64::MAX` is one fewer, 0
    /// none) to the entries in flight on the second window's line.
    #[inline(always)]
    fn record_completion_moving(
        &self,
        slot: usize,
        now_nanos: u64,
        rt_micros: u64,
        count: u64,
        error: bool,
        in_flight: u64,
    ) {
        let errors = if error { count } else { 0 };
        self.second
            .add_completion_moving(slot, now_nanos, rt_micros, count, errors, in_flight);
        if !self.minute.is_fed() {
            self.minute
                .add_completion_from(slot, now_nanos, rt_micros, count, errors);
        }
    }

    // === reading (Sentinel's StatisticNode) ===

    /// Admitted per second.
    pub fn pass_qps(&self, now_nanos: u64) -> f64 {
        self.second.rate(now_nanos, Event::Pass)
    }

    /// Refused per second.
    pub fn block_qps(&self, now_nanos: u64) -> f64 {
        self.second.rate(now_nanos, Event::Block)
    }

    /// Admitted plus refused per second.
    pub fn total_qps(&self, now_nanos: u64) -> f64 {
        self.pass_qps(now_nanos) + self.block_qps(now_nanos)
    }

    /// Completed per second.
    pub fn success_qps(&self, now_nanos: u64) -> f64 {
        self.second.rate(now_nanos, Event::Success)
    }

    /// Errors per second.
    pub fn error_qps(&self, now_nanos: u64) -> f64 {
        self.second.rate(now_nanos, Event::Error)
    }

    /// Occupied (borrowed) passes per second in the second window: Sentinel's
    /// `occupiedPassQps`, which reads 0, since borrowed passes are counted as occupied in the
    /// minute window only (see [`add_occupied_pass`](Self::add_occupied_pass)); the minute
    /// window's [`snapshot`](SlidingWindow::snapshot) has them.
    pub fn occupied_pass_qps(&self, now_nanos: u64) -> f64 {
        self.second.rate(now_nanos, Event::OccupiedPass)
    }

    /// Sentinel's `maxSuccessQps`: `max(busiest bucket's completions, 1) * buckets / interval`.
    pub fn max_success_qps(&self, now_nanos: u64) -> f64 {
        let buckets = self.second.config().buckets() as f64;
        self.second.max_bucket(now_nanos, Event::Success) as f64 * buckets
            / self.second.interval_secs()
    }

    /// Average RT of completions in the second window, microseconds; 0 when none completed.
    pub fn avg_rt_micros(&self, now_nanos: u64) -> f64 {
        self.second.snapshot(now_nanos).avg_rt_micros()
    }

    /// Smallest RT in the second window, microseconds (the max RT when nothing completed).
    pub fn min_rt_micros(&self, now_nanos: u64) -> u64 {
        self.second.min_rt_micros(now_nanos)
    }

    /// Sentinel's `tryOccupyNext`: how long a prioritized entry refused by a QPS limit of
    /// `threshold` would wait for a bucket of the second window to leave and make room for
    /// `acquire` more, counting passes already borrowed; `None` if not within `timeout`.
    pub(crate) fn try_occupy_next(
        &self,
        now: u64,
        acquire: u32,
        threshold: f64,
        timeout: Duration,
    ) -> Option<Duration> {
        let window = &self.second;
        let interval = window.config().interval().as_nanos() as i128;
        let length = i128::from(window.bucket_nanos());
        let timeout = timeout.as_nanos() as i128;
        let now_i = i128::from(now);
        // Java: double maxCount = threshold * IntervalProperty.INTERVAL / 1000;
        let max_count = threshold * window.config().interval().as_secs_f64();
        let borrowed = window.waiting(now) as i128;
        if borrowed as f64 >= max_count {
            return None;
        }
        let mut earliest = now_i - now_i % length + length - interval;
        let mut current_pass = window.sum(now, Event::Pass) as i128;
        let mut index = 0i128;
        while earliest < now_i {
            let wait = index * length + length - now_i % length;
            if wait >= timeout {
                break;
            }
            // Java: rollingCounterInSecond.getWindowPass(earliestTime) (null, so 0, before
            // the epoch).
            let bucket_pass =
                u64::try_from(earliest).map_or(0, |at| window.window_pass(at)) as i128;
            if ((current_pass + borrowed + i128::from(acquire) - bucket_pass) as f64) <= max_count {
                return Some(Duration::from_nanos(wait as u64));
            }
            earliest += length;
            current_pass -= bucket_pass;
            index += 1;
        }
        None
    }

    /// Counts `count` passes borrowed for the bucket holding `at_nanos` (Sentinel's
    /// `addWaitingRequest`).
    pub(crate) fn add_waiting(&self, at_nanos: u64, count: u64) {
        self.second.add_borrowed(at_nanos, count);
    }

    /// The exact in-flight counter concurrency rules check and count on.
    pub(crate) fn limited(&self) -> &AtomicU64 {
        &self.limited
    }

    /// Entries in flight.
    pub fn concurrency(&self) -> i64 {
        self.second.in_flight()
    }

    /// Admitted in the previous second (the minute window's previous bucket).
    pub fn previous_pass_qps(&self, now_nanos: u64) -> u64 {
        self.minute.previous(now_nanos, Event::Pass)
    }

    /// Refused in the previous second.
    pub fn previous_block_qps(&self, now_nanos: u64) -> u64 {
        self.minute.previous(now_nanos, Event::Block)
    }

    /// Admitted over the minute window.
    pub fn total_pass(&self, now_nanos: u64) -> u64 {
        self.minute.sum(now_nanos, Event::Pass)
    }

    /// Every count of the previous second (the minute window's previous bucket): a complete
    /// second, as Sentinel's metric log records it.
    pub fn previous_second(&self, now_nanos: u64) -> WindowSnapshot {
        self.minute.previous_snapshot(now_nanos)
    }

    /// Every read at once.
    pub fn stats(&self, now_nanos: u64) -> NodeStats {
        let second = self.second.snapshot(now_nanos);
        let minute = self.minute.snapshot(now_nanos);
        let secs = self.second.interval_secs();
        NodeStats {
            pass_qps: second.pass as f64 / secs,
            block_qps: second.block as f64 / secs,
            success_qps: second.success as f64 / secs,
            error_qps: second.error as f64 / secs,
            occupied_pass_qps: second.occupied_pass as f64 / secs,
            avg_rt_micros: second.avg_rt_micros(),
            min_rt_micros: second.min_rt_micros,
            max_success_qps: self.max_success_qps(now_nanos),
            concurrency: self.concurrency(),
            previous_pass_qps: self.previous_pass_qps(now_nanos),
            previous_block_qps: self.previous_block_qps(now_nanos),
            total_pass: minute.pass,
            total_block: minute.block,
            total_success: minute.success,
            total_error: minute.error,
        }
    }
}

impl fmt::Debug for ResourceNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceNode")
            .field("second", &self.second)
            .field("minute", &self.minute)
            .field("concurrency", &self.concurrency())
            .finish()
    }
}
