//! A bounded queue of callers waiting for a place under an adaptive limit.

use super::claim::Claim;
use super::error::{AdaptiveError, Check};
use super::lanes::{Lanes, Taken};
use super::wait_slot::{End, Shed, WaitSlot};
use crate::sync::{AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};
use std::sync::Arc;
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
    /// First in, first out until the queue fails a caller, last in, first out from then until
    /// it is next empty. It fails a caller when one leaves without a place (its `timeout` or
    /// deadline ran out, its client gave up after more than half the timeout, or a more
    /// critical caller took its place in a full queue), and when for a whole `timeout` every
    /// caller it served had waited more than half of it (CoDel's test of a standing queue:
    /// clients whose patience is the queue's then give up as they are served). While it serves every caller in time, it serves them
    /// in order, as near capacity, where a burst stands a while and drains; once it fails one,
    /// an overload, the freshest callers, whose clients still wait, are served, while the
    /// oldest, which would time out anyway, do. Facebook's "adaptive LIFO" switches once the
    /// queue has stood for a while; spillway's waits for a caller it failed, because near
    /// capacity a small service's queue can stand longer than its timeout and still serve
    /// everyone in time, and serving the newest first there leaves the oldest to time out (in
    /// the lab's simulated long run, 0.5x to 0.9x of capacity on a 4-worker service, a 150 ms
    /// queue in front of Envoy's controller refused 374 requests in this order, three times as
    /// many serving the newest first throughout (`lifo`), and 28 in order throughout (`fifo`),
    /// which under an overload serves requests whose clients have left).
    Adaptive,
}

/// An adaptive limit's queue: while the limit is full, up to `capacity` callers that can wait
/// (async callers: [`EntryBuilder::try_enter`](crate::EntryBuilder::try_enter) and the tower
/// layer) wait up to `timeout` each for a place, which a finishing call hands on. Callers that
/// cannot wait ([`EntryBuilder::enter`](crate::EntryBuilder::enter)) are refused at once, and
/// while anyone waits, newcomers queue behind them rather than take a freed place first.
///
/// Who gets a freed place:
///
/// - **The most critical first** ([`EntryBuilder::criticality`](crate::EntryBuilder::criticality)):
///   a place never goes to a caller while a more critical one waits. A caller that finds the
///   queue full takes the place of a less critical waiter, which is refused; or, among callers
///   of its own criticality, of one of the tenant with the longest line of waiters, if its own
///   line is shorter. Otherwise it is refused as without a queue. Calls already running are
///   never stopped: a critical caller may wait until one of them ends.
/// - **Tenants in turn** ([`EntryBuilder::tenant`](crate::EntryBuilder::tenant)): within a
///   criticality, each tenant hashes to two of 64 buckets and waits in the shorter, and the
///   buckets with waiters take turns, so a tenant that floods waits behind its own calls (it
///   has at most two turns a round). No state is kept per tenant: a tenant both of whose
///   buckets a flooding tenant also fills (about 1 in 1,000 per flooding tenant) waits as it
///   would without turns.
/// - **Within a bucket, in `order`**: FIFO, LIFO, or adaptive.
/// - **Deadlines** ([`EntryBuilder::deadline`](crate::EntryBuilder::deadline)): a caller waits
///   at most until its deadline; one whose deadline has passed, or that could not be done by
///   it at the limit's current latency, is refused
///   ([`BlockKind::Deadline`](crate::BlockKind::Deadline)) rather than handed a place, or
///   rather than queued. The current latency is an exponential average of the times of the
///   calls that succeeded (each new one weighs an eighth), so that one slow call does not
///   refuse every waiter with a deadline.
///
/// A caller that waits out its timeout is refused as without a queue.
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

