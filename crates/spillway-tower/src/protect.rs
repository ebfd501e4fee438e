//! tower middleware: one layer puts a service's requests through spillway.
//!
//! [`SpillwayLayer`] wraps any `Service<http::Request<B>>` (an axum router, a tonic server, a
//! hyper service) in [`Spillway`]: every request enters a spillway resource in `call`, waits
//! on a tokio timer if a pacing rule queues it (in the [`ResponseFuture`], never in
//! `poll_ready`), and is refused with a ready response if a check blocks it. The entry is held
//! by the response body ([`ResponseBody`]) until the body ends or is dropped, so a streaming
//! response counts as in flight while it streams, and an idle connection holds nothing.
//!
//! Unlike tower's `RateLimit`, the layer and the services it makes are `Clone` and share one
//! [`spillway::Spillway`]: a limit holds across every connection. Unlike `ConcurrencyLimit`, a
//! concurrency rule refuses at once instead of queueing without bound.

mod blocked;
mod body;
mod config;
mod future;
mod layer;
mod service;

pub use blocked::{grpc_resource_exhausted, too_many_requests};
pub use body::ResponseBody;
pub use future::ResponseFuture;
pub use layer::SpillwayLayer;
pub use service::Spillway;
