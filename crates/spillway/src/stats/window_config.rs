use std::error::Error;
use std::fmt;
use std::time::Duration;

/// Most accumulator lines a window keeps (and a reader checks).
pub(crate) const MAX_STRIPES: usize = 64;

/// The shape of a [`SlidingWindow`](super::SlidingWindow): how many buckets over what interval,
/// how many per-thread accumulators, and where min RT starts.
///
/// # Examples
///
/// ```
/// use spillway::stats::WindowConfig;
/// use std::time::Duration;
///
/// // Sentinel's second window: 2 buckets of 500 ms.
/// let second = WindowConfig::sentinel_second();
/// assert_eq!(second.bucket_length(), Duration::from_millis(500));
///
/// // A finer window: 10 buckets of 100 ms.
/// let fine = WindowConfig::new(10, Duration::from_secs(1)).unwrap();
/// assert_eq!(fine.buckets(), 10);
///
/// // The interval must split into whole microseconds per bucket.
/// assert!(WindowConfig::new(3, Duration::from_millis(1)).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowConfig {
    buckets: usize,
    interval: Duration,
    stripes: usize,
    max_rt: Duration,
}

/// Most buckets a window may have (an hour of one-second buckets).
pub const MAX_BUCKETS: usize = 3_600;

/// Sentinel's default statistic max RT (`csp.sentinel.statistic.max.rt`): 5000 ms.
pub const DEFAULT_MAX_RT: Duration = Duration::from_millis(5_000);

impl WindowConfig {
    /// `buckets` buckets over `interval`, with default stripes and Sentinel's 5 s max RT.
    ///
    /// # Errors
    ///
    /// If `buckets` is 0 or above [`MAX_BUCKETS`], or `interval` does not divide into `buckets`
    /// buckets of a whole number of microseconds (at least one).
    pub fn new(buckets: usize, interval: Duration) -> Result<Self, WindowConfigError> {
        if buckets == 0 || buckets > MAX_BUCKETS {
            return Err(WindowConfigError::Buckets(buckets));
        }
        let nanos = interval.as_nanos();
        let bucket = nanos / buckets as u128;
        if nanos % buckets as u128 != 0
            || bucket == 0
            || bucket % 1_000 != 0
            || nanos > u64::MAX as u128
        {
            return Err(WindowConfigError::Interval { buckets, interval });
        }
        Ok(Self {
            buckets,
            interval,
            stripes: super::default_stripes(),
            max_rt: DEFAULT_MAX_RT,
        })
    }

    /// Sentinel's second window: 2 buckets over 1 s.
    pub fn sentinel_second() -> Self {
        Self::new(2, Duration::from_secs(1)).expect("valid shape")
    }

    /// Sentinel's minute window: 60 buckets over 60 s.
    pub fn sentinel_minute() -> Self {
        Self::new(60, Duration::from_secs(60)).expect("valid shape")
    }

    /// Sets how many threads get an accumulator of their own (at most 64): a cache line holding
    /// their share of the current bucket, written without locked instructions. Threads beyond
    /// that many (by exclusive thread slot, lowest first) write the shared ring with
    /// compare-and-swap. 0 sends every write to the shared ring: cheapest to read (a read scans
    /// one line per bucket, no accumulators), most contended to write. The default is twice the
    /// CPUs, rounded up to a power of two, at most 16.
    pub fn with_stripes(mut self, stripes: usize) -> Self {
        self.stripes = stripes.min(MAX_STRIPES);
        self
    }

    /// Sets the max RT: recorded response times are capped here and an empty window reports it
    /// as its min RT (Sentinel's `statisticMaxRt`, default 5 s). Kept at least 1 µs.
    pub fn with_max_rt(mut self, max_rt: Duration) -> Self {
        self.max_rt = max_rt.max(Duration::from_micros(1));
        self
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.buckets
    }

    /// The interval the buckets cover together.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Length of one bucket.
    pub fn bucket_length(&self) -> Duration {
        self.interval / self.buckets as u32
    }

    /// Threads with an accumulator of their own.
    pub fn stripes(&self) -> usize {
        self.stripes
    }

    /// The max RT.
    pub fn max_rt(&self) -> Duration {
        self.max_rt
    }
}

/// Why a [`WindowConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WindowConfigError {
    /// Bucket count is 0 or above [`MAX_BUCKETS`].
    Buckets(usize),
    /// The interval does not split into whole-microsecond buckets.
    Interval {
        /// Requested bucket count.
        buckets: usize,
        /// Requested interval.
        interval: Duration,
    },
}

impl fmt::Display for WindowConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Buckets(n) => write!(f, "window buckets must be 1..={MAX_BUCKETS}, got {n}"),
            Self::Interval { buckets, interval } => write!(
                f,
                "window interval {interval:?} does not split into {buckets} buckets of a whole number of microseconds"
            ),
        }
    }
}

impl Error for WindowConfigError {}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;

    #[test]
    fn rejects_shapes_that_do_not_split_evenly() {
        assert_eq!(
            WindowConfig::new(0, Duration::from_secs(1)),
            Err(WindowConfigError::Buckets(0))
        );
        assert_eq!(
            WindowConfig::new(MAX_BUCKETS + 1, Duration::from_secs(3_601)),
            Err(WindowConfigError::Buckets(MAX_BUCKETS + 1))
        );
        assert!(WindowConfig::new(3, Duration::from_millis(1_000)).is_err());
        assert!(WindowConfig::new(2, Duration::from_nanos(1_000)).is_err());
        assert!(WindowConfig::new(2, Duration::ZERO).is_err());
        let err = WindowConfig::new(3, Duration::from_millis(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "window interval 1ms does not split into 3 buckets of a whole number of microseconds"
        );
    }

    #[test]
    fn accepts_sentinel_shapes_and_microsecond_buckets() {
        assert_eq!(WindowConfig::sentinel_second().buckets(), 2);
        assert_eq!(
            WindowConfig::sentinel_minute().bucket_length(),
            Duration::from_secs(1)
        );
        let fine = WindowConfig::new(4, Duration::from_micros(8)).unwrap();
        assert_eq!(fine.bucket_length(), Duration::from_micros(2));
    }

    #[test]
    fn settings_are_clamped() {
        let config = WindowConfig::sentinel_second()
            .with_stripes(1_000)
            .with_max_rt(Duration::ZERO);
        assert_eq!(config.stripes(), 64);
        assert_eq!(config.max_rt(), Duration::from_micros(1));
        assert_eq!(config.with_stripes(0).stripes(), 0);
    }
}
