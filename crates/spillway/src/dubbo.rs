//! Dubbo's limits: TPS per service or method ([`TpsLimiter`]), `executes` ([`ExecuteLimiter`])
//! and `actives` ([`ActiveLimiter`]), with Dubbo's semantics where they are sound and without its
//! races.
//!
//! The fourth, `accepts` (a cap on accepted connections), wraps a listener and lives with the
//! tokio crate: `spillway_tower::LimitedListener`.

mod actives;
mod executes;
mod key_map;
mod tps;

#[cfg(all(test, not(spillway_loom)))]
mod tests;

pub use actives::{
    ActiveAdmission, ActiveKey, ActiveLimiter, ActiveLimiterBuilder, ActivePermit, ActiveState,
    ActiveWait, DEFAULT_MAX_ACTIVE_KEYS, DEFAULT_MAX_ACTIVE_WAITERS,
};
pub use executes::{
    ExecuteKey, ExecuteKeyPermit, ExecuteLimiter, ExecutePermit, DEFAULT_MAX_EXECUTE_KEYS,
};
pub use tps::{
    TpsConfig, TpsKey, TpsLimiter, TpsState, DEFAULT_MAX_TPS_KEYS, DEFAULT_TPS_INTERVAL,
};
