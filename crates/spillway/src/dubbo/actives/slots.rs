//! One key's actives state: calls in flight and waiters counted in one atomic word, and the FIFO
//! queue of waiters behind a mutex.
//!
//! The word makes the uncontended path lock-free: a take succeeds by compare-and-swap when a slot
//! is free and nobody waits, and a release is a compare-and-swap when nobody waits. Everything
//! that involves a waiter happens under the queue's mutex: joining the queue, handing a released
//! slot to the oldest waiter, and leaving the queue. The waiter count in the word changes only
//! under that mutex, so under it the count equals the queue's length; and while anyone waits the
//! lock-free paths stand aside (a take never passes a waiter, a release goes through the queue).

use crate::sync::{AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;

/// The low half of the word: calls in flight.
const IN_FLIGHT: u64 = 0xFFFF_FFFF;
/// One waiter, in the high half of the word.
const WAITER: u64 = 1 << 32;
/// One more in flight and one waiter fewer, as a single wrapping add: a grant.
const GRANT: u64 = 1u64.wrapping_sub(WAITER);

fn in_flight(word: u64) -> u32 {
    (word & IN_FLIGHT) as u32
}

fn waiters(word: u64) -> u32 {
    (word >> 32) as u32
}

/// The slots of one key.
#[derive(Debug)]
pub(super) struct Slots {
    word: AtomicU64,
    queue: Mutex<VecDeque<Arc<Waiter>>>,
}

/// A caller waiting in the queue for a slot under its own `max`.
#[derive(Debug)]
pub(super) struct Waiter {
    max: u32,
    /// Set, under the queue's mutex, when a slot is handed to this waiter.
    granted: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

/// What [`Slots::take_or_queue`] did.
#[derive(Debug)]
pub(super) enum Take {
    /// A slot was free: the caller holds it.
    Taken,
    /// The caller waits in the queue.
    Queued(Arc<Waiter>),
    /// The queue holds `max_waiters` already (the count seen).
    QueueFull(u32),
}

impl Slots {
    pub(super) fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
            queue: Mutex::new(VecDeque::new()),
        }
    }

    /// Calls holding a slot.
    pub(super) fn in_flight(&self) -> u32 {
        in_flight(self.word.load(Ordering::Acquire))
    }

    /// Callers waiting for one.
    pub(super) fn waiters(&self) -> u32 {
        waiters(self.word.load(Ordering::Acquire))
    }

    /// Takes a slot if fewer than `max` are held and nobody waits (a newcomer never passes a
    /// waiter). `max` 0 is unlimited: the call is counted and never refused. On refusal, returns
    /// the calls in flight.
    #[inline]
    pub(super) fn try_take(&self, max: u32) -> Result<(), u32> {
        if max == 0 {
            self.word.fetch_add(1, Ordering::AcqRel);
            return Ok(());
        }
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if waiters(word) > 0 || in_flight(word) >= max {
                return Err(in_flight(word));
            }
            match self
                .word
                .compare_exchange(word, word + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(seen) => word = seen,
            }
        }
    }

    /// Takes a slot as [`try_take`](Self::try_take) does, or else joins the back of the queue,
    /// unless `max_waiters` wait already.
    pub(super) fn take_or_queue(&self, max: u32, max_waiters: u32) -> Take {
        if self.try_take(max).is_ok() {
            return Take::Taken;
        }
        let mut queue = self.lock();
        let mut word = self.word.load(Ordering::Acquire);
        let taken = loop {
            // Re-checked under the mutex: a release may have freed a slot since the try.
            let (next, taken) = if waiters(word) == 0 && in_flight(word) < max {
                (word + 1, true)
            } else if waiters(word) >= max_waiters {
                return Take::QueueFull(waiters(word));
            } else {
                (word + WAITER, false)
            };
            match self
                .word
                .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break taken,
                Err(seen) => word = seen,
            }
        };
        if taken {
            return Take::Taken;
        }
        let waiter = Arc::new(Waiter {
            max,
            granted: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        queue.push_back(waiter.clone());
        Take::Queued(waiter)
    }

    /// Gives a slot back: to the oldest waiter if one waits and fits, else to the pool.
    pub(super) fn release(&self) {
        let mut word = self.word.load(Ordering::Acquire);
        while waiters(word) == 0 {
            match self
                .word
                .compare_exchange(word, word - 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(seen) => word = seen,
            }
        }
        let wakers = {
            let mut queue = self.lock();
            self.word.fetch_sub(1, Ordering::AcqRel);
            self.grant_fitting(&mut queue)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Takes `waiter` out of the queue (it timed out or was dropped). Returns `true` if a slot
    /// had been handed to it already: the caller then holds that slot and must use or release
    /// it, so that a grant is never lost.
    pub(super) fn cancel(&self, waiter: &Arc<Waiter>) -> bool {
        let wakers = {
            let mut queue = self.lock();
            // `granted` is set under this mutex, so this read is decisive.
            if waiter.granted.load(Ordering::Acquire) {
                return true;
            }
            let Some(at) = queue.iter().position(|queued| Arc::ptr_eq(queued, waiter)) else {
                return false;
            };
            queue.remove(at);
            self.word.fetch_sub(WAITER, Ordering::AcqRel);
            // The leaver may have held back younger waiters with a larger max.
            self.grant_fitting(&mut queue)
        };
        wakers.into_iter().for_each(Waker::wake);
        false
    }

    /// Hands free slots to the oldest waiters, in order, while the oldest fits under its max.
    /// Returns the wakers to call once the mutex is released.
    fn grant_fitting(&self, queue: &mut VecDeque<Arc<Waiter>>) -> Vec<Waker> {
        let mut wakers = Vec::new();
        while let Some(head) = queue.front() {
            let mut word = self.word.load(Ordering::Acquire);
            loop {
                if in_flight(word) >= head.max {
                    return wakers;
                }
                match self.word.compare_exchange(
                    word,
                    word.wrapping_add(GRANT),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(seen) => word = seen,
                }
            }
            let Some(head) = queue.pop_front() else {
                break;
            };
            head.granted.store(true, Ordering::Release);
            let waker = lock(&head.waker).take();
            wakers.extend(waker);
        }
        wakers
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<Waiter>>> {
        lock(&self.queue)
    }
}

impl Waiter {
    /// Whether a slot has been handed to this waiter.
    pub(super) fn is_granted(&self) -> bool {
        self.granted.load(Ordering::Acquire)
    }

    /// Leaves `waker` to be woken by the grant; returns whether the grant came already.
    ///
    /// The granter sets `granted` and then takes the waker under its mutex; this stores the
    /// waker under that mutex and then reads `granted`. Whichever takes the mutex second sees the
    /// other's write, so a grant either finds the waker or is seen here.
    pub(super) fn register(&self, waker: &Waker) -> bool {
        if self.is_granted() {
            return true;
        }
        {
            let mut slot = lock(&self.waker);
            match &*slot {
                Some(current) if current.will_wake(waker) => {}
                _ => *slot = Some(waker.clone()),
            }
        }
        self.is_granted()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
