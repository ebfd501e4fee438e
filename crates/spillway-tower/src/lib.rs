//! spillway on tokio: the crate that owns the async runtime.
//!
//! - [`SpillwayLayer`]: tower middleware that puts an axum, tonic or hyper service behind
//!   spillway in one line (see [`protect`]): 429 with `Retry-After` and `RateLimit` headers (or
//!   gRPC `RESOURCE_EXHAUSTED`) when a rule blocks, async waits when a rule paces, statistics
//!   and breakers fed from every response.
//!
//! spillway's core decides and never sleeps; this crate waits. Every wait here is a tokio timer,
//! never a blocked runtime thread, and every wait is cancellation-safe: a future dropped before
//! its turn gives its reservation back.
//!
//! - [`TokioClock`]: a [`spillway::Clock`] on tokio's time, so that
//!   `#[tokio::test(start_paused = true)]` drives spillway's statistics and its waits together.
//! - [`acquire`]: Guava's `acquire` for a [`spillway::RateLimiter`], awaited; and
//!   [`try_acquire_within`], Guava's `tryAcquire` with a timeout, refusing at once when the
//!   wait would be longer.
//! - [`enter`]: an entry that a pacing flow rule may queue, awaited.
//! - [`acquire_active`]: a slot of a Dubbo `actives` limit, awaited up to a timeout.
//! - [`LimitedListener`]: Dubbo's `accepts`, a cap on open accepted connections that pauses or
//!   closes at the cap.
//!
//! # Examples
//!
//! ```
//! use spillway::RateLimiter;
//! use spillway_tower::{acquire, TokioClock};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), spillway::RateLimiterError> {
//! let limiter = RateLimiter::bursty_with_clock(5.0, TokioClock::new())?;
//! assert_eq!(acquire(&limiter, 1).await, Duration::ZERO);
//! assert_eq!(acquire(&limiter, 1).await, Duration::from_millis(200));
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

/// The crate's README (the one crates.io shows), compiled as doctests.
#[cfg(all(doctest, feature = "axum"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod accepts;
mod active;
mod blocking;
mod clock;
mod entry;
pub mod grpc;
pub mod keys;
pub mod protect;
mod rate_limiter;

pub use accepts::{
    AcceptLimit, AcceptsState, AtCapacity, DetachedStream, HeldPlace, LimitedListener,
    LimitedStream,
};
pub use active::acquire_active;
pub use blocking::{warn_if_in_runtime, warn_on_blocking_waits};
pub use clock::TokioClock;
pub use entry::{admit_owned, enter};
#[allow(deprecated)]
pub use protect::Spillway;
pub use protect::{
    admitted_fields, grpc_resource_exhausted, too_many_requests, too_many_requests_with,
    RateLimitFields, ResponseBody, ResponseFuture, SpillwayLayer, SpillwayService,
};
pub use rate_limiter::{acquire, try_acquire_within};
