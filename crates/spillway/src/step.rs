//! A rule kind's part in an entry's path after the flow rules, through one trait: what it checks
//! and takes, what it gives back if a later step refuses, and what it does when the entry ends.
//! Each kind implements [`Step`] in its own module; the kinds' list (`kinds.rs`) runs the steps
//! in order, each statically, and keeps what they take.

use crate::adaptive::{Claim, InstalledAdaptive, Outcome, WaitSlot};
use crate::block::BlockError;
use crate::keyed::Keys;
use std::sync::Arc;
use std::time::Duration;

/// An entry's `limited` byte: its low four bits are the places the system and flow rules hold
/// on exact in-flight counters (`entry/places.rs`) ...
pub(crate) const PLACES: u8 = 0x0f;
/// ... and its high four the marks of the kinds in the list that keep something until the
/// entry ends (`kinds.rs`), so that one test tells an exit whether it holds anything.
pub(crate) const MARKS: u8 = 0xf0;

/// What a step sees of the entry it checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At {
    /// The resource's name number (for a refusal's block).
    pub(crate) resource: u32,
    pub(crate) now: u64,
    pub(crate) count: u32,
    /// The entry's keys (none for an entry resumed after a wait: keys are checked before).
    pub(crate) keys: Keys,
    /// Whether the entry may wait in a queue for a place.
    pub(crate) can_wait: bool,
    /// What it claims in an adaptive limit's queue: its criticality, tenant and deadline.
    pub(crate) claim: Claim,
}

/// Why a step did not pass an entry.
pub(crate) enum Stop {
    Refused(BlockError),
    /// Waiting in an adaptive limit's queue.
    Waiting(PlaceWait),
}

impl Stop {
    /// The stop of the step at `position` in the list: a wait resumes after it.
    #[inline]
    pub(crate) fn at(self, position: u8) -> Self {
        match self {
            Stop::Waiting(wait) => Stop::Waiting(PlaceWait { position, ..wait }),
            refused => refused,
        }
    }
}

/// An entry waiting for a place under an adaptive limit: its slot in the queue, the limit (as
/// installed when it joined), and the position in the list of the step that queued it, where
/// the entry goes on once it has its place.
#[derive(Debug)]
pub(crate) struct PlaceWait {
    pub(crate) slot: Arc<WaitSlot>,
    pub(crate) adaptive: Arc<InstalledAdaptive>,
    pub(crate) position: u8,
}

/// How an entry ended, for the steps' exits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct End {
    /// When the entry was admitted (nanoseconds on the instance's clock).
    pub(crate) started: u64,
    pub(crate) now: u64,
    /// Whether the call was paced by its caller: its RT is no evidence of the service's
    /// latency, for the adaptive limits and the slow-call breakers.
    pub(crate) paced: bool,
    pub(crate) rt_micros: u64,
    pub(crate) count: u32,
    /// Whether the call was marked as failed.
    pub(crate) error: bool,
    /// What the call says of the service: [`Outcome::Ignore`] for an abandoned call, which
    /// gives back what it holds and counts nothing.
    pub(crate) outcome: Outcome,
}

/// A rule kind's step: `Self` is a resource's installed rules of the kind.
pub(crate) trait Step: Send + Sync + Sized + 'static {
    /// What the step took for an entry, given back if a later step refuses it.
    type Taken: Copy + Default + std::fmt::Debug;
    /// What the step keeps until the entry ends, beyond its mark: at most a few bytes (an entry's
    /// state is four words; `kinds::Kept` holds every kind's).
    type Kept: Copy + Default + std::fmt::Debug;
    /// Whether every exit reaches the step, whether or not the entry took anything from it (a
    /// breaker counts every completion).
    const EVERY_EXIT: bool = false;

    /// Whether the step applies to an entry at all (read before the rules are loaded).
    #[inline(always)]
    fn applies(_at: &At) -> bool {
        true
    }

    /// Checks the entry; what it takes goes into `taken`. A refusal gives back what this step
    /// took.
    fn take(this: &Arc<Self>, at: &At, taken: &mut Self::Taken) -> Result<(), Stop>;

    /// How long a pacing rule of the kind makes the entry wait, from what it took (`None`: the
    /// kind never paces, which the list's fold reads at compile time).
    #[inline(always)]
    fn wait(_taken: &Self::Taken) -> Option<Duration> {
        None
    }

    /// Whether `taken` holds anything to give back.
    fn holds(taken: &Self::Taken) -> bool;

    /// Gives back what `taken` holds: a later step refused the entry, or it gave up.
    fn give_back(&self, taken: &Self::Taken);

    /// A queued entry starts its call at `now`: what it took follows it.
    #[inline(always)]
    fn rebase(&self, _taken: &mut Self::Taken, _now: u64) {}

    /// The entry waited in this step's queue and was handed a place.
    #[inline(always)]
    fn granted(_taken: &mut Self::Taken) {}

    /// What the admitted entry keeps until it ends (`None`: nothing, and no mark).
    fn keep(taken: &Self::Taken) -> Option<Self::Kept>;

    /// The entry ended: it kept `kept` (the default if it kept nothing and the step sees
    /// every exit).
    fn exit(&self, kept: Self::Kept, end: &End);
}
