//! A bounded queue of callers waiting for a place under an adaptive limit.

use super::error::{AdaptiveError, Check};
use crate::sync::{AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Which waiting caller a freed place goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum QueueOrder {
    /// The one that has waited longest: fair, and the default.
    #[default]
    Fifo,
    /// The one that came last (Netflix's `LifoBlockingLimiter`): under a long overload the
    /// freshest callers, whose clients still wait, are served, and the oldest time out.
    Lifo,
    /// First in, first out while the queue has been empty within the last `timeout` (a
    /// burst, which it drains in order: each caller in it can still be served in time), last
    /// in, first out once it has stood longer than that (an overload: its oldest callers would
    /// time out anyway, so the freshest are served): Facebook's "adaptive LIFO". Near capacity
    /// no caller is left to time out behind newer ones, and under overload the callers that
    /// get a place have waited least.
    Adaptive,
}

/// Which end of the queue a freed place is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Front,
    Back,
}

/// An adaptive limit's queue: while the limit is full, up to `capacity` callers that can wait
/// (async callers: [`EntryBuilder::try_enter`](crate::EntryBuilder::try_enter) and the tower
/// layer) wait up to `timeout` each for a place, which a finishing call hands to the next one
/// in `order`. A caller that finds the queue full, or waits out its timeout, is refused as
/// without a queue. Callers that cannot wait ([`EntryBuilder::enter`](crate::EntryBuilder::enter))
/// are refused at once, and while anyone waits, newcomers queue behind them rather than take a
/// freed place first.
///
/// # Examples
///
/// ```
/// use spillway::adaptive::{AdaptiveQueue, QueueOrder};
/// use std::time::Duration;
///
/// let queue = AdaptiveQueue {
///     capacity: 50,
///     order: QueueOrder::Lifo,
///     timeout: Duration::from_millis(50),
/// };
/// queue.validate()?;
/// assert_eq!(AdaptiveQueue::default().timeout, Duration::from_millis(100));
/// # Ok::<(), spillway::adaptive::AdaptiveError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct AdaptiveQueue {
    /// Most callers waiting at once (default 100).
    pub capacity: u32,
    /// Which waiting caller goes first (default FIFO).
    pub order: QueueOrder,
    /// Longest wait of one caller (default 100 ms): brief, as a queue in front of a limit that
    /// keeps latency low should be.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub timeout: Duration,
}

impl Default for AdaptiveQueue {
    fn default() -> Self {
        Self {
            capacity: 100,
            order: QueueOrder::Fifo,
            timeout: Duration::from_millis(100),
        }
    }
}

/// Most callers a queue may hold.
const MAX_CAPACITY: u32 = 1_000_000;
/// Longest wait a queue may set.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

impl AdaptiveQueue {
    /// Checks the settings: `1 <= capacity <= 1,000,000`, `0 < timeout <= 60 s`.
    ///
    /// # Errors
    ///
    /// An [`AdaptiveError`] naming the field (`queue.capacity`, `queue.timeout`).
    pub fn validate(&self) -> Result<(), AdaptiveError> {
        let check = Check { algorithm: "queue" };
        check.positive("queue.capacity", self.capacity)?;
        if self.capacity > MAX_CAPACITY {
            return Err(AdaptiveError::new(
                "queue",
                "queue.capacity",
                format!("must be at most {MAX_CAPACITY}, got {}", self.capacity),
            ));
        }
        check.nonzero_duration("queue.timeout", self.timeout)?;
        if self.timeout > MAX_TIMEOUT {
            return Err(AdaptiveError::new(
                "queue",
                "queue.timeout",
                format!("must be at most {MAX_TIMEOUT:?}, got {:?}", self.timeout),
            ));
        }
        Ok(())
    }
}

/// One waiting caller: granted a place, or not yet, and whom to wake.
#[derive(Debug, Default)]
pub(crate) struct WaitSlot {
    granted: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl WaitSlot {
    /// Whether a place was handed to it.
    pub(crate) fn is_granted(&self) -> bool {
        self.granted.load(Ordering::Acquire)
    }

    fn waker(&self) -> MutexGuard<'_, Option<Waker>> {
        self.waker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hands it a place and wakes it.
    fn grant(&self) {
        self.granted.store(true, Ordering::Release);
        if let Some(waker) = self.waker().take() {
            waker.wake();
        }
    }
}

/// Resolves once the slot is granted a place.
#[derive(Debug)]
pub(crate) struct Granted<'a> {
    pub(crate) slot: &'a WaitSlot,
}

