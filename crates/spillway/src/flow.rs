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

mod compiled;
mod concurrency;
mod decision;
mod reject;
mod rule;
mod rule_set;
mod schedule;
mod stats;
mod throttle;
mod validate;
mod warm_up;
mod warm_up_throttle;

pub use concurrency::ConcurrencyLimit;

pub(crate) use compiled::{Controller, ResourceRules};
pub(crate) use concurrency::try_acquire_on;
pub use decision::Decision;
pub use reject::QpsReject;
pub use rule::{
    Behavior, FlowRule, Grade, LimitApp, Strategy, DEFAULT_COLD_FACTOR, DEFAULT_OCCUPY_TIMEOUT,
};
pub(crate) use rule_set::FlowRuleSet;
pub use rule_set::{MAX_QUEUEING_RULES_PER_RESOURCE, MAX_RULES_PER_RESOURCE};
pub(crate) use schedule::Slot;
pub use stats::FlowStats;
pub use throttle::Throttle;
pub use validate::{validate_flow_rules, FlowRuleError, MAX_OCCUPY_TIMEOUT};
pub use warm_up::WarmUp;
pub use warm_up_throttle::WarmUpThrottle;

#[cfg(all(test, not(spillway_loom)))]
mod tests;
