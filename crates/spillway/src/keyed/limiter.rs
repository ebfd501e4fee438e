//! One per-key rule's state: exact state for the busiest keys, in a fixed table, and fixed-size
//! sketches for the rest.
//!
//! - **Exact state.** A table of `capacity` places (rounded up to a multiple of [`WAYS`]), in
//!   sets of [`WAYS`] chosen by the key's hash, each set behind its own lock. A key with a place
//!   is checked exactly as Sentinel's `ParamFlowChecker` checks a value: a token bucket refilled
//!   once its `duration` has passed (reject), or a pacing schedule (throttle).
//! - **Which keys have it.** A key without a place takes a free one in its set; in a full set,
//!   it takes the place of the set's least busy key (by the `seen` sketch, over this window and
//!   the last) if it is busier, unless that key was refused in this window or the last: a key
//!   being limited keeps its place, whatever floods of other keys arrive.
//! - **The rest.** A key without a place is limited by the `passed` sketch, which counts passes
//!   per window of `duration` (aligned to the clock): it passes while its passes over the last
//!   `duration` plus this call are at most its `count`, its passes over the last `duration`
//!   being all of this window's and the part of the previous window's still within a duration
//!   of now (as if spread evenly over it, rounded up). A sketch never counts a key below its
//!   truth, so this only refuses early. A key that takes a place starts from the same sketch:
//!   a key the sketches never saw starts full, as in Sentinel; one they saw starts with `count`
//!   less its passes over the last `duration`, refilled from the window's start, never as
//!   fresh. A key that loses its place has its passes written back into their windows.
//! - **Concurrency rules** count calls in flight per key in a sketch (more than the truth only
//!   when each of a key's cells also counts another key in flight), and need no table.
//!
//! Memory per rule is fixed by `capacity` (see [`KeyedLimiter::heap_bytes`]).

use super::sketch::{Cells, FlightSketch, WindowSketch};
use super::slot::Slot;
use super::{fingerprint, KeyedBehavior, KeyedRule};
use crate::flow::{Decision, Grade};
use crate::stats::StripedCounter;
use crate::sync::{AtomicU64, Mutex, Ordering};
use std::collections::HashMap;
use std::time::Duration;

/// Places per set of the exact-state table.
pub const WAYS: usize = 4;

/// Columns of each sketch row: 8,192 (4 rows of 8-byte cells, 256 KiB a sketch), whatever the
/// capacity. Keys without a place share these cells: a flood of distinct keys raises every
/// key's count in them, which refuses keys without a place early (see docs/keyed.md for how
/// many keys a second that takes); a larger capacity gives more keys a place instead.
pub const SKETCH_WIDTH: usize = 8_192;

/// How a check was decided, for the rule's counters and the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// By the key's exact state.
    Exact,
    /// By the sketch (no place for the key).
    Sketch,
}

/// What a per-key rule counted (see [`KeyedLimiter::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyedStats {
    /// Checks made (each entry with a key, once).
    pub checks: u64,
    /// Checks refused.
    pub refused: u64,
    /// Checks decided by the sketch, for keys without a place.
    pub sketched: u64,
    /// Keys that lost their place to a busier key.
    pub evictions: u64,
    /// Keys with a place (exact state) now.
    pub exact_keys: u64,
    /// Bytes of the sketches (the rest of [`KeyedLimiter::heap_bytes`] is the keys' table).
    pub sketch_bytes: usize,
}

/// The state of one per-key rule.
#[derive(Debug)]
pub struct KeyedLimiter {
    behavior: KeyedBehavior,
    /// `(long) count`.
    count: u64,
    burst: u64,
    duration_ms: u64,
    /// Exceptions by key fingerprint.
    exceptions: HashMap<u64, u64>,
    sets: Box<[Mutex<[Slot; WAYS]>]>,
    seen: WindowSketch,
    passed: WindowSketch,
    flight: Option<FlightSketch>,
    /// Checks decided by the sketch (relaxed: a statistic).
    sketched: AtomicU64,
    /// Keys that lost their place (relaxed: a statistic).
    evictions: AtomicU64,
    /// Checks, and checks refused (striped: every check counts, from any thread).
    checks: StripedCounter,
    refused: StripedCounter,
}

