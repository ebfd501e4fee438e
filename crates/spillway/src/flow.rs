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
//!
//! Rules are loaded with [`Spillway::load_flow_rules`](crate::Spillway::load_flow_rules) and checked
//! on every entry; see that method for an example.
//!
//! # Window accuracy
//!
//! A QPS reject rule reads the sliding second window, so a one-second span that straddles its
//! buckets can hold more than `count`. The admissions in any `buckets` consecutive buckets are at
//! most `count`, and a one-second span overlaps at most `buckets + 1` of them, so no span holds
//! more than `2 * count`. Bursts timed at bucket edges reach that bound with any bucket count
//! (`count` at the end of a bucket, `count` again as soon as that bucket leaves the window, within
//! `(buckets - 1) / buckets` s); uniform arrivals faster than `count` get exactly `count` in every
//! one-second span, for Sentinel's 2 x 500 ms window and for 10 x 100 ms alike. The crate's
//! `tests/window_accuracy.rs` checks all three statements. A finer window does not lower the
//! worst case; it shortens how long a burst is held back. Where a hard bound matters, a throttle
//! (leaky bucket) rule paces calls and never admits two within one `1 / count` interval.
//!
//! # Racing callers
//!
//! Sentinel's QPS check reads the pass QPS and the pass is added later, so threads that check at
//! the same moment all pass on the same reading, and a busy resource admits a little more than
//! `count`. In the entry path, a QPS reject rule that every caller meets (`limit_app = default`,
//! strategy `direct`) instead counts the passes it admits itself, per bucket of the second
//! window, and admits by compare-and-swap: `(int) passQps + acquire <= count` holds for every
//! admission, however the threads interleave (tested with 8 threads, and with loom). Its counts
//! start from the node's window when the rule is first used, and an admission a later rule
//! refuses is given back. A refusal writes nothing to them. Rules read by origin, entrance or
//! relation read the node's window, as Sentinel's do, and so does [`QpsReject::check`] on its
//! own. One more difference follows: such a rule counts an entry when it checks it, so an entry
//! that then waits in a throttle rule's queue counts in the bucket of its check, where the
//! node's window counts it in the bucket it is admitted in.
//!
//! # Reloads
//!
//! A resource keeps up to four admission rings, one for each QPS reject rule that every caller
//! meets; a fifth such rule reads the window, as Sentinel's do. A rule that a reload leaves
//! unchanged (same id, same fields) keeps its ring and so its counts. A new rule takes a free ring
//! and starts it over from the node's window the first time it checks an entry. An entry that
//! raced the reload may still count on a ring that changed hands, so the new rule can see one
//! pass more or fewer per such entry, once.
//!
//! When every rule of a resource is a QPS reject rule that every caller meets (at most four),
//! the resource also keeps a copy of their numbers (count, ring, id) under a sequence number, and
//! an entry reads that copy instead of the rule set: no reference count is taken or given back.
//! A reload closes the copy, installs the rules and writes the copy again; an entry that finds it
//! closed, or sees it change while it reads, checks the rule set instead. Either way the next
//! entry after [`load_flow_rules`](crate::Spillway::load_flow_rules) returns sees the new rules,
//! on any thread that is ordered after the reload.

//! # Shadow mode
//!
//! A rule in shadow mode ([`FlowRule::with_shadow`]) is checked with the others, but refuses
//! nothing: where it would refuse an entry, it counts the refusal on itself
//! ([`Spillway::flow_rule_stats`](crate::Spillway::flow_rule_stats)) and names itself on the
//! admitted entry ([`Entry::shadow_rule`](crate::Entry::shadow_rule)); the rules in force still
//! decide. The resource's statistics count what happened (a pass), the rule's what it would have
//! done. A shadow throttle makes nobody wait but keeps its schedule, so it refuses exactly what
//! it would in force; a shadow QPS rule reads the node's window and a shadow concurrency rule the
//! node's in-flight count, since they did not hold back what they see. A prioritized entry does
//! not borrow from a shadow rule. Switching a rule into or out of shadow mode is a change of the
//! rule: it starts with fresh state (a warm-up starts cold), but its count of shadow refusals
//! stays with its id.

mod admission;
mod compiled;
mod concurrency;
mod decision;
mod gate;
mod installed;
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

pub(crate) use admission::{whole_count, AdmissionRing, Admitted};
pub(crate) use compiled::{Controller, RelatedNode, ResourceRules};
pub use compiled::{FlowRuleState, FlowRuleStats};
pub(crate) use concurrency::{try_acquire_on, try_increment};
pub use decision::Decision;
pub(crate) use gate::GateRead;
pub(crate) use installed::InstalledRules;
pub use reject::QpsReject;
pub use rule::{
    Behavior, FlowRule, Grade, LimitApp, Strategy, DEFAULT_COLD_FACTOR, DEFAULT_OCCUPY_TIMEOUT,
};
pub(crate) use rule_set::FlowRuleSet;
pub use schedule::Slot;
pub use stats::FlowStats;
pub use throttle::Throttle;
pub use validate::{validate_flow_rules, FlowRuleError, MAX_OCCUPY_TIMEOUT};
pub use validate::{MAX_QUEUEING_RULES_PER_RESOURCE, MAX_RULES_PER_RESOURCE};
pub use warm_up::WarmUp;
pub use warm_up_throttle::WarmUpThrottle;

#[cfg(all(test, not(spillway_loom)))]
mod tests;

#[cfg(all(test, spillway_loom))]
mod loom_admission;
#[cfg(all(test, spillway_loom))]
mod loom_concurrency;
#[cfg(all(test, spillway_loom))]
mod loom_gate;
#[cfg(all(test, spillway_loom))]
mod loom_schedule;
