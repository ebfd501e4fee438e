use spillway::{Admission, BlockError, Entry, EntryBuilder};

/// Attempts an entry and, if a pacing flow rule queues it, awaits its turn on a tokio timer:
/// the async twin of [`EntryBuilder::enter`].
///
/// Cancellation-safe: dropped while it waits, the queued entry gives its slot back (see
/// [`spillway::Pending`]).
///
/// # Errors
///
/// A [`BlockError`] when a check refuses the entry.
///
/// # Examples
///
/// ```
/// use spillway::flow::{Behavior, FlowRule};
/// use spillway::Spillway;
/// use spillway_tower::{enter, TokioClock};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let spillway = Spillway::new_with_clock(TokioClock::new());
/// spillway.load_flow_rules(vec![FlowRule::qps("pace", "export", 10.0)
///     .with_behavior(Behavior::Throttle { max_queueing_time: Duration::from_secs(1) })])?;
/// let first = enter(spillway.entry("export")).await?;
/// let second = enter(spillway.entry("export")).await?; // waited 100 ms on a timer
/// assert_eq!(second.started_at_nanos() - first.started_at_nanos(), 100_000_000);
/// # Ok(())
/// # }
/// ```
pub async fn enter(builder: EntryBuilder<'_>) -> Result<Entry<'_>, BlockError> {
    match builder.try_enter()? {
        Admission::Ready(entry) => Ok(entry),
        Admission::Queued(pending) => {
            // Dropping this future drops `pending`, which gives the slot back.
            tokio::time::sleep(pending.wait()).await;
            Ok(pending.enter())
        }
    }
}
