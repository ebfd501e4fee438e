//! The limiter's shared state, updated optimistically under a sequence number.
//!
//! Guava's mutable state (stored permits and the next free ticket) and the rate's derived
//! parameters (stable interval, max permits, and the warm-up curve's slope and threshold) are
//! atomics beside one `version` counter, which is even while nobody writes.
//!
//! A change (a reservation, a rate change, an undo):
//!
//! 1. loads `version` (acquire) and, if even, every field (relaxed) into a private [`Smooth`];
//! 2. issues an acquire fence and computes Guava's arithmetic on the copy;
//! 3. claims the state by swapping `version` from the even value it loaded to the odd one above
//!    it; if that fails, someone wrote in between, and it backs off (longer after each loss)
//!    and starts over from 1;
//! 4. issues a release fence, stores the fields that changed (relaxed), and publishes
//!    `version + 2` with release.
//!
//! A claim succeeds only if no other change was claimed since step 1, so the copy it computed
//! from was the whole current state. If step 1 read any value stored by a later writer, the
//! fences order that writer's claim before this one's swap, which then fails. The computation
//! (the bulk of the work, and the loads) therefore runs before the one atomic read-modify-write,
//! overlapping the clock read, and a refusal writes nothing at all. While a writer holds the odd
//! version (a few stores), other changes wait by spinning briefly, then yielding.
//!
//! Every field is a `u64` atomic, so the protocol is checked by loom as written.

use super::smooth::{Curve, Smooth};
use crate::sync::{fence, AtomicU64, Ordering};

/// The version and the state's fields (as `f64` bits or `i64` bits in `u64` atomics), alone on a
/// pair of cache lines: a reservation loads them all, claims the version and stores two of them,
/// so they must move between cores as one line.
///
/// Left to the enclosing struct's layout, the version and the fields after it straddled two
/// lines in one placement out of four (the limiter's address decides, so it changed from run to
/// run), and two threads reserving at once then fought over both: about 1.8 times the cost of a
/// placement on one line. Aligned to one line only, the cost still changed with which line of a
/// pair it was; Intel's spatial prefetcher moves lines in pairs, hence 128 bytes.
#[derive(Debug)]
#[repr(C, align(128))]
struct Fields {
    version: AtomicU64,
    stored_permits: AtomicU64,
    next_free_ticket_micros: AtomicU64,
    stable_interval_micros: AtomicU64,
    max_permits: AtomicU64,
    slope: AtomicU64,
    threshold_permits: AtomicU64,
}

/// What undoing one reservation takes: the version it published, and the state to go back to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Undo {
    version: u64,
    restored_stored_permits: f64,
    restored_next_free_micros: i64,
}

/// The shared state of one limiter.
#[derive(Debug)]
pub(super) struct Schedule {
    fields: Fields,
    /// The curve's shape without its rate-derived parts (which live in `fields`).
    curve: Curve,
}

impl Schedule {
    /// A schedule for `curve` at `permits_per_second`, with the clock at zero.
    pub(super) fn new(curve: Curve, permits_per_second: f64) -> Self {
        let mut smooth = Smooth::new(curve);
        smooth.set_rate(permits_per_second, 0);
        let (slope, threshold) = curve_params(&smooth.curve);
        let bits = |value: f64| AtomicU64::new(value.to_bits());
        Self {
            fields: Fields {
                version: AtomicU64::new(0),
                stored_permits: bits(smooth.stored_permits),
                next_free_ticket_micros: AtomicU64::new(smooth.next_free_ticket_micros as u64),
                stable_interval_micros: bits(smooth.stable_interval_micros),
                max_permits: bits(smooth.max_permits),
                slope: bits(slope),
                threshold_permits: bits(threshold),
            },
            curve,
        }
    }

    /// The next free ticket, read alone: a value it held at some moment no earlier than
    /// anything that happened before this call.
    #[inline]
    pub(super) fn next_free_micros(&self) -> i64 {
        self.fields.next_free_ticket_micros.load(Ordering::Acquire) as i64
    }

    /// An even version and the state it stands for (valid if the version is unchanged later).
    #[inline]
    fn read(&self) -> (u64, Smooth) {
        let mut looks = 0u32;
        loop {
            let version = self.fields.version.load(Ordering::Acquire);
            if version & 1 == 0 {
                let smooth = self.copy();
                // Orders the field reads above before the version is read or claimed again.
                fence(Ordering::Acquire);
                return (version, smooth);
            }
            wait_for_writer(&mut looks);
        }
    }

