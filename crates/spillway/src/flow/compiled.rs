//! Rules ready to check: each with its controller, grouped per resource in Sentinel's order.

use super::admission::{whole_count, RINGS};
use super::gate::{GateRule, GateRules};
use super::{
    Behavior, FlowRule, Grade, LimitApp, QpsReject, Strategy, Throttle, WarmUp, WarmUpThrottle,
};

const _: () = assert!(RINGS <= 8, "ring sets are bit sets of a u8");
use crate::stats::ResourceNode;
use crate::sync::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// The controller of one rule. Concurrency rules have none: they check and count on the exact
/// in-flight counter of the node they select.
#[derive(Debug)]
pub(crate) enum Controller {
    /// A QPS reject rule, and the resource's admission ring that counts its admissions (for a
    /// rule that every caller meets, while the resource has a ring to spare).
    Reject(QpsReject, Option<u8>),
    Concurrency {
        count: f64,
    },
    WarmUp(WarmUp),
    Throttle(Throttle),
    WarmUpThrottle(WarmUpThrottle),
}

impl Controller {
    /// The controller of `rule`; a QPS reject rule counts its admissions on `ring`, if any.
    pub(crate) fn new(rule: &FlowRule, ring: Option<u8>) -> Self {
        if rule.grade == Grade::Concurrency {
            return Controller::Concurrency { count: rule.count };
        }
        match rule.behavior {
            Behavior::Reject => Controller::Reject(QpsReject::new(rule.count), ring),
            Behavior::WarmUp {
                period,
                cold_factor,
            } => Controller::WarmUp(WarmUp::new(rule.count, period, cold_factor)),
            Behavior::Throttle {
                max_queueing_time,
                stat_duration,
            } => Controller::Throttle(match super::throttle::stat_duration_ms(stat_duration) {
                Some(stat) => Throttle::per(rule.count, stat, max_queueing_time),
                // Validation refuses such a rule; unvalidated, it is per second.
                None => Throttle::new(rule.count, max_queueing_time),
            }),
            Behavior::WarmUpThrottle {
                period,
                cold_factor,
                max_queueing_time,
            } => Controller::WarmUpThrottle(WarmUpThrottle::new(
                rule.count,
                period,
                cold_factor,
                max_queueing_time,
            )),
        }
    }

    /// The admission ring this controller counts on.
    pub(crate) fn ring(&self) -> Option<u8> {
        match self {
            Controller::Reject(_, ring) => *ring,
            _ => None,
        }
    }

    /// Whether `rule` may count its admissions on a ring: a QPS reject rule that every caller
    /// meets (`limit_app = default`, strategy `direct`), whose admissions are all the node's,
    /// and that is in force (a shadow rule admits what it would refuse: it reads the window).
    pub(crate) fn counts_on_ring(rule: &FlowRule) -> bool {
        rule.grade == Grade::Qps
            && !rule.shadow
            && rule.behavior == Behavior::Reject
            && rule.limit_app == LimitApp::Default
            && matches!(rule.strategy, super::Strategy::Direct)
    }
}

impl Controller {
    /// What the controller holds now: the QPS a warm-up allows and the wait a pacer queues.
    pub(crate) fn state(&self, now_nanos: u64) -> (Option<f64>, Option<std::time::Duration>) {
        match self {
            Controller::Reject(..) | Controller::Concurrency { .. } => (None, None),
            Controller::WarmUp(warm_up) => (Some(warm_up.allowed_qps()), None),
            Controller::Throttle(throttle) => (None, Some(throttle.queue_wait(now_nanos))),
            Controller::WarmUpThrottle(both) => {
                (Some(both.allowed_qps()), Some(both.queue_wait(now_nanos)))
            }
        }
    }
}

/// What a rule counts of its own.
#[derive(Debug, Default)]
pub(crate) struct RuleCounters {
    shadow_refusals: AtomicU64,
}

impl RuleCounters {
    /// Counts a refusal the rule, in shadow mode, did not make.
    pub(crate) fn count_shadow_refusal(&self) {
        self.shadow_refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// The rule's statistics.
    pub(crate) fn stats(&self) -> FlowRuleStats {
        FlowRuleStats {
            shadow_refusals: self.shadow_refusals.load(Ordering::Relaxed),
        }
    }
}

/// What a flow rule has counted of its own (see [`Spillway::flow_rule_stats`](crate::Spillway::flow_rule_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlowRuleStats {
    /// Entries the rule would have refused in shadow mode (see
    /// [`FlowRule::with_shadow`](super::FlowRule::with_shadow)) since a rule of its id was
    /// first loaded. Counted once per entry and rule, whatever the entry's permit count.
    pub shadow_refusals: u64,
}

