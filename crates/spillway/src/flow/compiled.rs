//! Rules ready to check: each with its controller, grouped per resource in Sentinel's order.

use super::admission::AdmissionRing;
use super::{Behavior, FlowRule, Grade, LimitApp, QpsReject, Throttle, WarmUp, WarmUpThrottle};
use crate::resource::ResourceInner;
use std::sync::{Arc, Weak};

/// The controller of one rule. Concurrency rules have none: they check and count on the exact
/// in-flight counter of the node they select.
#[derive(Debug)]
pub(crate) enum Controller {
    /// A QPS reject rule, and the admissions it counts on the resource's own node.
    Reject(QpsReject, AdmissionRing),
    Concurrency {
        count: f64,
    },
    WarmUp(WarmUp),
    Throttle(Throttle),
    WarmUpThrottle(WarmUpThrottle),
}

impl Controller {
    pub(crate) fn new(rule: &FlowRule) -> Self {
        if rule.grade == Grade::Concurrency {
            return Controller::Concurrency { count: rule.count };
        }
        match rule.behavior {
            Behavior::Reject => {
                Controller::Reject(QpsReject::new(rule.count), AdmissionRing::new(rule.count))
            }
            Behavior::WarmUp {
                period,
                cold_factor,
            } => Controller::WarmUp(WarmUp::new(rule.count, period, cold_factor)),
            Behavior::Throttle { max_queueing_time } => {
                Controller::Throttle(Throttle::new(rule.count, max_queueing_time))
            }
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
}

/// One rule, ready to check.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    pub(crate) rule: FlowRule,
    pub(crate) id: &'static str,
    /// Shared with the previous rule set when the rule is unchanged, so its state survives.
    pub(crate) controller: Arc<Controller>,
    /// For `relate`: the resource whose statistics are read (weak, so that rules relating two
    /// resources to each other do not keep both alive forever).
    pub(crate) related: Option<Weak<ResourceInner>>,
}

/// Every rule of one resource, in Sentinel's order (rules for a named origin, then `other`, then
/// `default`; in load order within each).
#[derive(Debug, Default)]
pub(crate) struct ResourceRules {
    pub(crate) rules: Vec<CompiledRule>,
    /// Origins that have a rule of their own on this resource (for `other`).
    pub(crate) named_origins: Vec<String>,
    /// Every rule is a QPS reject rule that every caller meets (`limit_app = default`, strategy
    /// `direct`), at most as many as an entry can count: the entry path checks them on a short
    /// path of their own.
    pub(crate) only_direct_rejects: bool,
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
        let only_direct_rejects = rules.len() <= crate::entry::MAX_COUNTED
            && rules.iter().all(|r| {
                matches!(*r.controller, Controller::Reject(..))
                    && r.rule.limit_app == LimitApp::Default
                    && matches!(r.rule.strategy, super::Strategy::Direct)
            });
        Self {
            rules,
            named_origins,
            only_direct_rejects,
        }
    }

    /// Sentinel's `isOtherOrigin`: a non-empty origin with no rule of its own here.
    pub(crate) fn is_other_origin(&self, origin: &str) -> bool {
        !origin.is_empty() && !self.named_origins.iter().any(|o| o == origin)
    }
}
