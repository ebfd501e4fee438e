//! What a completed call tells an adaptive limit, and a window of such samples.

use std::time::Duration;

/// One completed call, as an adaptive limit sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When the call was admitted, on the limiter's clock (nanoseconds).
    pub started_nanos: u64,
    /// Its round-trip time.
    pub rtt: Duration,
    /// Calls in flight just after it was admitted, itself included.
    pub in_flight: u32,
    /// Whether it was dropped: timed out, or refused downstream for overload. Loss-based
    /// algorithms (AIMD, Vegas) shrink the limit on a drop.
    pub dropped: bool,
}

/// The samples of one window, aggregated: Netflix's `SampleWindow` (count, average and minimum
/// RTT, largest in-flight count, any drop), and the RTTs for a percentile (Envoy's sample RTT).
#[derive(Debug, Clone)]
pub struct SampleWindow {
    count: u64,
    sum_nanos: u128,
    min_nanos: u64,
    max_in_flight: u32,
    dropped: bool,
    kept: Kept,
}

impl Default for SampleWindow {
    fn default() -> Self {
        Self {
            count: 0,
            sum_nanos: 0,
            min_nanos: u64::MAX,
            max_in_flight: 0,
            dropped: false,
            kept: Kept::default(),
        }
    }
}

impl SampleWindow {
    /// Adds one sample.
    pub fn add(&mut self, sample: &Sample) {
        let nanos = u64::try_from(sample.rtt.as_nanos()).unwrap_or(u64::MAX);
        self.count += 1;
        self.sum_nanos += u128::from(nanos);
        self.min_nanos = self.min_nanos.min(nanos);
        self.max_in_flight = self.max_in_flight.max(sample.in_flight);
        self.dropped |= sample.dropped;
        self.kept.add(nanos);
    }

    /// Samples in the window.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Average RTT (Netflix's tracked RTT: `sum / count`, truncated to whole nanoseconds), or
    /// `None` when empty.
    pub fn average(&self) -> Option<Duration> {
        let average = self.sum_nanos.checked_div(u128::from(self.count))?;
        Some(Duration::from_nanos(
            u64::try_from(average).unwrap_or(u64::MAX),
        ))
    }

    /// Smallest RTT, or `None` when empty.
    pub fn min(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_nanos(self.min_nanos))
    }

    /// The RTT at `percentile` (0 to 1) of the window, by nearest rank (the `ceil(percentile x
    /// n)`-th smallest), or `None` when empty. Exact for up to 4096 samples; past that, of an
    /// even subsample of them.
    pub fn percentile(&self, percentile: f64) -> Option<Duration> {
        self.kept.percentile(percentile).map(Duration::from_nanos)
    }

    /// Largest in-flight count among the samples.
    pub fn max_in_flight(&self) -> u32 {
        self.max_in_flight
    }

    /// Whether any sample was dropped.
    pub fn dropped(&self) -> bool {
        self.dropped
    }
}

/// Most RTTs a window keeps for its percentile.
const KEPT: usize = 4096;

/// The RTTs of a window, for a percentile: every one while there are at most [`KEPT`]; past
/// that, an even subsample (every 2nd, then every 4th, ...), so that memory stays bounded and
/// the result stays reproducible.
#[derive(Debug, Clone, Default)]
struct Kept {
    values: Vec<u64>,
    /// One value in `stride` is kept.
    stride: u64,
    seen: u64,
}

impl Kept {
    fn add(&mut self, value: u64) {
        let stride = self.stride.max(1);
        if self.seen % stride == 0 {
            if self.values.len() == KEPT {
                let mut index = 0;
                self.values.retain(|_| {
                    index += 1;
                    index % 2 == 1
                });
                self.stride = stride * 2;
                if self.seen % self.stride == 0 {
                    self.values.push(value);
                }
            } else {
                self.values.push(value);
            }
        }
        self.seen += 1;
    }

    /// The nearest-rank percentile: the `ceil(percentile x n)`-th smallest kept value (at least
    /// the first).
    fn percentile(&self, percentile: f64) -> Option<u64> {
        if self.values.is_empty() {
            return None;
        }
        let n = self.values.len();
        let rank = ((percentile.clamp(0.0, 1.0) * n as f64).ceil() as usize).clamp(1, n);
        let mut values = self.values.clone();
        let (_, value, _) = values.select_nth_unstable(rank - 1);
        Some(*value)
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;

    #[test]
    fn past_its_capacity_a_window_keeps_an_even_subsample() {
        let mut kept = Kept::default();
        for value in 0..(KEPT as u64 * 3) {
            kept.add(value);
        }
        assert!(kept.values.len() <= KEPT);
        assert_eq!(kept.stride, 4);
        assert!(kept.values.iter().all(|value| value % 4 == 0));
        let median = kept.percentile(0.5).unwrap();
        assert!(
            (KEPT as u64 * 3 / 2).abs_diff(median) <= 4,
            "median {median}"
        );
    }

    #[test]
    fn a_window_aggregates_as_netflix_and_envoy_read_it() {
        let mut window = SampleWindow::default();
        assert_eq!((window.average(), window.percentile(0.5)), (None, None));
        for (rtt_ms, in_flight) in [(10, 3), (30, 7), (20, 5), (40, 2)] {
            window.add(&Sample {
                started_nanos: 0,
                rtt: Duration::from_millis(rtt_ms),
                in_flight,
                dropped: false,
            });
        }
        assert_eq!(window.count(), 4);
        assert_eq!(window.average(), Some(Duration::from_millis(25)));
        assert_eq!(window.min(), Some(Duration::from_millis(10)));
        assert_eq!(window.max_in_flight(), 7);
        assert!(!window.dropped());
        // Nearest rank: the 2nd of 4 values, and the 4th for the 90th percentile.
        assert_eq!(window.percentile(0.5), Some(Duration::from_millis(20)));
        assert_eq!(window.percentile(0.9), Some(Duration::from_millis(40)));
        assert_eq!(window.percentile(0.0), Some(Duration::from_millis(10)));
    }
}