/// What a flow rule's controller holds now (see
/// [`Spillway::flow_rule_state`](crate::Spillway::flow_rule_state)).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct FlowRuleState {
    /// For a warm-up rule: the QPS its bucket allows at its fill as of its last check, from
    /// `count / cold_factor` cold up to `count` warm.
    pub allowed_qps: Option<f64>,
    /// For a pacing rule: how long the calls already queued still wait (zero when none does).
    pub queue_wait: Option<std::time::Duration>,
    /// Entries the rule would have refused in shadow mode (as in [`FlowRuleStats`]).
    pub shadow_refusals: u64,
}

/// One rule, ready to check.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    pub(crate) rule: FlowRule,
    pub(crate) id: &'static str,
    /// The id's interned number.
    pub(crate) id_number: u32,
    /// Shared with the previous rule set when the rule is unchanged, so its state survives.
    pub(crate) controller: Arc<Controller>,
    /// The rule's counters, kept across reloads while a rule of the same id stays.
    pub(crate) counters: Arc<RuleCounters>,
    /// For `relate`: the resource whose statistics are read (weak, so that rules relating two
    /// resources to each other do not keep both alive forever).
    pub(crate) related: Option<Weak<dyn RelatedNode>>,
}

/// What a `relate` rule reads of the resource it names: its statistics. (A resource, which
/// holds its rules, implements it; the rules hold it only through this.)
pub(crate) trait RelatedNode: Send + Sync {
    /// The resource's statistics node.
    fn node(&self) -> &ResourceNode;
}

/// Every rule of one resource, in Sentinel's order (rules for a named origin, then `other`, then
/// `default`; in load order within each).
#[derive(Debug, Default)]
pub(crate) struct ResourceRules {
    pub(crate) rules: Vec<CompiledRule>,
    /// Origins that have a rule of their own on this resource (for `other`).
    pub(crate) named_origins: Vec<String>,
    /// When every rule is a QPS reject rule that every caller meets (`limit_app = default`,
    /// strategy `direct`) and counts on a ring, at most as many as an entry can count: the
    /// numbers the entry path checks them with, on a short path of their own.
    pub(crate) gate: Option<GateRules>,
}

impl ResourceRules {
    pub(crate) fn new(mut rules: Vec<CompiledRule>) -> Self {
        rules.sort_by_key(|r| match r.rule.limit_app {
            LimitApp::Origin(_) => 0,
            LimitApp::Other => 1,
            LimitApp::Default => 2,
        });
        let named_origins = rules
            .iter()
            .filter_map(|r| match &r.rule.limit_app {
                LimitApp::Origin(origin) => Some(origin.clone()),
                _ => None,
            })
            .collect();
        let gate_rules: Option<Vec<GateRule>> = rules
            .iter()
            .map(|r| match &*r.controller {
                Controller::Reject(reject, Some(ring)) if Controller::counts_on_ring(&r.rule) => {
                    Some(GateRule {
                        count: reject.count(),
                        whole_count: whole_count(reject.count()),
                        ring: *ring,
                        id: r.id_number,
                    })
                }
                _ => None,
            })
            .collect();
        let gate = gate_rules.and_then(|gate_rules| GateRules::new(&gate_rules));
        Self {
            rules,
            named_origins,
            gate,
        }
    }

    /// The controller that counts on ring `ring`, if any.
    pub(crate) fn ring_user(&self, ring: u8) -> Option<&Arc<Controller>> {
        self.rules
            .iter()
            .map(|r| &r.controller)
            .find(|controller| controller.ring() == Some(ring))
    }

    /// Sentinel's `isOtherOrigin`: a non-empty origin with no rule of its own here.
    pub(crate) fn is_other_origin(&self, origin: &str) -> bool {
        !origin.is_empty() && !self.named_origins.iter().any(|o| o == origin)
    }

    /// Whether a rule names `origin` (`limit_app`).
    pub(crate) fn names_origin(&self, origin: &str) -> bool {
        self.named_origins.iter().any(|o| o == origin)
    }

    /// Whether a `chain` rule names `entrance`.
    pub(crate) fn names_entrance(&self, entrance: &str) -> bool {
        self.rules.iter().any(|r| {
            matches!(&r.rule.strategy, Strategy::Chain { entrance: named } if named == entrance)
        })
    }
}
