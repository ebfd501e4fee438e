//! The *leased* check of a shared window: each process takes batches of passes from Redis ahead
//! of need and admits from them locally, so that a request never waits on the network.

use crate::window::{Mode, SharedWindow};
use crate::Error;
use redis::aio::ConnectionLike;
use spillway::Clock;
use std::sync::{Arc, Mutex};

/// A process's share of a [`SharedWindow`], taken from Redis in batches.
///
/// - [`LeasedWindow::try_acquire`] admits from the passes this process holds: no I/O, no wait.
/// - [`LeasedWindow::refill`] takes the next batch (one script call), when
///   [`LeasedWindow::wants_refill`] says so: the passes left are below the next batch, or the
///   lease has expired. [`LeasedWindow::drive`] does it in a task of its own.
/// - A batch follows this process's demand since the last refill, from 1 up to `max_batch`.
/// - Passes are counted in the window when they are leased, and a lease lives one bucket
///   width (by this process's clock): the passes left when it expires are given back to the
///   bucket they were counted in, if it is still in the window.
///
/// **Bound.** With one refiller per process ([`LeasedWindow::drive`]), a process holds fewer than
/// `2 x max_batch` passes at any time (it refills below one batch, and a batch is at most
/// `max_batch`). Every pass it admits was counted in the window when leased, so in any two
/// consecutive buckets (the span the strict check bounds) the fleet admits at most the limit
/// plus what its processes held when the first began: the limit plus `2 x max_batch` a process.
/// Passes leased and not used in time are lost to the others until given back, so the fleet
/// may admit less than the limit, never more than the bound.
#[derive(Debug)]
pub struct LeasedWindow {
    window: SharedWindow,
    clock: Arc<dyn Clock>,
    max_batch: u64,
    lease: Mutex<Lease>,
    /// Wakes [`LeasedWindow::drive`] when a refill is wanted.
    wanted: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Lease {
    /// Passes this process may still admit.
    left: u64,
    /// The bucket (on the window's clock) they were counted in.
    bucket_start: u64,
    /// When they expire, on this process's clock (ms).
    expires_ms: u64,
    /// Passes asked for (admitted or refused) since the last refill: the next batch.
    asked: u64,
    /// No refill before this (ms, this process's clock): the window was full until its next
    /// bucket.
    full_until_ms: u64,
}

impl LeasedWindow {
    /// A lease of `window`'s passes, in batches of at most `max_batch`, expiring by `clock`
    /// (for a window on [`crate::Time::Clock`], the same clock).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if `max_batch` is 0.
    pub fn new(window: SharedWindow, clock: Arc<dyn Clock>, max_batch: u64) -> Result<Self, Error> {
        if max_batch == 0 {
            return Err(Error::Invalid("max_batch must be at least 1".to_owned()));
        }
        Ok(Self {
            window,
            clock,
            max_batch,
            lease: Mutex::new(Lease::default()),
            wanted: tokio::sync::Notify::new(),
        })
    }

    /// Admits `count` passes from this process's lease, or refuses: never waits, never calls
    /// Redis. A refusal while the lease is being refilled is a refusal.
    pub fn try_acquire(&self, count: u32) -> bool {
        let count = u64::from(count);
        let now = self.clock.now_millis();
        let mut lease = lock(&self.lease);
        lease.asked = lease.asked.saturating_add(count);
        let admitted = now < lease.expires_ms && lease.left >= count;
        if admitted {
            lease.left -= count;
        }
        let wanted = Self::wants(&lease, now, self.max_batch);
        drop(lease);
        if wanted {
            self.wanted.notify_one();
        }
        admitted
    }

    /// Whether a refill is due: the lease has expired or holds less than the next batch, and
    /// the window was not found full in its current bucket.
    pub fn wants_refill(&self) -> bool {
        Self::wants(&lock(&self.lease), self.clock.now_millis(), self.max_batch)
    }

    fn wants(lease: &Lease, now: u64, max_batch: u64) -> bool {
        let expired = now >= lease.expires_ms;
        let low = lease.left < lease.asked.clamp(1, max_batch);
        now >= lease.full_until_ms && (expired || low)
    }

    /// Takes the next batch from Redis (and gives back an expired lease's passes first).
    /// Returns the passes granted.
    ///
    /// # Errors
    ///
    /// Redis failed: the lease is as it was, less what expired.
    pub async fn refill<C: ConnectionLike>(&self, redis: &mut C) -> Result<u64, Error> {
        let (unused, counted_in, batch) = {
            let now = self.clock.now_millis();
            let mut lease = lock(&self.lease);
            let unused = if now >= lease.expires_ms {
                std::mem::take(&mut lease.left)
            } else {
                0
            };
            let batch = lease.asked.clamp(1, self.max_batch);
            lease.asked = 0;
            (unused, lease.bucket_start, batch)
        };
        if unused > 0 {
            self.window
                .call(redis, Mode::Return, unused, counted_in)
                .await?;
        }
        let answer = self.window.call(redis, Mode::UpTo, batch, 0).await?;
        let now = self.clock.now_millis();
        let bucket_ms = self.window.bucket_ms();
        let mut lease = lock(&self.lease);
        if answer.count > 0 {
            lease.left += answer.count;
            lease.bucket_start = answer.bucket_start;
            lease.expires_ms = now + bucket_ms;
        }
        if answer.count < batch {
            // Full: nothing more until the window's next bucket begins.
            let next_bucket = answer.bucket_start + bucket_ms;
            lease.full_until_ms = now + next_bucket.saturating_sub(answer.now_ms);
        }
        Ok(answer.count)
    }

    /// Passes this process holds now.
    pub fn held(&self) -> u64 {
        let lease = lock(&self.lease);
        if self.clock.now_millis() < lease.expires_ms {
            lease.left
        } else {
            0
        }
    }

    /// Refills whenever [`LeasedWindow::try_acquire`] finds one due, and at the latest when
    /// the lease expires, until the future is dropped (run it in a task of its own). Each
    /// refill's outcome goes to `on_refill` (the passes granted, or the error); a failed one is
    /// tried again a bucket's width later.
    pub async fn drive<C: ConnectionLike>(
        &self,
        mut redis: C,
        mut on_refill: impl FnMut(Result<u64, &Error>),
    ) {
        loop {
            let mut failed = false;
            if self.wants_refill() {
                match self.refill(&mut redis).await {
                    Ok(granted) => on_refill(Ok(granted)),
                    Err(err) => {
                        on_refill(Err(&err));
                        failed = true;
                    }
                }
            }
            let wait = if failed {
                // Not again at once: a bucket's width, however many requests ask.
                self.window.bucket_ms()
            } else {
                let lease = lock(&self.lease);
                let now = self.clock.now_millis();
                lease
                    .expires_ms
                    .max(lease.full_until_ms)
                    .saturating_sub(now)
                    .max(1)
            };
            let _ = tokio::time::timeout(
                std::time::Duration::from_millis(wait),
                self.wanted.notified(),
            )
            .await;
        }
    }
}

/// The lock, even if a thread panicked while holding it: the lease is valid at every step.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
