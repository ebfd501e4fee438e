//! What the health probes answer (`/healthz`, `/readyz` on the admin listener): whether the
//! process's loops turn, and whether it is ready for traffic.
//!
//! Each proxy worker's runtime beats every [`BEAT_EVERY`]; a worker whose last beat is older
//! than [`STALLED_AFTER`] is stalled (a blocking call, a loop that never yields), and the
//! process is not live. The admin API's own runtime answering the probe is the proof that it
//! turns.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How often a worker beats.
pub const BEAT_EVERY: Duration = Duration::from_secs(1);

/// A worker whose last beat is older than this is stalled.
pub const STALLED_AFTER: Duration = Duration::from_secs(5);

/// The process's health, shared by the workers (which beat) and the admin API (which reads).
#[derive(Debug)]
pub struct Health {
    /// Where beats are counted from.
    origin: Instant,
    /// Each worker's last beat, in milliseconds after `origin`, plus one (0: not started,
    /// [`ENDED`]: ended, or could not start).
    beats: Mutex<Vec<std::sync::Arc<AtomicU64>>>,
    /// Set at SIGTERM (or SIGINT): the proxy drains and takes no new connection.
    draining: AtomicBool,
}

/// What `/healthz` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Every worker's loop turned within [`STALLED_AFTER`] (or the process drains).
    Live,
    /// These workers (by number) have not beaten for longer.
    Stalled(Vec<usize>),
}

/// What `/readyz` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// The configuration is loaded, every worker serves, and every cluster rule's Redis state
    /// is known.
    Ready,
    /// Workers still starting.
    Starting {
        /// Workers that serve.
        serving: usize,
        /// Workers in all.
        workers: usize,
    },
    /// Cluster rules with no answer from Redis yet (nor a failure that hands them to their
    /// fallback).
    WaitingForRedis {
        /// How many.
        rules: usize,
    },
    /// Stopping after SIGTERM: the listener is closed, requests in flight finish.
    Draining,
    /// These workers (by number) stalled or ended: their connections are not served.
    Stalled(Vec<usize>),
}

impl Default for Health {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            beats: Mutex::default(),
            draining: AtomicBool::new(false),
        }
    }
}

/// A worker's slot once it ended (or could not start).
const ENDED: u64 = u64::MAX;

/// A worker's place among the beats.
#[derive(Debug, Clone)]
pub struct Beat(std::sync::Arc<AtomicU64>);

impl Health {
    /// `workers` proxy workers are starting: each will beat through the [`Beat`] of its number.
    pub fn expect_workers(&self, workers: usize) -> Vec<Beat> {
        let slots: Vec<_> = (0..workers).map(|_| std::sync::Arc::default()).collect();
        *lock(&self.beats) = slots.clone();
        slots.into_iter().map(Beat).collect()
    }

    /// Beats through `beat` now.
    pub fn beat(&self, beat: &Beat) {
        let millis = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(ENDED - 2);
        beat.0.store(millis.min(ENDED - 2) + 1, Ordering::Relaxed);
    }

    /// The worker of `beat` ended, or could not start: stalled from now on, unless the
    /// process drains.
    pub fn end(&self, beat: &Beat) {
        beat.0.store(ENDED, Ordering::Relaxed);
    }

    /// Beats through `beat` every [`BEAT_EVERY`], forever (a worker's task: it stops with the
    /// worker's runtime).
    pub async fn beat_forever(self: std::sync::Arc<Self>, beat: Beat) {
        let mut every = tokio::time::interval(BEAT_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            self.beat(&beat);
        }
    }

    /// The proxy drains from now on.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Whether the proxy drains.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Whether every worker's loop turns (while draining, workers that finished stop beating:
    /// the process is live).
    pub fn liveness(&self) -> Liveness {
        if self.draining() {
            return Liveness::Live;
        }
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        let stalled_after = u64::try_from(STALLED_AFTER.as_millis()).unwrap_or(u64::MAX);
        let stalled: Vec<usize> = lock(&self.beats)
            .iter()
            .enumerate()
            .filter(|(_, beat)| {
                let last = beat.load(Ordering::Relaxed);
                // Ended, or started and silent since.
                last == ENDED || (last > 0 && now.saturating_sub(last - 1) > stalled_after)
            })
            .map(|(index, _)| index)
            .collect();
        if stalled.is_empty() {
            Liveness::Live
        } else {
            Liveness::Stalled(stalled)
        }
    }

    /// Whether the process is ready for traffic; `waiting_for_redis` cluster rules have had
    /// no answer from Redis yet.
    pub fn readiness(&self, waiting_for_redis: usize) -> Readiness {
        if self.draining() {
            return Readiness::Draining;
        }
        if let Liveness::Stalled(workers) = self.liveness() {
            return Readiness::Stalled(workers);
        }
        let beats = lock(&self.beats);
        let serving = beats
            .iter()
            .filter(|beat| beat.load(Ordering::Relaxed) > 0)
            .count();
        // None registered yet: the proxy has not started its workers.
        if serving < beats.len() || beats.is_empty() {
            return Readiness::Starting {
                serving,
                workers: beats.len(),
            };
        }
        if waiting_for_redis > 0 {
            return Readiness::WaitingForRedis {
                rules: waiting_for_redis,
            };
        }
        Readiness::Ready
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_worker_is_stalled_past_five_seconds_without_a_beat() {
        let health = Health::default();
        let beats = health.expect_workers(2);
        assert_eq!(
            health.readiness(0),
            Readiness::Starting {
                serving: 0,
                workers: 2
            }
        );
        health.beat(&beats[0]);
        health.beat(&beats[1]);
        assert_eq!(health.readiness(0), Readiness::Ready);
        assert_eq!(health.readiness(3), Readiness::WaitingForRedis { rules: 3 });
        tokio::time::advance(STALLED_AFTER).await;
        health.beat(&beats[1]);
        assert_eq!(health.liveness(), Liveness::Live);
        tokio::time::advance(Duration::from_millis(2)).await;
        assert_eq!(health.liveness(), Liveness::Stalled(vec![0]));
        // A stalled worker: not ready either.
        assert_eq!(health.readiness(0), Readiness::Stalled(vec![0]));
        // Draining: live and not ready, whatever the beats.
        health.set_draining();
        assert_eq!(health.liveness(), Liveness::Live);
        assert_eq!(health.readiness(0), Readiness::Draining);
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_that_ended_or_never_registered() {
        let health = Health::default();
        // No worker registered yet: starting.
        assert_eq!(
            health.readiness(0),
            Readiness::Starting {
                serving: 0,
                workers: 0
            }
        );
        let beats = health.expect_workers(2);
        health.beat(&beats[0]);
        // One could not start: stalled at once, and not ready.
        health.end(&beats[1]);
        assert_eq!(health.liveness(), Liveness::Stalled(vec![1]));
        assert_eq!(health.readiness(0), Readiness::Stalled(vec![1]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_beating_worker_stays_live() {
        let health = std::sync::Arc::new(Health::default());
        let beat = health.expect_workers(1).remove(0);
        tokio::spawn(health.clone().beat_forever(beat));
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(health.liveness(), Liveness::Live);
        }
        assert_eq!(health.readiness(0), Readiness::Ready);
    }
}
