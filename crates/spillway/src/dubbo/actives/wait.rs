//! A caller's place in an actives queue, and the slot it ends with.

use super::slots::Waiter;
use super::{ActiveKey, KeyState};
use crate::block::BlockError;
use crate::clock::Clock;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// A slot of an [`ActiveLimiter`](super::ActiveLimiter) key; dropping it gives the slot back, to
/// the oldest waiter if anyone waits.
#[must_use = "the slot is given back when the permit is dropped"]
pub struct ActivePermit {
    state: Arc<KeyState>,
}

impl ActivePermit {
    pub(super) fn new(state: Arc<KeyState>) -> Self {
        Self { state }
    }
}

impl Drop for ActivePermit {
    fn drop(&mut self) {
        self.state.slots.release();
    }
}

impl fmt::Debug for ActivePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActivePermit")
            .field("key", &self.state.name)
            .finish()
    }
}

/// A caller waiting in an actives queue (see [`ActiveKey::acquire_or_queue`]).
///
/// - As a [`Future`], it resolves to the [`ActivePermit`] when a slot is handed to it, on any
///   executor. It does not time itself out: race it against a timer of
///   [`remaining`](Self::remaining) and call [`give_up`](Self::give_up) if the timer wins
///   (`spillway_tower::acquire_active` does this on tokio).
/// - [`wait`](Self::wait) blocks the thread until the slot comes or the deadline passes.
/// - Dropped, it leaves the queue; a slot handed to it in the meantime goes on to the next
///   waiter, so a wake-up is never lost.
///
/// # Examples
///
/// Awaited with a hand-rolled executor (no runtime needed):
///
/// ```
/// use spillway::dubbo::{ActiveAdmission, ActiveLimiter};
/// use std::future::Future;
/// use std::pin::pin;
/// use std::sync::Arc;
/// use std::task::{Context, Poll, Wake, Waker};
/// use std::time::Duration;
///
/// struct Nothing;
/// impl Wake for Nothing {
///     fn wake(self: Arc<Self>) {}
/// }
///
/// let actives = ActiveLimiter::new();
/// let key = actives.key("report")?;
/// let held = key.try_acquire(1)?;
/// let ActiveAdmission::Queued(wait) = key.acquire_or_queue(1, Duration::from_secs(5))? else {
///     unreachable!()
/// };
/// let mut wait = pin!(wait);
/// let waker = Waker::from(Arc::new(Nothing));
/// let mut cx = Context::from_waker(&waker);
/// assert!(wait.as_mut().poll(&mut cx).is_pending());
/// drop(held);
/// assert!(matches!(wait.as_mut().poll(&mut cx), Poll::Ready(_)));
/// # Ok::<(), spillway::BlockError>(())
/// ```
#[must_use = "the caller waits in the queue until this is awaited, waited on, or dropped"]
pub struct ActiveWait {
    key: ActiveKey,
    /// `None` once the wait has ended (with a permit or an error).
    waiter: Option<Arc<Waiter>>,
    max: u32,
    started: u64,
    deadline: u64,
}

impl ActiveWait {
    pub(super) fn new(
        key: ActiveKey,
        waiter: Arc<Waiter>,
        max: u32,
        started: u64,
        timeout: Duration,
    ) -> Self {
        let timeout = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        Self {
            key,
            waiter: Some(waiter),
            max,
            started,
            deadline: started.saturating_add(timeout),
        }
    }

    /// Time left until the deadline, on the limiter's clock (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        Duration::from_nanos(self.deadline.saturating_sub(self.key.clock.now_nanos()))
    }

    /// Time waited so far, on the limiter's clock.
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.key.clock.now_nanos().saturating_sub(self.started))
    }

    /// Stops waiting (the deadline passed): leaves the queue and returns the refusal, unless a
    /// slot was handed over in the meantime, which is then returned rather than lost.
    ///
    /// # Errors
    ///
    /// A [`BlockKind::Actives`](crate::BlockKind::Actives) error with the time waited
    /// ([`BlockError::waited`]), the calls in flight and the `max`.
    pub fn give_up(mut self) -> Result<ActivePermit, BlockError> {
        let Some(waiter) = self.waiter.take() else {
            return Err(self.timed_out());
        };
        if self.key.state.slots.cancel(&waiter) {
            return Ok(self.key.permit());
        }
        Err(self.timed_out())
    }

    /// Blocks the thread until a slot is handed over or the deadline passes, parking through the
    /// limiter's clock ([`Clock::park_timeout`]).
    ///
    /// # Errors
    ///
    /// As [`give_up`](Self::give_up), when the deadline passes first.
    pub fn wait(mut self) -> Result<ActivePermit, BlockError> {
        let waker = Waker::from(Arc::new(Unparker(std::thread::current())));
        loop {
            if self.register(&waker) {
                return Ok(self.finish());
            }
            let now = self.key.clock.now_nanos();
            if now >= self.deadline {
                return self.give_up();
            }
            self.key
                .clock
                .park_timeout(Duration::from_nanos(self.deadline - now));
        }
    }

    /// Whether a slot has been handed over; otherwise leaves `waker` for the grant.
    fn register(&self, waker: &Waker) -> bool {
        self.waiter
            .as_ref()
            .is_some_and(|waiter| waiter.register(waker))
    }

    /// The wait ended with a grant: the slot is the caller's.
    fn finish(&mut self) -> ActivePermit {
        self.waiter = None;
        self.key.permit()
    }

    fn timed_out(&self) -> BlockError {
        self.key
            .refusal(self.key.state.slots.in_flight(), self.max)
            .with_waited(self.waited())
    }
}

impl Future for ActiveWait {
    type Output = ActivePermit;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ActivePermit> {
        let this = self.get_mut();
        assert!(this.waiter.is_some(), "ActiveWait polled after it ended");
        if this.register(cx.waker()) {
            Poll::Ready(this.finish())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for ActiveWait {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            if self.key.state.slots.cancel(&waiter) {
                // Granted before we left: pass the slot on rather than lose it.
                self.key.state.slots.release();
            }
        }
    }
}

impl fmt::Debug for ActiveWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActiveWait")
            .field("key", &self.key.name())
            .field("max", &self.max)
            .field("waiting", &self.waiter.is_some())
            .finish_non_exhaustive()
    }
}

/// Wakes a thread blocked in [`ActiveWait::wait`].
struct Unparker(std::thread::Thread);

impl Wake for Unparker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}
