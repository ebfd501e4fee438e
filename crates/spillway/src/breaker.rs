//! Circuit breakers (熔断): Sentinel's degrade rules, with a sliding statistics window and a
//! half-open state that cannot wedge.
//!
//! A [`BreakerRule`] watches a resource's completions (slow calls, or errors) and, when they
//! cross its threshold, opens: calls to the resource are refused at once for `retry_timeout`,
//! so a failing dependency is given room to recover and callers fail fast instead of piling up.
//! Then probes test the water, and the breaker closes when they succeed. See [`BreakerRule`] for
//! the states and [`CircuitBreaker`] for the state machine on its own.
//!
//! Load rules with [`Spillway::load_breaker_rules`](crate::Spillway::load_breaker_rules); a
//! breaker is checked after the resource's flow rules, and every completion of the resource
//! (its RT, and whether it was marked as an error) feeds it. Listen to state changes with
//! [`Spillway::on_breaker_state_change`](crate::Spillway::on_breaker_state_change).
//!
//! # Deviations from Sentinel
//!
//! - The statistics window slides (`stat_buckets` buckets, at least 2) where Sentinel's single
//!   bucket forgets everything at each interval's end.
//! - Half-open admits `half_open_probes` probes (Sentinel: one) and only their outcomes decide:
//!   in Sentinel any call that completes while half-open decides, even one admitted long before.
//! - A probe refused by a later rule or abandoned gives its place back, and a probe that does
//!   not complete within `probe_timeout` counts as failed; Sentinel's breaker stays half-open
//!   for good when its probe never completes.
//! - RTs are compared in microseconds (Sentinel: milliseconds).

mod circuit;
mod rule;
mod set;
mod step;
mod validate;

pub(crate) use circuit::Listeners;
pub use circuit::{BreakerBlock, BreakerEvent, BreakerListener, BreakerState, CircuitBreaker};
pub use rule::{
    BreakerRule, BreakerStrategy, DEFAULT_MIN_REQUEST_AMOUNT, DEFAULT_STAT_BUCKETS,
    DEFAULT_STAT_INTERVAL,
};
pub(crate) use set::{BreakerRuleSet, ResourceBreakers};
pub use validate::{validate_breaker_rules, BreakerRuleError, MAX_BREAKERS_PER_RESOURCE};

#[cfg(all(test, not(spillway_loom)))]
mod tests;