impl Future for Granted<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.slot.is_granted() {
            return Poll::Ready(());
        }
        let mut waker = self.slot.waker();
        match waker.as_mut() {
            Some(stored) if stored.will_wake(cx.waker()) => {}
            _ => *waker = Some(cx.waker().clone()),
        }
        drop(waker);
        // A grant between the first test and the waker's store found no waker to wake.
        if self.slot.is_granted() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// The callers waiting under one limiter. Every change, and every hand-over of a place, happens
/// under its lock, so that a place freed while a caller joins is never missed: either the
/// joining caller's own hand-over sees the place free, or the freeing call's sees the caller.
#[derive(Debug)]
pub(crate) struct Waiters {
    pub(crate) config: AdaptiveQueue,
    queue: Mutex<VecDeque<Arc<WaitSlot>>>,
    /// Callers waiting now (read without the lock, to keep newcomers behind them).
    len: AtomicU64,
    /// Callers that gave up (timed out) since the limiter was made.
    timeouts: AtomicU64,
    /// When the queue was last seen empty (clock nanoseconds; written under the lock).
    empty_at: AtomicU64,
}

impl Waiters {
    pub(crate) fn new(config: AdaptiveQueue) -> Self {
        Self {
            config,
            queue: Mutex::new(VecDeque::new()),
            len: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            empty_at: AtomicU64::new(0),
        }
    }

    /// Records the queue's length after a change at `now` (and, if it is empty, that it was
    /// empty then).
    pub(crate) fn changed(&self, queue: &VecDeque<Arc<WaitSlot>>, now: u64) {
        if queue.is_empty() {
            self.empty_at.store(now, Ordering::Relaxed);
        }
        self.len.store(queue.len() as u64, Ordering::Release);
    }

    /// The end the next freed place is taken from at `now`.
    fn end(&self, now: u64) -> End {
        match self.config.order {
            QueueOrder::Fifo => End::Front,
            QueueOrder::Lifo => End::Back,
            QueueOrder::Adaptive => {
                let empty_for = now.saturating_sub(self.empty_at.load(Ordering::Relaxed));
                // Standing longer than a caller may wait: an overload.
                if u128::from(empty_for) > self.config.timeout.as_nanos() {
                    End::Back
                } else {
                    End::Front
                }
            }
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<WaitSlot>>> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Callers waiting now.
    pub(crate) fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    pub(crate) fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }

    pub(crate) fn count_timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a waiting caller at `now`, unless the queue is full.
    pub(crate) fn join(
        &self,
        queue: &mut VecDeque<Arc<WaitSlot>>,
        now: u64,
    ) -> Option<Arc<WaitSlot>> {
        if queue.len() >= self.config.capacity as usize {
            return None;
        }
        // Empty until now.
        self.changed(queue, now);
        let slot = Arc::new(WaitSlot::default());
        queue.push_back(Arc::clone(&slot));
        self.changed(queue, now);
        Some(slot)
    }

    /// The caller a place freed at `now` goes to, taken out of the queue, and the end it was
    /// taken from.
    pub(crate) fn next(
        &self,
        queue: &mut VecDeque<Arc<WaitSlot>>,
        now: u64,
    ) -> Option<(Arc<WaitSlot>, End)> {
        let end = self.end(now);
        let slot = match end {
            End::Front => queue.pop_front(),
            End::Back => queue.pop_back(),
        };
        self.len.store(queue.len() as u64, Ordering::Release);
        slot.map(|slot| (slot, end))
    }

    /// Puts back a caller [`next`](Self::next) took, where it was.
    pub(crate) fn put_back(
        &self,
        queue: &mut VecDeque<Arc<WaitSlot>>,
        slot: Arc<WaitSlot>,
        end: End,
    ) {
        match end {
            End::Front => queue.push_front(slot),
            End::Back => queue.push_back(slot),
        }
        self.len.store(queue.len() as u64, Ordering::Release);
    }

    /// Hands `slot` its place.
    pub(crate) fn grant(slot: &WaitSlot) {
        slot.grant();
    }

    /// Takes a caller that stops waiting out of the queue (if it is still there).
    pub(crate) fn leave(
        &self,
        queue: &mut VecDeque<Arc<WaitSlot>>,
        slot: &Arc<WaitSlot>,
        now: u64,
    ) {
        queue.retain(|waiting| !Arc::ptr_eq(waiting, slot));
        self.changed(queue, now);
    }
}
