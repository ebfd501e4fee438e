use spillway::{Admission, BlockError, Entry, EntryBuilder, OwnedAdmission, OwnedEntry};

/// Attempts an entry and awaits what it is asked to: a pacing flow rule's turn on a tokio
/// timer, and a place in a full adaptive limit's queue for at most the queue's timeout. The
/// async twin of [`EntryBuilder::enter`], which waits in no adaptive queue.
///
/// Cancellation-safe: dropped while it waits, the queued entry gives its slot back and leaves
/// the adaptive queue (see [`spillway::Pending`] and [`spillway::Waiting`]).
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
///     .with_behavior(Behavior::throttle(Duration::from_secs(1)))])?;
/// let first = enter(spillway.entry("export")).await?;
/// let second = enter(spillway.entry("export")).await?; // waited 100 ms on a timer
/// assert_eq!(second.started_at_nanos() - first.started_at_nanos(), 100_000_000);
/// # Ok(())
/// # }
/// ```
pub async fn enter(builder: EntryBuilder<'_>) -> Result<Entry<'_>, BlockError> {
    let mut admission = builder.try_enter()?;
    loop {
        // Dropping this future drops what it waits with, which gives back what it holds.
        admission = match admission {
            Admission::Ready(entry) => return Ok(entry),
            Admission::Queued(pending) => {
                tokio::time::sleep(pending.wait()).await;
                return Ok(pending.enter());
            }
            Admission::Waiting(waiting) => {
                match tokio::time::timeout(waiting.timeout(), waiting.granted()).await {
                    Ok(()) => waiting.resume()?,
                    Err(_) => return Err(waiting.give_up()),
                }
            }
        };
    }
}

/// Awaits what an owned admission asks (see [`enter`]) and returns its entry: for response
/// futures and spawned tasks.
///
/// # Errors
///
/// A [`BlockError`] when the entry waited out an adaptive queue's timeout, or a later check
/// refused it once it had its place.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveQueue, AdaptiveRule, AimdConfig};
/// use spillway::{BlockKind, Spillway};
/// use spillway_tower::{admit_owned, TokioClock};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let spillway = Spillway::new_with_clock(TokioClock::new());
/// let aimd = AimdConfig { initial_limit: 1, min_limit: 1, max_limit: 1, ..Default::default() };
/// let queue = AdaptiveQueue { timeout: Duration::from_millis(50), ..Default::default() };
/// spillway.load_adaptive_rules(vec![
///     AdaptiveRule::resource("one", "export", AdaptiveAlgorithm::Aimd(aimd)).with_queue(queue),
/// ])?;
/// let first = admit_owned(spillway.entry("export").try_enter_owned()?).await?;
/// // The limit of 1 is full: the next waits 50 ms in the queue, then is refused.
/// let waited = admit_owned(spillway.entry("export").try_enter_owned()?).await;
/// assert_eq!(waited.unwrap_err().kind(), BlockKind::Adaptive);
/// // One waiting when the first ends takes its place.
/// let admission = spillway.entry("export").try_enter_owned()?;
/// let second = tokio::spawn(admit_owned(admission));
/// tokio::time::sleep(Duration::from_millis(10)).await;
/// drop(first);
/// assert!(second.await?.is_ok());
/// # Ok(())
/// # }
/// ```
pub async fn admit_owned(admission: OwnedAdmission) -> Result<OwnedEntry, BlockError> {
    let mut admission = admission;
    loop {
        admission = match admission {
            OwnedAdmission::Ready(entry) => return Ok(entry),
            OwnedAdmission::Queued(pending) => {
                tokio::time::sleep(pending.wait()).await;
                return Ok(pending.enter());
            }
            OwnedAdmission::Waiting(waiting) => {
                match tokio::time::timeout(waiting.timeout(), waiting.granted()).await {
                    Ok(()) => waiting.resume()?,
                    Err(_) => return Err(waiting.give_up()),
                }
            }
        };
    }
}
