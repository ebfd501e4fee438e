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
}

impl TokioClock {
    /// A clock whose origin is tokio's now.
    pub fn new() -> Self {
        crate::blocking::install_default();
        Self {
            origin: Instant::now(),
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
        // u64 nanoseconds last 584 years from the origin.
        Instant::now().duration_since(self.origin).as_nanos() as u64
    }
}
