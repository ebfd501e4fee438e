//! Dubbo's limits: TPS per service or method ([`TpsLimiter`]) and `executes`
//! ([`ExecuteLimiter`]), with Dubbo's semantics where they are sound and without its races.
//!
//! `actives` (waiting for a slot) and `accepts` (a connection cap) need a runtime to wait on and
//! a listener; they belong with the tokio crate and are not here yet.

mod executes;
mod tps;

#[cfg(all(test, not(spillway_loom)))]
mod tests;

pub use executes::{
    ExecuteKey, ExecuteKeyPermit, ExecuteLimiter, ExecutePermit, DEFAULT_MAX_EXECUTE_KEYS,
};
pub use tps::{TpsConfig, TpsLimiter, TpsState, DEFAULT_MAX_TPS_KEYS, DEFAULT_TPS_INTERVAL};