/// The callers waiting under one limiter. Every change, and every hand-over of a place, happens
/// under its lock, so that a place freed while a caller joins is never missed: either the
/// joining caller's own hand-over sees the place free, or the freeing call's sees the caller.
#[derive(Debug)]
pub(crate) struct Waiters {
    pub(crate) config: AdaptiveQueue,
    queue: Mutex<Lanes>,
    /// Callers waiting now (read without the lock, to keep newcomers behind them).
    len: AtomicU64,
    /// Callers that gave up (timed out) since the limiter was made.
    timeouts: AtomicU64,
    /// Callers the queue refused since the limiter was made, by why and criticality.
    evicted: [AtomicU64; 4],
    expired: [AtomicU64; 4],
    /// Callers refused at once, the queue full, by criticality.
    full: [AtomicU64; 4],
    /// Whether the queue failed a caller since it was last empty (written under the lock): one
    /// left without a place, or callers were handed places after more than half the timeout
    /// for a whole timeout.
    failed: AtomicBool,
    /// Since when every caller handed a place had waited more than half the timeout (clock
    /// nanoseconds, 0: the last one had not; written under the lock).
    slow_since: AtomicU64,
}

/// What joining a queue came to.
pub(crate) enum Joined {
    /// The caller waits; the waiter it took the place of, if the queue was full, was refused.
    Waiting(Arc<WaitSlot>),
    /// The queue is full of callers that keep their places.
    Full,
}

impl Waiters {
    pub(crate) fn new(config: AdaptiveQueue) -> Self {
        Self {
            config,
            queue: Mutex::new(Lanes::default()),
            len: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            evicted: Default::default(),
            expired: Default::default(),
            full: Default::default(),
            failed: AtomicBool::new(false),
            slow_since: AtomicU64::new(0),
        }
    }

    /// Records the queue's length after a change (and, if it is empty, that the next caller to
    /// join starts a new burst).
    pub(crate) fn changed(&self, queue: &Lanes) {
        if queue.is_empty() {
            self.failed.store(false, Ordering::Relaxed);
            self.slow_since.store(0, Ordering::Relaxed);
        }
        self.len.store(queue.len() as u64, Ordering::Release);
    }

