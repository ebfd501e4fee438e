//! What an entry meets now, read without entering: the quota policies its rules hold for it
//! and what is left of each, for the rate-limit fields of an admitted response.

use super::{EntryBuilder, TrafficType};
use crate::adaptive::InstalledAdaptive;
use crate::clock::Clock;
use crate::flow::{whole_count, Controller, LimitApp, Strategy};
use crate::keyed::ResourceKeyed;
use crate::kinds::Slots;
use crate::quota::{keyed_policy_name, Quota, QuotaUnit};
use crate::resource::ResourceInner;
use crate::sync::Ordering;
use std::time::Duration;

impl EntryBuilder<'_> {
    /// The quota policies an entry of this builder meets now, each with what is left of it
    /// ([`Quota::remaining`]), read without entering: nothing is counted, reserved or
    /// registered (a resource that does not exist yet has none). This is what a well-behaved
    /// client can be told on an admitted response, so that it slows down before it is refused
    /// (the tower layer's `ratelimit_on_admitted` writes it as the IETF `RateLimit` fields).
    ///
    /// | rule | quota | remaining |
    /// |---|---|---|
    /// | flow QPS rule, reject or warm-up | what it allows now a second | less the passes of the current second |
    /// | flow concurrency rule | its count, in concurrent requests | less the calls in flight |
    /// | per-key QPS rule, reject (for the entry's key) | the key's limit (its exception's) per `duration` | the key's tokens, at most the limit (a burst's extra is not advertised) |
    /// | per-key concurrency rule | the key's limit, in concurrent requests | less the key's calls in flight |
    /// | the resource's adaptive limit (and the inbound one, for inbound traffic) | the limit in force, in concurrent requests | less the calls in flight |
    ///
    /// Left out: rules in shadow mode; flow rules for a named origin or `other`, or with a
    /// `relate` or `chain` strategy (another node's count: not this caller's quota); pacing
    /// rules (they queue calls rather than refuse them); breakers, system checks, cluster rules
    /// and Dubbo's limits. Read just after an entry was admitted, the entry is among what is
    /// counted. Quotas are whole units, rounded down; a warm-up rule's allowance is as of its
    /// last check. A per-key rule whose id a flow rule on the resource has too is named
    /// `"<id> per key"`, as its refusals name it.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::FlowRule;
    /// use spillway::keyed::KeyedRule;
    /// use spillway::{ManualClock, QuotaUnit, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// spillway.load_flow_rules(vec![FlowRule::per_second("GET /search", 10)])?;
    /// spillway.load_keyed_rules(vec![KeyedRule::per_second("GET /search", 3).with_id("per-user")])?;
    /// let _first = spillway.entry("GET /search").key("alice").enter()?;
    /// let quotas = spillway.entry("GET /search").key("alice").quotas();
    /// let left: Vec<_> = quotas.iter().map(|q| (q.policy.as_str(), q.quota, q.remaining)).collect();
    /// assert_eq!(left, [("GET /search", 10, 9), ("per-user", 3, 2)]);
    /// assert_eq!(quotas[0].unit, QuotaUnit::Requests);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn quotas(&self) -> Vec<Quota> {
        let Some(resource) = self.existing() else {
            return Vec::new();
        };
        let inner = &*resource.inner;
        let now = inner.clock.now_nanos();
        let mut quotas = Vec::new();
        flow_quotas(inner, now, &mut quotas);
        keyed_quotas(inner, self.keys, now, &mut quotas);
        adaptive_quota(&inner.slots, &mut quotas);
        if self.traffic == TrafficType::Inbound {
            adaptive_quota(&inner.core.inbound_rules, &mut quotas);
        }
        quotas
    }
}

/// The resource's flow rules that every caller meets, on its own node.
fn flow_quotas(inner: &ResourceInner, now: u64, out: &mut Vec<Quota>) {
    let rules = inner.flow.load();
    let Some(rules) = rules.as_ref() else {
        return;
    };
    let node = &inner.node;
    let second = Some(Duration::from_secs(1));
    for compiled in &rules.rules {
        let rule = &compiled.rule;
        if rule.shadow
            || rule.limit_app != LimitApp::Default
            || !matches!(rule.strategy, Strategy::Direct)
        {
            continue;
        }
        // The pass QPS truncated, as the checks read it.
        let passed = || node.pass_qps(now).max(0.0) as u64;
        let quota = match &*compiled.controller {
            Controller::Reject(reject, ring) => {
                let quota = Quota::new(compiled.id, reject.count(), QuotaUnit::Requests, second);
                let whole = whole_count(reject.count());
                // What the check counts: the rule's own ring of admissions when it keeps one.
                let counted = ring
                    .and_then(|ring| inner.flow.ring(ring).passed(node.second_window(), now))
                    .unwrap_or_else(passed);
                quota.with_remaining(whole.saturating_sub(counted))
            }
            Controller::WarmUp(warm_up) => {
                let allowed = warm_up.allowed_qps();
                let quota = Quota::new(compiled.id, allowed, QuotaUnit::Requests, second);
                let whole = quota.quota;
                quota.with_remaining(whole.saturating_sub(passed()))
            }
            Controller::Concurrency { count } => {
                let quota = Quota::new(compiled.id, *count, QuotaUnit::ConcurrentRequests, None);
                let in_flight = node.limited().load(Ordering::Acquire);
                let whole = quota.quota;
                quota.with_remaining(whole.saturating_sub(in_flight))
            }
            Controller::Throttle(_) | Controller::WarmUpThrottle(_) => continue,
        };
        out.push(quota);
    }
}

/// The resource's per-key rules whose key the entry has. A remaining count is at most the
/// key's limit: a bucket with a burst holds more, but the quota advertised is the limit.
fn keyed_quotas(inner: &ResourceInner, keys: crate::keyed::Keys, now: u64, out: &mut Vec<Quota>) {
    if !keys.any() {
        return;
    }
    let keyed = inner.slots.load::<ResourceKeyed>();
    let Some(keyed) = keyed.as_ref() else {
        return;
    };
    let flow = inner.flow.load();
    let flow_has = |id: &str| {
        flow.as_ref()
            .is_some_and(|rules| rules.rules.iter().any(|rule| rule.rule.id == id))
    };
    for installed in &keyed.rules {
        let Some(key) = keys.get(installed.rule.param) else {
            continue;
        };
        let Some((limit, remaining)) = installed.limiter.remaining(key, now) else {
            continue;
        };
        let (unit, window) = match installed.rule.grade {
            crate::flow::Grade::Qps => (QuotaUnit::Requests, Some(installed.rule.duration)),
            crate::flow::Grade::Concurrency => (QuotaUnit::ConcurrentRequests, None),
        };
        let id = installed.rule.id.as_str();
        let name = keyed_policy_name(id, flow_has(id));
        let quota = Quota::new(&name, limit as f64, unit, window);
        out.push(quota.with_remaining(remaining.min(limit)));
    }
}

/// The adaptive limit in `slots`, if it has one.
fn adaptive_quota(slots: &Slots, out: &mut Vec<Quota>) {
    let adaptive = slots.load::<InstalledAdaptive>();
    let Some(installed) = adaptive.as_ref() else {
        return;
    };
    // One reading of the limiter's state: the limit and the calls in flight together.
    let (limit, in_flight) = installed.limiter.limit_and_in_flight();
    let quota = Quota::new(
        &installed.rule.id,
        f64::from(limit),
        QuotaUnit::ConcurrentRequests,
        None,
    );
    out.push(quota.with_remaining(u64::from(limit.saturating_sub(in_flight))));
}
