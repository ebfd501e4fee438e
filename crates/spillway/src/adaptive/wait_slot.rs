//! One caller waiting in an adaptive limit's queue: what it claims, where it waits, and how
//! its wait was decided (a place, or a refusal by the queue), with the future that resolves
//! when it is.

use super::claim::Claim;
use crate::sync::{AtomicU8, Mutex, MutexGuard, Ordering};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Which end of the queue a freed place is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Front,
    Back,
}

/// A waiting caller's state: waiting, granted a place, or refused by the queue.
const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const EVICTED: u8 = 2;
const EXPIRED: u8 = 3;

/// Why the queue refused a waiting caller (rather than hand it a place, or let it time out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shed {
    /// A more critical caller (or one of a tenant with fewer waiters) took its place in the
    /// full queue.
    Evicted,
    /// Its deadline passed, or it could not be done by it at the current latency.
    Expired,
}

/// One waiting caller: what it claims, where it waits, whether it was granted a place or
/// refused, and whom to wake.
#[derive(Debug)]
pub(crate) struct WaitSlot {
    state: AtomicU8,
    waker: Mutex<Option<Waker>>,
    pub(crate) claim: Claim,
    /// Its bucket in its criticality's lane.
    pub(crate) bucket: u16,
    /// When it joined the queue (clock nanoseconds).
    pub(crate) joined: u64,
}

impl WaitSlot {
    pub(crate) fn new(claim: Claim, bucket: u16, joined: u64) -> Self {
        Self {
            state: AtomicU8::new(WAITING),
            waker: Mutex::new(None),
            claim,
            bucket,
            joined,
        }
    }

    /// Whether a place was handed to it.
    pub(crate) fn is_granted(&self) -> bool {
        self.state.load(Ordering::Acquire) == GRANTED
    }

    /// Why the queue refused it, if it did.
    pub(crate) fn shed(&self) -> Option<Shed> {
        match self.state.load(Ordering::Acquire) {
            EVICTED => Some(Shed::Evicted),
            EXPIRED => Some(Shed::Expired),
            _ => None,
        }
    }

    /// Whether the wait is over: granted or refused.
    fn decided(&self) -> bool {
        self.state.load(Ordering::Acquire) != WAITING
    }

    fn waker(&self) -> MutexGuard<'_, Option<Waker>> {
        self.waker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hands it a place and wakes it.
    pub(super) fn grant(&self) {
        self.decide(GRANTED);
    }

    /// Refuses it for `why` and wakes it.
    pub(super) fn refuse(&self, why: Shed) {
        self.decide(match why {
            Shed::Evicted => EVICTED,
            Shed::Expired => EXPIRED,
        });
    }

    /// Decides its wait (a place, or a refusal) and wakes it.
    fn decide(&self, state: u8) {
        self.state.store(state, Ordering::Release);
        if let Some(waker) = self.waker().take() {
            waker.wake();
        }
    }
}

/// Resolves once the slot's wait is decided: a place, or a refusal by the queue.
#[derive(Debug)]
pub(crate) struct Granted<'a> {
    pub(crate) slot: &'a WaitSlot,
}

impl Future for Granted<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.slot.decided() {
            return Poll::Ready(());
        }
        let mut waker = self.slot.waker();
        match waker.as_mut() {
            Some(stored) if stored.will_wake(cx.waker()) => {}
            _ => *waker = Some(cx.waker().clone()),
        }
        drop(waker);
        // A decision between the first test and the waker's store found no waker to wake.
        if self.slot.decided() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}
