//! spillway: flow control and overload protection for services.
//!
//! spillway admits what a service can handle, sheds or paces the rest, and keeps the service up.
//! It implements, exactly and in Rust, the statistics and limits of Alibaba Sentinel, Guava's
//! `RateLimiter` and Dubbo's limits.
//!
//! This crate is the core engine: time ([`Clock`], [`ManualClock`]), statistics
//! ([`stats::StripedCounter`], [`stats::SlidingWindow`], [`stats::ResourceNode`]), the entry
//! path ([`Spillway`], [`Resource`], [`Entry`], [`BlockError`]), flow rules ([`flow`]), system
//! adaptive protection ([`system`]), circuit breakers ([`breaker`]), Guava's rate limiter
//! ([`RateLimiter`]) and Dubbo's limits ([`dubbo`]). It has no async runtime and does no network
//! I/O; the `spillway-tower` crate awaits what this one decides.
//!
//! # Quick start
//!
//! ```
//! use spillway::{ManualClock, Spillway};
//!
//! // Tests drive time by hand; production code uses `Spillway::new()` (the system clock).
//! let clock = ManualClock::starting_at_millis(1_700_000_000_000);
//! let spillway = Spillway::new_with_clock(clock.clone());
//!
//! // Resolve a resource once, then enter it on every call: no name lookup on the hot path.
//! let orders = spillway.resource("GET /orders")?;
//! for _ in 0..3 {
//!     let entry = orders.entry().inbound().enter()?;
//!     clock.advance_millis(2); // the call takes 2 ms
//!     drop(entry); // records RT, completion, concurrency - 1
//! }
//!
//! let stats = orders.stats();
//! assert_eq!(stats.pass_qps, 3.0);
//! assert_eq!(stats.avg_rt_micros, 2_000.0);
//! assert_eq!(stats.concurrency, 0);
//! # Ok::<(), spillway::BlockError>(())
//! ```
//!
//! # Choosing a protection
//!
//! Three kinds of rule answer three different questions; most services want all three, each
//! where it fits.
//!
//! | | protects | you must know | reacts to |
//! |---|---|---|---|
//! | [flow rules](flow) | one resource, from too much traffic | its capacity (a QPS, or calls in flight) | traffic, at once |
//! | [the system rule](system) | the whole service, from overload | nothing, or a CPU / load level to defend | the service's own RT and throughput |
//! | [breakers](breaker) | callers, from a failing dependency | what "failing" means (slow, errors) | the dependency's outcomes |
//!
//! - **Flow rules** when you know a number: a downstream's quota, a tested capacity, a fair
//!   share per caller (`limit_app`). They are exact and cheap, and they pace or warm up as well as
//!   refuse. They cannot tell that the service is struggling for another reason (a slow disk, a
//!   noisy neighbour), and a number set for yesterday's code is wrong for today's.
//! - **The system rule** when you do not know the number, or it moves: its BBR check admits as
//!   many inbound calls in flight as the service has just shown it can complete
//!   (`max_success_qps x min_rt`), once CPU or load says the machine is under pressure. It
//!   protects the whole service, inbound traffic only, and sheds the excess within one call of
//!   the RT dropping. Use [`system::CpuStrategy::Bbr`] in containers (CPU against the quota is a
//!   sharp signal), and [`system::MinRtEstimate::BucketAverage`] when fast error paths or cache
//!   hits would make the exact minimum RT meaningless.
//! - **Breakers** for what you call, not what you serve: when a dependency fails or slows, stop
//!   sending it calls for a while, fail fast instead of tying up threads, and probe before
//!   trusting it again. Put them on outbound resources (a database, a remote API).
//!
//! An inbound entry meets them in this order: the system rule, the resource's flow rules, its
//! breakers. A refusal by a later one gives back what earlier ones reserved.
//!
//! # The decision pipeline
//!
//! Every entry, whichever way it comes in ([`EntryBuilder::enter`], [`EntryBuilder::try_enter`],
//! owned or not), goes through one sequence, written top to bottom in one function
//! (`src/entry/pipeline.rs`):
//!
//! | step | what | file |
//! |---|---|---|
//! | 1. resolve | the resource (a handle's, or a name's through the registry) and the caller's origin and entrance nodes | `entry/builder.rs` |
//! | 2. system | inbound entries: the system rules against the global inbound node; `max_concurrency` takes its place | `entry/pipeline.rs`, `system/` |
//! | 3. flow | the resource's flow rules, all or nothing: the gate's short path when it holds every rule, else the rule set; shadow rules count and admit | `entry/gate_check.rs`, `entry/flow_check.rs`, `flow/` |
//! | 4. later kinds | in the order of their list, each through its `Step`: the cluster rules, the per-key rules (for an entry with keys), the resource's adaptive concurrency limit and the one on all inbound traffic, the breakers | `kinds.rs`, `cluster/step.rs`, `keyed/step.rs`, `adaptive/step.rs`, `breaker/step.rs` |
//! | 5. admit, queue or refuse | count the admission, hand out the wait, or give back what was held, count the refusal and return the block | `entry/guard.rs`, `entry/pending.rs`, `entry/held.rs`, `entry/refusal.rs` |
//! | 6. exit | the entry's drop: RT, completion, places given back, each later kind that kept something (or sees every exit: breakers) told | `entry/guard.rs`, `kinds.rs` |
//!
//! A step with nothing to check costs one flag test, and a resource without rules is admitted
//! after the flags alone. The flow step speaks [`flow::Decision`], as the standalone
//! controllers do, and calls the same controller code they run; a property test
//! (`tests/pipeline_equivalence.rs`) drives random rule sets, entries, exits, clock moves and
//! reloads through both and requires the same decisions and statistics.
//!
//! ```
//! use spillway::breaker::{BreakerRule, BreakerStrategy};
//! use spillway::flow::FlowRule;
//! use spillway::system::{CpuStrategy, SystemRule};
//! use spillway::Spillway;
//! use std::time::Duration;
//!
//! let spillway = Spillway::new();
//! // The service as a whole: shed by BBR once CPU passes 80% of the quota.
//! spillway.load_system_rules(vec![SystemRule::new("service")
//!     .with_highest_cpu_usage(0.8)
//!     .with_cpu_strategy(CpuStrategy::Bbr)])?;
//! // One endpoint: its tested capacity.
//! spillway.load_flow_rules(vec![FlowRule::qps("search-qps", "GET /search", 500.0)])?;
//! // One dependency: stop calling it for 10 s when half its calls fail.
//! spillway.load_breaker_rules(vec![BreakerRule::new(
//!     "inventory-errors",
//!     "inventory.get",
//!     BreakerStrategy::ErrorRatio { threshold: 0.5 },
//!     Duration::from_secs(10),
//! )])?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Exactness
//!
//! Reads of a [`stats::SlidingWindow`] equal Sentinel's `LeapArray` / `ArrayMetric` reads for the
//! same timed adds. `docs/exactness.md` in the repository lists every deliberate difference from
//! Sentinel, Guava and Dubbo; those of the statistics, each for a reason:
//!
//! - response times are kept in microseconds, not milliseconds, so min RT floors at 1 µs (Sentinel
//!   floors at 1 ms);
//! - an add that races the recycling of its bucket is refused and counted as late (Sentinel can
//!   lose adds during a reset, or file them in a detached bucket);
//! - with a one-bucket window, the "previous bucket" read returns 0 (Sentinel returns the current
//!   bucket).