fn lock<T>(mutex: &Mutex<T>) -> crate::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl KeyedLimiter {
    /// The state of `rule` (taken as validated: see
    /// [`validate_keyed_rules`](super::validate_keyed_rules)).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::Decision;
    /// use spillway::keyed::{fingerprint, KeyedLimiter, KeyedRule};
    ///
    /// let limiter = KeyedLimiter::new(&KeyedRule::qps("per-user", "api", 2.0));
    /// let (alice, bob) = (fingerprint("alice"), fingerprint("bob"));
    /// assert_eq!(limiter.check(alice, 1, 0), Decision::Pass);
    /// assert_eq!(limiter.check(alice, 1, 0), Decision::Pass);
    /// assert_eq!(limiter.check(alice, 1, 0), Decision::Block);
    /// assert_eq!(limiter.check(bob, 1, 0), Decision::Pass); // each key its own limit
    /// ```
    pub fn new(rule: &KeyedRule) -> Self {
        let width = SKETCH_WIDTH;
        let concurrency = rule.grade == Grade::Concurrency;
        let sets = if concurrency {
            0
        } else {
            rule.capacity.div_ceil(WAYS)
        };
        Self {
            behavior: rule.behavior,
            count: rule.count as u64,
            burst: rule.burst,
            duration_ms: (rule.duration.as_secs() * 1_000).max(1),
            exceptions: rule
                .exceptions
                .iter()
                .map(|e| (fingerprint(e.key.as_str()), e.count))
                .collect(),
            sets: (0..sets)
                .map(|_| Mutex::new([Slot::default(); WAYS]))
                .collect(),
            seen: WindowSketch::new(if concurrency { 1 } else { width }),
            passed: WindowSketch::new(if concurrency { 1 } else { width }),
            flight: concurrency.then(|| FlightSketch::new(width)),
            sketched: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            checks: StripedCounter::new(),
            refused: StripedCounter::new(),
        }
    }

    /// The limit of the key `key` (a [`fingerprint`]).
    fn limit_of(&self, key: u64) -> u64 {
        self.exceptions.get(&key).copied().unwrap_or(self.count)
    }

    /// Decides `acquire` permits for the key `key` (its [`fingerprint`]) at `now_nanos`.
    /// A `Wait` (throttle) has reserved its place in the key's schedule. For a concurrency
    /// rule, a pass counts one call in flight until [`exit`](Self::exit).
    pub fn check(&self, key: u64, acquire: u32, now_nanos: u64) -> Decision {
        let decision = self.decide(key, acquire, now_nanos).0;
        self.checks.increment();
        if !decision.admits() {
            self.refused.increment();
        }
        decision
    }

    /// Gives back what a pass of `acquire` permits for `key` took, when a later check refused
    /// the entry: a concurrency rule's call in flight; a reject rule's tokens, to the key's
    /// bucket if the key still has its place (up to a full bucket). A pacing rule's place in
    /// the key's schedule stays taken (the key waits longer next time, never less).
    pub fn give_back(&self, key: u64, acquire: u32) {
        if self.flight.is_some() {
            self.exit(key);
            return;
        }
        if self.behavior != KeyedBehavior::Reject || self.sets.is_empty() {
            return;
        }
        let key = key.max(1);
        let max = as_i64(self.limit_of(key).saturating_add(self.burst));
        let mut ways = lock(&self.sets[set_of(key, self.sets.len())]);
        if let Some(slot) = ways
            .iter_mut()
            .find(|slot| slot.key == key && slot.tokens != NEW)
        {
            slot.tokens = slot.tokens.saturating_add(i64::from(acquire)).min(max);
        }
    }

    /// A call of `key` admitted by a concurrency rule ended.
    pub fn exit(&self, key: u64) {
        self.exit_digest(super::digest(key));
    }

    /// [`exit`](Self::exit) of the key of `digest`.
    pub(crate) fn exit_digest(&self, digest: u32) {
        if let Some(flight) = &self.flight {
            flight.exit(flight_cells(flight, digest));
        }
    }

    /// What `key` (a [`fingerprint`]) may still pass at `now_nanos` without a refusal, read
    /// without counting anything, and its limit (its exception's, if it has one): `(limit,
    /// remaining)`.
    ///
    /// - A concurrency rule: the limit less the key's calls in flight.
    /// - A reject rule: a key with exact state, its bucket's tokens with the refill its next
    ///   check would add (up to `limit + burst`, so more than `limit` with a burst); a key
    ///   without a place (one the rule has not seen among them), the limit less its passes
    ///   over the last `duration` by the sketch (as a check without a place counts them).
    /// - A pacing rule: `None` (it queues calls rather than refuse them: it has no quota left
    ///   to count).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::keyed::{fingerprint, KeyedLimiter, KeyedRule};
    ///
    /// let limiter = KeyedLimiter::new(&KeyedRule::qps("per-user", "api", 3.0));
    /// let alice = fingerprint("alice");
    /// assert_eq!(limiter.remaining(alice, 0), Some((3, 3)));
    /// limiter.check(alice, 1, 0);
    /// assert_eq!(limiter.remaining(alice, 0), Some((3, 2)));
    /// // Once more than a second has passed, the bucket is full again.
    /// assert_eq!(limiter.remaining(alice, 1_001_000_000), Some((3, 3)));
    /// ```
    pub fn remaining(&self, key: u64, now_nanos: u64) -> Option<(u64, u64)> {
        let key = key.max(1);
        let limit = self.limit_of(key);
        if let Some(flight) = &self.flight {
            let in_flight = flight.in_flight(flight_cells(flight, super::digest(key)));
            let in_flight = u64::try_from(in_flight).unwrap_or(0);
            return Some((limit, limit.saturating_sub(in_flight)));
        }
        if self.behavior != KeyedBehavior::Reject || self.sets.is_empty() {
            return None;
        }
        if limit == 0 {
            // Always refused, whatever the burst (as `decide`).
            return Some((0, 0));
        }
        let max = limit.saturating_add(self.burst);
        let now_ms = now_nanos / 1_000_000;
        let ways = lock(&self.sets[set_of(key, self.sets.len())]);
        if let Some(slot) = ways.iter().find(|slot| slot.key == key) {
            if slot.tokens == NEW {
                return Some((limit, max));
            }
            let tokens = u64::try_from(slot.tokens).unwrap_or(0);
            let pass_time = now_ms.saturating_sub(slot.last_ms);
            // As `reject` refills: only once a whole duration has passed.
            let tokens = if pass_time > self.duration_ms {
                let to_add =
                    (u128::from(pass_time) * u128::from(limit)) / u128::from(self.duration_ms);
                u64::try_from(to_add)
                    .unwrap_or(u64::MAX)
                    .saturating_add(tokens)
                    .min(max)
            } else {
                tokens
            };
            return Some((limit, tokens));
        }
        drop(ways);
        let window = now_ms / self.duration_ms;
        let (now, before) = self.passes(Cells::of(key, self.seen.width()), window, limit);
        Some((
            limit,
            limit.saturating_sub(self.recent(now, before, now_ms)),
        ))
    }

    /// The limit of the key `key` (a [`fingerprint`]): its exception's, or the rule's count.
    pub(crate) fn key_limit(&self, key: u64) -> u64 {
        self.limit_of(key.max(1))
    }

    /// Calls of `key` in flight (concurrency rules; at least the truth).
    pub fn in_flight(&self, key: u64) -> i64 {
        self.flight.as_ref().map_or(0, |flight| {
            flight.in_flight(flight_cells(flight, super::digest(key)))
        })
    }

    /// What the rule counted, and the keys it holds exactly now (read under each set's lock,
    /// one at a time: for metrics, not for a request's path).
    pub fn stats(&self) -> KeyedStats {
        let exact_keys = self
            .sets
            .iter()
            .map(|set| lock(set).iter().filter(|slot| slot.key != 0).count() as u64)
            .sum();
        KeyedStats {
            checks: self.checks.sum(),
            refused: self.refused.sum(),
            sketched: self.sketched.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            exact_keys,
            sketch_bytes: self.sketch_bytes(),
        }
    }

    /// Bytes of the sketches.
    fn sketch_bytes(&self) -> usize {
        self.seen.heap_bytes()
            + self.passed.heap_bytes()
            + self.flight.as_ref().map_or(0, FlightSketch::heap_bytes)
    }

    /// Bytes of its table and sketches: fixed by the rule's `capacity` (and grade) whatever the
    /// number of keys.
    pub fn heap_bytes(&self) -> usize {
        self.sets.len() * std::mem::size_of::<Mutex<[Slot; WAYS]>>()
            + self.sketch_bytes()
            + self.checks.heap_bytes()
            + self.refused.heap_bytes()
            + self.exceptions.capacity() * (2 * std::mem::size_of::<u64>() + 8)
    }

    pub(crate) fn decide(&self, key: u64, acquire: u32, now_nanos: u64) -> (Decision, Path) {
        let key = key.max(1);
        let limit = self.limit_of(key);
        if let Some(flight) = &self.flight {
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let cells = flight_cells(flight, super::digest(key));
            let decision = if flight.try_enter(cells, limit) {
                Decision::Pass
            } else {
                Decision::Block
            };
            return (decision, Path::Exact);
        }
        if limit == 0 {
            // Sentinel: a key with no tokens is always refused.
            return (Decision::Block, Path::Exact);
        }
        let now_ms = now_nanos / 1_000_000;
        let window = now_ms / self.duration_ms;
        self.decide_qps(key, limit, acquire, now_ms, window)
    }

    /// A key with a place is decided under its set's lock alone; a key without one is counted
    /// in the sketches, may take a place, or is decided by the sketch.
    fn decide_qps(
        &self,
        key: u64,
        limit: u64,
        acquire: u32,
        now_ms: u64,
        window: u64,
    ) -> (Decision, Path) {
        let set = &self.sets[set_of(key, self.sets.len())];
        let mut ways = lock(set);
        let place = match ways.iter().position(|slot| slot.key == key) {
            Some(place) => place,
            None => {
                let cells = Cells::of(key, self.seen.width());
                self.seen.add(cells, window, 1);
                match self.take_place(&mut ways, key, cells, limit, now_ms, window) {
                    Some(place) => place,
                    None => {
                        // Still under the set's lock: the key's count is read and raised by one
                        // call at a time (see `WindowSketch::add`).
                        let decision = self.decide_by_sketch(cells, limit, acquire, now_ms, window);
                        return (decision, Path::Sketch);
                    }
                }
            }
        };
        let slot = &mut ways[place];
        slot.touch(window as u16);
        let decision = match self.behavior {
            KeyedBehavior::Reject => self.reject(slot, limit, acquire, now_ms),
            KeyedBehavior::Throttle { max_queueing_time } => {
                self.throttle(slot, limit, acquire, now_ms, max_queueing_time)
            }
        };
        if decision.admits() {
            slot.passed = slot.passed.saturating_add(acquire);
        } else {
            slot.limited = (window as u16).wrapping_add(1).max(1);
        }
        (decision, Path::Exact)
    }

    /// A key's passes over the last `duration` at `now_ms`, from its passes in the current
    /// window and the one before: all of this window's, and the previous window's in the part
    /// of it still within a duration of now (rounded up), as if spread evenly over it.
    fn recent(&self, passed_now: u64, passed_before: u64, now_ms: u64) -> u64 {
        if passed_before == 0 {
            return passed_now;
        }
        let rest = self.duration_ms - now_ms % self.duration_ms;
        // Saturating throughout: a count bounded by `passes` may be as large as a burst; a
        // saturated sum only refuses.
        let before = passed_before
            .saturating_mul(rest)
            .div_ceil(self.duration_ms);
        passed_now.saturating_add(before)
    }

    /// The passes of the key in `cells` in `window` and the one before, by the sketch. A count
    /// past what a cell holds (read as [`FULL`](super::sketch::FULL)) is taken as the most a
    /// key of `limit` can pass in a window, `2 × (limit + burst)` (a full bucket and one
    /// refill; a pacing rule passes fewer): never less than the truth, and a key whose count
    /// passed a cell's then waits as one that passed that much would, not a whole window more.
    fn passes(&self, cells: Cells, window: u64, limit: u64) -> (u64, u64) {
        let most = limit.saturating_add(self.burst).saturating_mul(2);
        let bound = |count: u64| {
            if count >= super::sketch::FULL {
                most
            } else {
                count
            }
        };
        let (now, before) = self.passed.counts(cells, window);
        (bound(now), bound(before))
    }

    /// A key without a place: at most `limit` passes over the last `duration`, by the sketch.
    fn decide_by_sketch(
        &self,
        cells: Cells,
        limit: u64,
        acquire: u32,
        now_ms: u64,
        window: u64,
    ) -> Decision {
        self.sketched.fetch_add(1, Ordering::Relaxed);
        let (now, before) = self.passes(cells, window, limit);
        if (self.recent(now, before, now_ms)).saturating_add(u64::from(acquire)) > limit {
            return Decision::Block;
        }
        self.passed.add(cells, window, u64::from(acquire));
        Decision::Pass
    }

    /// A place for `key` in `ways`, if it gets one, its state set from the sketches.
    fn take_place(
        &self,
        ways: &mut [Slot; WAYS],
        key: u64,
        cells: Cells,
        limit: u64,
        now_ms: u64,
        window: u64,
    ) -> Option<usize> {
        let short = window as u16;
        let width = self.seen.width();
        // How busy a key is, by the `seen` sketch (its calls without a place, and what the
        // keys sharing its cells add): a candidate's count, and a place holder's besides its
        // calls with a place, so that both carry the sketch's error alike.
        let sketched = |cells: Cells| {
            let (current, previous) = self.seen.counts(cells, window);
            current + previous
        };
        let place = match ways.iter().position(|slot| slot.key == 0) {
            Some(free) => free,
            None => {
                // Keys refused in this window or the last keep their places.
                let (victim, victim_busy) = ways
                    .iter()
                    .enumerate()
                    .filter(|(_, slot)| !slot.protected(short))
                    .map(|(at, slot)| {
                        let busy =
                            u64::from(slot.aged(short)) + sketched(Cells::of(slot.key, width));
                        (at, busy)
                    })
                    .min_by_key(|&(_, busy)| busy)?;
                if sketched(cells) <= victim_busy {
                    return None;
                }
                self.evictions.fetch_add(1, Ordering::Relaxed);
                // Never as fresh when it comes back: its passes with a place go to the sketch.
                let evicted = ways[victim];
                let evicted_cells = Cells::of(evicted.key, width);
                let (now, before) = evicted.passes(short);
                if now > 0 {
                    self.passed.add(evicted_cells, window, now);
                }
                if before > 0 {
                    self.passed.add_previous(evicted_cells, window, before);
                }
                victim
            }
        };
        let (seen_now, seen_before) = self.seen.counts(cells, window);
        let (passed_now, passed_before) = self.passes(cells, window, limit);
        // This call is the only one the sketches saw: a new key, which starts as Sentinel's
        // do (set by the check). Otherwise, never as fresh: `limit` less what it passed.
        let fresh = seen_now + seen_before <= 1 && passed_now + passed_before == 0;
        ways[place] = if fresh {
            Slot {
                key,
                tokens: NEW,
                // Counted by the check's `touch`.
                window: short,
                ..Slot::default()
            }
        } else {
            let window_start = window * self.duration_ms;
            let left = limit.saturating_sub(self.recent(passed_now, passed_before, now_ms));
            // The bucket refills from the window's start (as one that refilled then, with those
            // passes taken since, would). Charging both windows' passes in full, refilled from
            // now, refused a key that came back at half its limit. A schedule starts from now:
            // the key waits one interval before it passes again.
            let last_ms = match self.behavior {
                KeyedBehavior::Reject => window_start,
                KeyedBehavior::Throttle { .. } => now_ms,
            };
            Slot {
                key,
                tokens: i64::try_from(left).unwrap_or(i64::MAX),
                last_ms,
                window: short,
                ..Slot::default()
            }
        };
        Some(place)
    }

    /// Sentinel's `passDefaultLocalCheck` on the key's bucket.
    fn reject(&self, slot: &mut Slot, limit: u64, acquire: u32, now_ms: u64) -> Decision {
        let acquire = u64::from(acquire);
        let max = limit.saturating_add(self.burst);
        if acquire > max {
            return Decision::Block;
        }
        let (max, acquire) = (as_i64(max), as_i64(acquire));
        if slot.tokens == NEW {
            // Token never added: fill the bucket and take from it.
            slot.tokens = max - acquire;
            slot.last_ms = now_ms;
            return Decision::Pass;
        }
        let pass_time = now_ms.saturating_sub(slot.last_ms);
        if pass_time > self.duration_ms {
            // Java: long toAddCount = (passTime * tokenCount) / (durationInSec * 1000);
            let to_add = (u128::from(pass_time) * u128::from(limit)) / u128::from(self.duration_ms);
            let to_add = i64::try_from(to_add).unwrap_or(i64::MAX);
            let rest = slot.tokens;
            let new = if to_add.saturating_add(rest) > max {
                max - acquire
            } else {
                rest + to_add - acquire
            };
            if new < 0 {
                return Decision::Block;
            }
            slot.tokens = new;
            slot.last_ms = now_ms;
            Decision::Pass
        } else if slot.tokens - acquire >= 0 {
            slot.tokens -= acquire;
            Decision::Pass
        } else {
            Decision::Block
        }
    }

    /// Sentinel's `passThrottleLocalCheck` on the key's schedule.
    fn throttle(
        &self,
        slot: &mut Slot,
        limit: u64,
        acquire: u32,
        now_ms: u64,
        max_queueing_time: Duration,
    ) -> Decision {
        // Java: Math.round(1.0 * 1000 * acquireCount * rule.getDurationInSec() / tokenCount)
        let cost = (self.duration_ms as f64 * f64::from(acquire) / limit as f64).round() as u64;
        if slot.tokens == NEW {
            // Never passed: pass, and start the schedule now.
            slot.tokens = 0;
            slot.last_ms = now_ms;
            return Decision::Pass;
        }
        let expected = slot.last_ms.saturating_add(cost);
        let max_queueing_ms = u64::try_from(max_queueing_time.as_millis()).unwrap_or(u64::MAX);
        if expected <= now_ms || expected - now_ms < max_queueing_ms {
            if expected > now_ms {
                slot.last_ms = expected;
                Decision::Wait(Duration::from_millis(expected - now_ms))
            } else {
                slot.last_ms = now_ms;
                Decision::Pass
            }
        } else {
            Decision::Block
        }
    }
}

/// A slot's state before its first check (Sentinel: no token counter yet).
const NEW: i64 = i64::MIN;

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The in-flight cells of the key of `digest`.
fn flight_cells(flight: &FlightSketch, digest: u32) -> Cells {
    Cells::of(super::spread(digest), flight.width())
}

/// The set of `key` among `sets` (multiply-shift on the hash's high bits).
fn set_of(key: u64, sets: usize) -> usize {
    ((u128::from(key.rotate_left(32)) * sets as u128) >> 64) as usize
}
