//! Adaptive concurrency limits: protection that needs no capacity number.
//!
//! An [`AdaptiveLimiter`] admits at most `limit` calls at once, and a [`LimitAlgorithm`] moves
//! the limit from the latency of the calls that complete: up while latency holds at its
//! baseline, down when a queue builds (latency rises) or calls are dropped. Nobody has to know
//! the service's capacity, and the limit follows it as deploys and dependencies change it.
//!
//! The limiter is exact under racing threads: the limit and the in-flight count share one
//! atomic word and a call is admitted by compare-and-swap on it (proven with loom; an 8-thread
//! stress test checks it), and every completed call's sample reaches the algorithm (none is
//! lost to a race: each is counted in [`AdaptiveState::samples`]).
//!
//! # Algorithms, and how to choose
//!
//! | algorithm | moves on | reacts | from |
//! |---|---|---|---|
//! | [`Gradient2`] | average RTT against its long-term average | once per window (1 s), smoothed | Netflix |
//! | [`Vegas`] | RTT against the smallest RTT seen (the queue it implies) | on every sample | Netflix |
//! | [`Aimd`] | drops and timeouts only | on every sample | Netflix |
//! | [`EnvoyGradient`] | a percentile of each window's RTTs against a periodically measured minRTT | every window (100 ms, or 12 minRTTs if longer) | Envoy |
//! | [`Bbr`] | the largest rate times the calmest round's mean RT (the bandwidth-delay product), probing above it one round in 8 | every round (100 ms) | TCP BBR; Sentinel's system rule |
//!
//! - **Latency-based, no tuning:** [`EnvoyGradient`] re-measures its baseline on a schedule, so
//!   a baseline that moves is found again; its windows are short, so it reacts within a
//!   fraction of a second. When its limit keeps binding it measures at a minimal limit,
//!   briefly, as Envoy does (a dip in admitted calls); below its limit, or when it binds only in
//!   bursts, it measures the calls as they come and refuses nothing ([`Remeasure`]).
//! - **Latency-based, steady:** [`Gradient2`] compares against a long-term average rather than a
//!   minimum, which suits RPCs whose latency varies widely call to call; it is slow on purpose
//!   (1 s windows, smoothing 0.2), so it ramps up slowly after a shrink.
//! - **[`Vegas`]** grows fast while it sees no queue, and needs a clean minimum RTT.
//! - **[`Bbr`]** is Sentinel's BBR check (`maxSuccessQps x minRt`) made to recover: it needs
//!   no latency target at all, only the rate and the RT the service shows, and probes for more
//!   capacity every 8 rounds. On services of 8 workers or more it keeps p99 low and
//!   recovers at once after a slowdown; on smaller ones, and at offered loads near capacity,
//!   it refuses more than the gradient controllers do (measured in `docs/overload.md`).
//! - **[`Aimd`]** when latency says little (very mixed work) but timeouts and overload
//!   refusals do.
//!
//! Every algorithm takes Netflix's or Envoy's defaults from `Default`, except `EnvoyGradient`'s
//! `remeasure`, `window_min_rtts` and `in_flight_floor`, which are spillway's; the minimum
//! limits of Netflix's defaults (20) suit services with many workers. Which one protects best, and with
//! which settings, is measured in the overload lab (`spillway lab`, `docs/overload.md`).
//!
//! # Rules, and a queue
//!
//! In a [`Spillway`](crate::Spillway), an [`AdaptiveRule`] puts a limit on one resource, or on
//! all inbound traffic, checked with the other rules. By default a call over the limit is
//! refused at once; with an [`AdaptiveQueue`], callers that can wait (async ones, through
//! [`EntryBuilder::try_enter`](crate::EntryBuilder::try_enter) and `spillway-tower`) wait
//! briefly for a place in FIFO, LIFO or adaptive order ([`QueueOrder`]), and a finishing call
//! hands its place to the next.
//!
//! # Examples
//!
//! ```
//! use spillway::adaptive::{AdaptiveLimiter, EnvoyGradient, EnvoyGradientConfig};
//!
//! let limiter = AdaptiveLimiter::new(EnvoyGradient::new(EnvoyGradientConfig::default())?);
//! match limiter.try_acquire() {
//!     Ok(permit) => {
//!         // ... serve the call; dropping the permit ends it and feeds its RTT back.
//!         drop(permit);
//!     }
//!     Err(refusal) => {
//!         // Over the limit: refuse the call (429 / RESOURCE_EXHAUSTED).
//!         assert!(refusal.in_flight >= refusal.limit);
//!     }
//! }
//! let state = limiter.state();
//! println!("limit {} ({}), in flight {}", state.limit, state.last_change, state.in_flight);
//! # Ok::<(), spillway::adaptive::AdaptiveError>(())
//! ```

mod aimd;
mod algorithm;
mod bbr;
mod buffer_scaling;
mod claim;
mod envoy_gradient;
mod error;
mod exp_avg;
mod gradient2;
mod inbox;
mod lanes;
mod limiter;
mod queue;
mod random;
mod rule;
mod rule_set;
mod sample;
mod sampling;
mod step;
mod vegas;
mod wait_slot;

#[cfg(all(test, spillway_loom))]
mod loom_limiter;

pub use aimd::{Aimd, AimdConfig};
pub use algorithm::{ChangeReason, LimitAlgorithm, LimitUpdate, Quiet, RttEstimates};
pub use bbr::{Bbr, BbrConfig};
pub use buffer_scaling::BufferScaling;
pub(crate) use claim::{Claim, NO_DEADLINE};
pub use envoy_gradient::{EnvoyGradient, EnvoyGradientConfig, Remeasure};
pub use error::AdaptiveError;
pub use gradient2::{Gradient2, Gradient2Config};
pub(crate) use limiter::NoPlace;
pub use limiter::{
    AdaptiveLimiter, AdaptivePermit, AdaptiveRefusal, AdaptiveState, Outcome, Ticket,
};
pub use queue::{AdaptiveQueue, QueueOrder};
pub use rule::{validate_adaptive_rules, AdaptiveAlgorithm, AdaptiveRule, AdaptiveRuleError};
pub(crate) use rule_set::{AdaptiveRuleSet, InstalledAdaptive};
pub use sample::{Sample, SampleWindow};
pub use sampling::{Sampling, WindowPolicy};
pub(crate) use step::blocked_as;
pub use vegas::{Vegas, VegasConfig};
pub(crate) use wait_slot::{Granted, WaitSlot};