//!
//! # Performance
//!
//! What keeps an entry cheap, and what to keep when changing it (the measured costs, against
//! the peers a user would pick instead, are in `docs/benchmarks.md`, with the command and the CPU):
//! - two clock reads an entry (its start and end, for the microsecond RT), which dominate it on
//!   the TSC; a [`CoarseClock`] makes a read one load, with RT in whole ticks;
//! - the statistics (pass, completion, RT, min RT and the in-flight count) go to the calling
//!   thread's own cache lines of the second window with plain stores, which feed the minute
//!   window once per bucket, so that threads do not share lines: see [`stats::SlidingWindow`];
//! - the common exit (an entry without origin, entrance or held place, on a resource without
//!   breakers) is inlined where the [`Entry`] drops and makes no call, so that it saves no
//!   registers; inbound exits write the resource's and the global inbound node's lines the same
//!   way, out of line;
//! - a QPS reject rule adds one compare-and-swap on a passing call and only reads on a refused
//!   one, reading the rule's numbers from a copy in the resource rather than from the rule set
//!   (see [`flow`](crate::flow#reloads)).

#![cfg_attr(docsrs, feature(doc_cfg))]
// `unsafe_code` is denied workspace-wide; the one module that allows it reads the TSC inline
// (`clock/tsc.rs`).

pub mod adaptive;
mod block;
mod bounded_map;
pub mod breaker;
mod clock;
pub mod cluster;
mod core;
mod criticality;
pub mod dubbo;
mod entry;
mod entry_caps;
pub mod flow;
mod intern;
pub mod keyed;
mod kinds;
#[cfg(feature = "serde")]
mod no_fields;
mod quota;
pub mod rate_limiter;
mod registry;
mod resource;
mod rule_error;
mod snapshot;
mod spillway;
pub mod stats;
mod step;
mod sync;
pub mod system;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

/// The tour's examples (docs/features.md), compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/features.md")]
struct FeaturesDoctests;

/// The crate's own README (the one crates.io shows), compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;

pub use block::{BlockError, BlockKind};
pub use clock::{
    blocking_wait_hook, set_blocking_wait_hook, Clock, CoarseClock, ManualClock, StdClock,
    SystemClock, DEFAULT_COARSE_TICK,
};
pub use criticality::{Criticality, ParseCriticalityError};
pub use entry::{
    paced_by_caller, Admission, Entry, EntryBuilder, OwnedAdmission, OwnedEntry, OwnedPending,
    OwnedWaiting, Pending, TrafficType, Waiting,
};
pub use quota::{Quota, QuotaUnit};
pub use rate_limiter::{RateLimiter, RateLimiterBuilder, RateLimiterError, Reservation};
pub use registry::{OverflowPolicy, DEFAULT_MAX_RESOURCES, OVERFLOW_RESOURCE};
pub use resource::{Resource, OVERFLOW_ORIGIN};
pub use rule_error::RuleError;
pub use snapshot::{ResourceSnapshot, Snapshot};
pub use spillway::{Spillway, SpillwayBuilder, UnenteredRule, DEFAULT_MAX_ORIGINS};
