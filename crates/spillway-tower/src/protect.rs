//! tower middleware: one layer puts a service's requests through spillway.
//!
//! [`SpillwayLayer`] wraps any `Service<http::Request<B>>` (an axum router, a tonic server, a
//! hyper service) in [`SpillwayService`]: every request enters a spillway resource in `call`, waits
//! on a tokio timer if a pacing rule queues it (in the [`ResponseFuture`], never in
//! `poll_ready`), and is refused with a ready response if a check blocks it. The entry is held
//! by the response body ([`ResponseBody`]) until the body ends or is dropped, so a streaming
//! response counts as in flight while it streams, and an idle connection holds nothing. A call
//! whose reader took more than a quarter of its time between frames (with the time the inner
//! service says it waited on its caller, [`CallerWait`]) was paced by its caller: it gives an
//! adaptive limit no latency sample and a slow-call breaker no verdict.
//!
//! Unlike tower's `RateLimit`, the layer and the services it makes are `Clone` and share one
//! [`spillway::Spillway`]: a limit holds across every connection. Unlike `ConcurrencyLimit`, a
//! concurrency rule refuses at once instead of queueing without bound.
//!
//! A flow rule in shadow mode refuses nothing through the layer either: the request goes on,
//! and its request and response carry a [`ShadowRefusal`] naming the rule that would have
//! refused it.
//!
//! # Examples
//!
//! An axum router with a QPS limit on one route:
//!
//! ```
//! use axum::routing::get;
//! use axum::Router;
//! use spillway::flow::FlowRule;
//! use spillway_tower::{SpillwayLayer, TokioClock};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
//! spillway.load_flow_rules(vec![FlowRule::qps("hello-qps", "hello", 1.0)])?;
//! let app = Router::new()
//!     .route("/hello", get(|| async { "hi" }))
//!     .layer(SpillwayLayer::new(spillway).fixed_resource("hello"));
//!
//! let request = || http::Request::get("/hello").body(axum::body::Body::empty()).unwrap();
//! assert_eq!(app.clone().oneshot(request()).await?.status(), 200);
//! let blocked = app.clone().oneshot(request()).await?;
//! assert_eq!(blocked.status(), 429);
//! assert_eq!(blocked.headers()["ratelimit-policy"], r#""hello-qps";q=1;w=1"#);
//! # Ok(())
//! # }
//! ```

mod admit;
mod blocked;
mod body;
mod caller_wait;
mod claims;
mod config;
mod decide;
mod dropped;
mod fields;
mod future;
mod layer;
mod layer_claims;
mod missing;
mod route_check;
mod service;
mod shadow;
mod verdict;

pub use blocked::{
    deadline_exceeded, grpc_resource_exhausted, too_many_requests, too_many_requests_with, Blocked,
};
pub use body::ResponseBody;
pub use caller_wait::CallerWait;
pub use claims::{lowest_criticality, parse_millis};
pub use dropped::OnDropped;
pub use fields::{admitted_fields, RateLimitFields};
pub use future::ResponseFuture;
pub use layer::SpillwayLayer;
pub use missing::{MissingKey, OnMissingKey};
#[allow(deprecated)]
pub use service::Spillway;
pub use service::SpillwayService;
pub use shadow::{ShadowBlock, ShadowRefusal};
pub use verdict::Verdict;
