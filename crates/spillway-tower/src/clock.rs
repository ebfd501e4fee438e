use spillway::Clock;
use tokio::time::Instant;

/// A [`Clock`] on tokio's time: [`tokio::time::Instant`], which tokio's test utilities can pause
/// and advance.
///
/// Use it for spillway instances and limiters driven from async code, so that a paused-time test
/// moves their statistics and their waits together. Its [`Clock::sleep`] (used only by spillway's
/// *blocking* APIs) blocks the thread; from async code, await [`acquire`](crate::acquire) and
/// [`enter`](crate::enter) instead. Making one sets the warning of
/// [`warn_on_blocking_waits`](crate::warn_on_blocking_waits), unless a hook is set.
///
/// # Examples
///
/// ```
/// use spillway::Clock;
/// use spillway_tower::TokioClock;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = TokioClock::new();
/// let before = clock.now_nanos();
/// tokio::time::sleep(Duration::from_millis(5)).await;
/// assert_eq!(clock.now_nanos() - before, 5_000_000);
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: Instant,
    /// What it reads at its origin: 0, or the Unix time then ([`TokioClock::unix`]).
    offset: u64,
}

impl TokioClock {
    /// A clock whose origin is tokio's now.
    pub fn new() -> Self {
        crate::blocking::install_default();
        Self {
            origin: Instant::now(),
            offset: 0,
        }
    }

    /// A clock that reads nanoseconds since the Unix epoch: the wall clock when it is made,
    /// advanced by tokio's time (paused and advanced with it in a test), as
    /// [`SystemClock::unix`](spillway::SystemClock::unix) is by its counter.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::Clock;
    /// use spillway_tower::TokioClock;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let clock = TokioClock::unix();
    /// let before = clock.now_millis();
    /// assert!(before > 1_577_836_800_000); // past 2020-01-01
    /// tokio::time::sleep(Duration::from_millis(5)).await;
    /// assert_eq!(clock.now_millis() - before, 5);
    /// # }
    /// ```
    pub fn unix() -> Self {
        #[allow(clippy::disallowed_methods)] // its origin is the wall clock's now, once
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
            });
        Self {
            offset: wall,
            ..Self::new()
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_nanos(&self) -> u64 {
        // u64 nanoseconds last 584 years from the origin (from the epoch: to 2554).
        let since = Instant::now().duration_since(self.origin).as_nanos() as u64;
        since.saturating_add(self.offset)
    }
}
