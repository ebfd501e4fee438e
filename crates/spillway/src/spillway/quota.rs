//! The quota a refusal advertises, looked up from the rule that refused it.

use super::Spillway;
use crate::block::{BlockError, BlockKind};
use crate::keyed::ResourceKeyed;
use crate::quota::{keyed_policy_name, refusal_quota, Quota};

impl Spillway {
    /// The quota `err` can honestly advertise to the client it refused (what the IETF
    /// `RateLimit-Policy` and `RateLimit` fields say: the tower layer's
    /// [`too_many_requests`](https://docs.rs/spillway-tower) writes them from this), or `None`
    /// where the refusal is not a client's quota:
    ///
    /// | refusal | quota | unit | window |
    /// |---|---|---|---|
    /// | flow QPS rule, reject or warm-up | what the rule allows now (a warm-up's current allowance) | requests | 1 s |
    /// | flow QPS rule, throttle | `count` | requests | `stat_duration`, when whole seconds |
    /// | flow QPS rule, warm-up throttle | the rate it paces at now (a warm-up's current one) | requests | 1 s |
    /// | flow concurrency rule | `count` | concurrent requests | none |
    /// | flow rule with a `relate` or `chain` strategy | none (another resource's count) | | |
    /// | per-key QPS rule | the key's limit (its exception's, or the rule's `count`) | requests | `duration` |
    /// | per-key concurrency rule | the key's limit | concurrent requests | none |
    /// | adaptive limit, Dubbo `executes` and `actives` | the limit | concurrent requests | none |
    /// | Dubbo `tps` | its rate | requests | none |
    /// | system QPS / concurrency check | its threshold | requests (1 s) / concurrent requests | |
    /// | system RT, load and CPU checks, breakers, cluster limits, caps | none | | |
    ///
    /// Quotas are whole units, rounded down. The policy is named after the rule, or the check
    /// where no rule has an id; a per-key rule whose id a flow rule on the same resource has
    /// too (`per_second` names both after the resource) is named `"<id> per key"`, here and in
    /// [`EntryBuilder::quotas`](crate::EntryBuilder::quotas). A rule reloaded between the refusal and this call is read as it
    /// is now; a rule removed since gives `None`.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::{Behavior, FlowRule};
    /// use spillway::{ManualClock, QuotaUnit, Spillway};
    /// use std::time::Duration;
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// // 10 a second once warm, a third of that cold.
    /// let rule = FlowRule::qps("search", "GET /search", 10.0)
    ///     .with_behavior(Behavior::warm_up(Duration::from_secs(10)));
    /// spillway.load_flow_rules(vec![rule])?;
    /// let mut passed = 0;
    /// let err = loop {
    ///     match spillway.entry("GET /search").enter() {
    ///         Ok(_entry) => passed += 1,
    ///         Err(err) => break err,
    ///     }
    /// };
    /// let quota = spillway.refusal_quota(&err).unwrap();
    /// // The quota is what the rule allows now, not its warm count.
    /// assert_eq!((passed, quota.quota, quota.unit), (3, 3, QuotaUnit::Requests));
    /// assert_eq!(quota.window, Some(Duration::from_secs(1)));
    /// assert!(err.to_string().contains("observed 3 against threshold 3.33,"));
    /// # Ok::<(), spillway::flow::FlowRuleError>(())
    /// ```
    pub fn refusal_quota(&self, err: &BlockError) -> Option<Quota> {
        match (err.kind(), err.rule_id()) {
            (BlockKind::Flow, Some(id)) => self
                .with_flow_rule(id, |rule| {
                    refusal_quota(
                        err,
                        Some((rule.grade, &rule.behavior, &rule.strategy)),
                        None,
                    )
                })
                .flatten(),
            (BlockKind::Keyed, Some(id)) => {
                let set = self.inner.core.sets.get::<ResourceKeyed>();
                let installed = set.find(id)?;
                let flow = self.inner.core.flow.load();
                let shared = flow
                    .by_resource
                    .get(&installed.rule.resource)
                    .is_some_and(|rules| rules.rules.iter().any(|rule| rule.rule.id == id));
                let name = keyed_policy_name(id, shared);
                let rule = (installed.rule.grade, installed.rule.duration, name.as_str());
                refusal_quota(err, None, Some(rule))
            }
            _ => refusal_quota(err, None, None),
        }
    }
}
