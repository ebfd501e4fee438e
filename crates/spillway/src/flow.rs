//! Flow control: Sentinel's flow rules and the controllers behind them.
//!
//! A [`FlowRule`] limits a resource by QPS or by concurrency. Over the limit, a QPS rule rejects
//! ([`QpsReject`]), warms up ([`WarmUp`]), paces calls like a leaky bucket ([`Throttle`]) or both
//! ([`WarmUpThrottle`]); a concurrency rule rejects, exactly ([`ConcurrencyLimit`]).
//!
//! Every controller has Sentinel 1.8.9's semantics, down to its integer truncations, and is
//! usable on its own against any [`FlowStats`] (a mock in tests, a
//! [`ResourceNode`](crate::stats::ResourceNode) in the entry path). A check never sleeps: it
//! returns a [`Decision`] (pass, wait so long, or block).

mod concurrency;
mod decision;
mod reject;
mod rule;
mod stats;
mod throttle;
mod validate;
mod warm_up;
mod warm_up_throttle;

pub use concurrency::ConcurrencyLimit;
pub use decision::Decision;
pub use reject::QpsReject;
pub use rule::{
    Behavior, FlowRule, Grade, LimitApp, Strategy, DEFAULT_COLD_FACTOR, DEFAULT_OCCUPY_TIMEOUT,
};
pub use stats::FlowStats;
pub use throttle::Throttle;
pub use validate::{validate_flow_rules, FlowRuleError, MAX_OCCUPY_TIMEOUT};
pub use warm_up::WarmUp;
pub use warm_up_throttle::WarmUpThrottle;

#[cfg(all(test, not(spillway_loom)))]
mod tests;