    /// The fields, read with relaxed loads.
    #[inline]
    fn copy(&self) -> Smooth {
        let relaxed = Ordering::Relaxed;
        let f64_of = |field: &AtomicU64| f64::from_bits(field.load(relaxed));
        let curve = match self.curve {
            bursty @ Curve::Bursty { .. } => bursty,
            Curve::WarmingUp {
                warmup_period_micros,
                cold_factor,
                ..
            } => Curve::WarmingUp {
                warmup_period_micros,
                cold_factor,
                slope: f64_of(&self.fields.slope),
                threshold_permits: f64_of(&self.fields.threshold_permits),
            },
        };
        Smooth {
            curve,
            stored_permits: f64_of(&self.fields.stored_permits),
            max_permits: f64_of(&self.fields.max_permits),
            stable_interval_micros: f64_of(&self.fields.stable_interval_micros),
            next_free_ticket_micros: self.fields.next_free_ticket_micros.load(relaxed) as i64,
        }
    }

    /// Claims `version` (even) for writing; false if another change was claimed since.
    #[inline]
    fn claim(&self, version: u64) -> bool {
        self.fields
            .version
            .compare_exchange(version, version + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Stores `new` (the rate's parameters only if they changed from `old`) and releases the
    /// claim on `version`; returns the version published.
    #[inline]
    fn publish(&self, version: u64, old: &Smooth, new: &Smooth) -> u64 {
        // Orders the claim before the stores below, for readers that see them.
        fence(Ordering::Release);
        let relaxed = Ordering::Relaxed;
        // The two fields a reservation changes are stored as they are (comparing first costs
        // more than the stores, which hit the line the claim already owns).
        let bits = new.stored_permits.to_bits();
        self.fields.stored_permits.store(bits, relaxed);
        let micros = new.next_free_ticket_micros as u64;
        self.fields.next_free_ticket_micros.store(micros, relaxed);
        if new.stable_interval_micros.to_bits() != old.stable_interval_micros.to_bits() {
            let bits = new.stable_interval_micros.to_bits();
            self.fields.stable_interval_micros.store(bits, relaxed);
            self.fields
                .max_permits
                .store(new.max_permits.to_bits(), relaxed);
            let (slope, threshold) = curve_params(&new.curve);
            self.fields.slope.store(slope.to_bits(), relaxed);
            self.fields
                .threshold_permits
                .store(threshold.to_bits(), relaxed);
        }
        self.fields.version.store(version + 2, Ordering::Release);
        version + 2
    }

    /// Runs `step` on a private copy of the state until its result is published atomically,
    /// and returns what it returned. `step` says whether to publish; it may run again, on a
    /// newer state, if another thread changed the state in the meantime.
    #[inline]
    pub(super) fn update<R>(&self, mut step: impl FnMut(&mut Smooth) -> (R, bool)) -> R {
        self.update_versioned(|smooth| step(smooth)).0
    }

    /// [`update`](Self::update), also returning the version published (or read, if the step
    /// published nothing).
    #[inline]
    fn update_versioned<R>(&self, mut step: impl FnMut(&mut Smooth) -> (R, bool)) -> (R, u64) {
        let mut lost = 0u32;
        loop {
            let (version, old) = self.read();
            let mut new = old;
            let (value, publish) = step(&mut new);
            if !publish || unchanged(&old, &new) {
                // Nothing to write: the result stands if the state it read was whole.
                if self.fields.version.load(Ordering::Relaxed) == version {
                    return (value, version);
                }
            } else if self.claim(version) {
                return (value, self.publish(version, &old, &new));
            }
            back_off(&mut lost);
        }
    }

    /// Guava's `reserveEarliestAvailable`, also returning how to undo it.
    pub(super) fn reserve_with_undo(&self, permits: u32, now_micros: i64) -> (i64, Undo) {
        let (moment, undo) = self.reserve_undoable(permits, now_micros, None);
        // Without a timeout the permits are always reserved.
        (moment.unwrap_or(now_micros), undo)
    }

    /// [`reserve_with_undo`](Self::reserve_with_undo) only if the permits can be had within
    /// `timeout_micros` (Guava's `canAcquire`, read in the same step); `None`, and nothing
    /// written, if not.
    pub(super) fn try_reserve_with_undo(
        &self,
        permits: u32,
        now_micros: i64,
        timeout_micros: i64,
    ) -> Option<(i64, Undo)> {
        match self.reserve_undoable(permits, now_micros, Some(timeout_micros)) {
            (Some(moment), undo) => Some((moment, undo)),
            (None, _) => None,
        }
    }

    /// The one step of both: the moment reserved (`None`: not within the timeout) and its undo.
    fn reserve_undoable(
        &self,
        permits: u32,
        now_micros: i64,
        timeout_micros: Option<i64>,
    ) -> (Option<i64>, Undo) {
        let mut restored = (0.0, 0);
        let (moment, version) = self.update_versioned(|smooth| {
            if let Some(timeout) = timeout_micros {
                if smooth.next_free_ticket_micros.saturating_sub(timeout) > now_micros {
                    return (None, false);
                }
            }
            smooth.resync(now_micros);
            restored = (smooth.stored_permits, smooth.next_free_ticket_micros);
            (
                Some(smooth.reserve_earliest_available(permits, now_micros)),
                true,
            )
        });
        let undo = Undo {
            version,
            restored_stored_permits: restored.0,
            restored_next_free_micros: restored.1,
        };
        (moment, undo)
    }

    /// Gives a reservation back if nothing changed the state after it: the state returns to
    /// what it was just before the reservation. Returns whether it did.
    pub(super) fn undo(&self, undo: Undo) -> bool {
        if !self.claim(undo.version) {
            return false;
        }
        let old = self.copy();
        let mut new = old;
        new.stored_permits = undo.restored_stored_permits;
        new.next_free_ticket_micros = undo.restored_next_free_micros;
        self.publish(undo.version, &old, &new);
        true
    }

    /// Guava's `setRate`.
    pub(super) fn set_rate(&self, permits_per_second: f64, now_micros: i64) {
        self.update(|smooth| {
            smooth.set_rate(permits_per_second, now_micros);
            ((), true)
        });
    }

    /// Guava's state now, for reads that change nothing.
    pub(super) fn snapshot(&self) -> Smooth {
        self.update(|smooth| (*smooth, false))
    }
}

/// Whether a step has nothing to publish: at an infinite rate, when it left every stored field
/// as it was, bit for bit (the parameters follow the stable interval).
///
/// At a finite rate a reservation takes stored permits or moves the next free moment, apart
/// from rare truncations to zero, and publishing a state unchanged is harmless; so the step
/// publishes without comparing. The comparison would otherwise sit between the loads and the
/// claim, on the path a single thread's calls repeat one after another. At an infinite rate
/// most steps change nothing, and skipping their claims keeps racing threads apart.
#[inline]
fn unchanged(old: &Smooth, new: &Smooth) -> bool {
    old.stable_interval_micros == 0.0
        && old.stored_permits.to_bits() == new.stored_permits.to_bits()
        && old.next_free_ticket_micros == new.next_free_ticket_micros
        && old.stable_interval_micros.to_bits() == new.stable_interval_micros.to_bits()
}

/// The warm-up curve's rate-derived parameters (zero for a bursty limiter).
fn curve_params(curve: &Curve) -> (f64, f64) {
    match *curve {
        Curve::Bursty { .. } => (0.0, 0.0),
        Curve::WarmingUp {
            slope,
            threshold_permits,
            ..
        } => (slope, threshold_permits),
    }
}

/// Spin-loop hints after the first lost race: about one contended reservation's time (a `pause`
/// took 8.6 ns on the bench VM, so 16 are about 140 ns, what two threads' reservations cost
/// there). The winner meanwhile keeps the line and makes its next reservation without a
/// transfer; a loser that came straight back would take the line from it instead, and each of
/// them would lose the next race more often.
const FIRST_BACK_OFF_SPINS: u32 = 16;

/// The most a loser doubles its wait to: 64 hints (about 550 ns on the bench VM), a bound on
/// what one unlucky caller pays for the others' throughput.
const MAX_BACK_OFF_SPINS: u32 = 64;

/// After a lost race, waits before reading again, twice as long each time up to
/// [`MAX_BACK_OFF_SPINS`], so that racing threads stop taking the state's cache line from each
/// other on every attempt.
#[cold]
fn back_off(lost: &mut u32) {
    // Under loom a spin is a scheduling point: one is enough to let the other thread run.
    let spins = if cfg!(spillway_loom) {
        1
    } else {
        (FIRST_BACK_OFF_SPINS << *lost).min(MAX_BACK_OFF_SPINS)
    };
    *lost = (*lost + 1).min(2);
    for _ in 0..spins {
        crate::sync::spin_loop();
    }
}

/// Spin-loop hints between two looks at a version held by a writer. The writer holds it for
/// three stores, but a reader that saw the odd version took the line from it, and the writer
/// needs the line back to finish: looking again sooner than a line can cross (about 16 hints, as
/// for [`FIRST_BACK_OFF_SPINS`]) only takes it away again.
const WRITER_WAIT_SPINS: u32 = 16;

/// Waits for a writer holding the state: spin [`WRITER_WAIT_SPINS`] hints between looks, then,
/// after 64 looks, let other threads run (the writer may have been preempted).
#[cold]
fn wait_for_writer(looks: &mut u32) {
    *looks += 1;
    if *looks < 64 {
        // Under loom a spin is a scheduling point: one is enough to let the writer run.
        let spins = if cfg!(spillway_loom) {
            1
        } else {
            WRITER_WAIT_SPINS
        };
        for _ in 0..spins {
            crate::sync::spin_loop();
        }
    } else {
        crate::sync::yield_now();
    }
}