    /// The end the next freed place is taken from.
    fn end(&self) -> End {
        match self.config.order {
            QueueOrder::Fifo => End::Front,
            QueueOrder::Lifo => End::Back,
            // A caller left without a place since the queue was last empty: an overload. (Both
            // are written under the lock, which `end`'s callers hold.)
            QueueOrder::Adaptive if self.failed.load(Ordering::Relaxed) => End::Back,
            QueueOrder::Adaptive => End::Front,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Lanes> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Callers waiting now.
    pub(crate) fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// Whether a freed place goes to the newest caller now: always in `lifo`, never in
    /// `fifo`, and in `adaptive` since the queue failed a caller, until it is next empty.
    pub(crate) fn newest_first(&self) -> bool {
        match self.config.order {
            QueueOrder::Fifo => false,
            QueueOrder::Lifo => true,
            QueueOrder::Adaptive => self.failed.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }

    pub(crate) fn count_timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that a caller left `queue` without a place (under the lock): its time ran out
    /// (the queue's timeout, its deadline, or its client's patience after more than half the
    /// timeout), was too short for the call at the limit's latency, or a more critical caller
    /// took its place in a full queue.
    /// If it left the queue empty, the next caller to join starts a new burst, in order.
    pub(crate) fn late(&self, queue: &Lanes) {
        if !queue.is_empty() {
            self.failed.store(true, Ordering::Relaxed);
        }
    }

    /// Callers the queue refused since the limiter was made, of each criticality (lowest
    /// first): taken the place of, past their deadline, and refused at once when it was full.
    pub(crate) fn shed(&self) -> ([u64; 4], [u64; 4], [u64; 4]) {
        let read = |counts: &[AtomicU64; 4]| -> [u64; 4] {
            std::array::from_fn(|rank| counts[rank].load(Ordering::Relaxed))
        };
        (read(&self.evicted), read(&self.expired), read(&self.full))
    }

    /// Counts a caller of `criticality` refused for its deadline before it joined.
    pub(crate) fn count_expired(&self, criticality: crate::Criticality) {
        self.expired[criticality.rank()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a caller of `criticality` refused at once, the queue full.
    pub(crate) fn count_full(&self, criticality: crate::Criticality) {
        self.full[criticality.rank()].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a waiting caller with `claim` at `now`. A full queue makes room by refusing a
    /// waiter of a lower criticality, or of the same one in a longer bucket (see
    /// [`Lanes::evict_for`]), taken from the end served last.
    pub(crate) fn join(&self, queue: &mut Lanes, now: u64, claim: Claim) -> Joined {
        let bucket = queue.bucket_for(claim.criticality, claim.tenant);
        if queue.len() >= self.config.capacity as usize {
            let last = match self.end() {
                End::Front => End::Back,
                End::Back => End::Front,
            };
            let Some(victim) = queue.evict_for(claim.criticality, bucket, last) else {
                return Joined::Full;
            };
            self.refuse(&victim, Shed::Evicted, queue);
        }
        // Empty until now: a new burst.
        self.changed(queue);
        let slot = Arc::new(WaitSlot::new(claim, bucket, now));
        queue.push(Arc::clone(&slot));
        self.changed(queue);
        Joined::Waiting(slot)
    }

    /// The caller a place freed at `now` goes to, taken out of the queue, and where from. The
    /// length newcomers read still counts it until it is granted or refused: a newcomer must
    /// not take the place on its way to it.
    pub(crate) fn next(&self, queue: &mut Lanes) -> Option<(Arc<WaitSlot>, Taken)> {
        queue.pop(self.end())
    }

    /// Puts back a caller [`next`](Self::next) took, where it was.
    pub(crate) fn put_back(&self, queue: &mut Lanes, slot: Arc<WaitSlot>, taken: Taken) {
        queue.put_back(slot, taken);
        self.len.store(queue.len() as u64, Ordering::Release);
    }

    /// Hands `slot`, taken out of `queue`, its place (already counted in flight) at `now`. A
    /// queue whose callers all waited more than half its timeout before their place came, for
    /// a whole timeout, stands (CoDel's test): it fails its callers as surely as one that lets
    /// them time out, whose clients give up as it serves them.
    pub(crate) fn grant(&self, queue: &Lanes, slot: &WaitSlot, now: u64) {
        slot.grant();
        let timeout = u64::try_from(self.config.timeout.as_nanos()).unwrap_or(u64::MAX);
        let waited = now.saturating_sub(slot.joined);
        if waited > timeout / 2 {
            let since = self.slow_since.load(Ordering::Relaxed);
            if since == 0 {
                self.slow_since.store(now.max(1), Ordering::Relaxed);
            } else if now.saturating_sub(since) >= timeout {
                self.failed.store(true, Ordering::Relaxed);
            }
        } else {
            self.slow_since.store(0, Ordering::Relaxed);
        }
        self.len.store(queue.len() as u64, Ordering::Release);
    }

    /// Refuses `slot`, taken out of `queue`, for `why`, and counts it.
    pub(crate) fn refuse_taken(&self, queue: &Lanes, slot: &WaitSlot, why: Shed) {
        self.refuse(slot, why, queue);
        self.len.store(queue.len() as u64, Ordering::Release);
    }

    /// Refuses `slot`, out of `queue` already, for `why`, and counts it: a caller not served in
    /// time (see [`late`](Self::late)).
    fn refuse(&self, slot: &WaitSlot, why: Shed, queue: &Lanes) {
        let rank = slot.claim.criticality.rank();
        match why {
            Shed::Evicted => self.evicted[rank].fetch_add(1, Ordering::Relaxed),
            Shed::Expired => self.expired[rank].fetch_add(1, Ordering::Relaxed),
        };
        self.late(queue);
        slot.refuse(why);
    }

    /// Takes a caller that stops waiting out of the queue (if it is still there).
    pub(crate) fn leave(&self, queue: &mut Lanes, slot: &Arc<WaitSlot>) {
        queue.remove(slot);
        self.changed(queue);
    }
}
