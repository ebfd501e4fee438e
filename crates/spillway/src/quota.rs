//! The quota a refusal can honestly advertise: what the IETF `RateLimit-Policy` and `RateLimit`
//! fields (draft-ietf-httpapi-ratelimit-headers) say of it, decided in one place for every kind
//! of refusal ([`Spillway::refusal_quota`](crate::Spillway::refusal_quota)).

use crate::block::{BlockError, BlockKind};
use crate::flow::{Behavior, Grade, Strategy};
use crate::system::SystemCheck;
use std::time::Duration;

/// What a quota counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaUnit {
    /// Requests in a window (the fields' default unit: `qu` is left out).
    Requests,
    /// Requests in flight at once (`qu="concurrent-requests"`): such a quota has no window, and
    /// no time at which it frees (a place frees when a call ends).
    ConcurrentRequests,
}

impl QuotaUnit {
    /// The unit's name in the fields' `qu` parameter, or `None` for requests (the default,
    /// never sent).
    pub fn as_qu(self) -> Option<&'static str> {
        match self {
            QuotaUnit::Requests => None,
            QuotaUnit::ConcurrentRequests => Some("concurrent-requests"),
        }
    }
}

/// A quota policy as a refusal (or an admitted response) advertises it: a name, a quota of
/// whole units, its unit and window, and what is left of it.
///
/// # Examples
///
/// ```
/// use spillway::flow::FlowRule;
/// use spillway::{ManualClock, QuotaUnit, Spillway};
/// use std::time::Duration;
///
/// let spillway = Spillway::new_with_clock(ManualClock::new());
/// spillway.load_flow_rules(vec![FlowRule::in_flight("upload", 1).with_id("one-at-a-time")])?;
/// let _held = spillway.entry("upload").enter().unwrap();
/// let err = spillway.entry("upload").enter().unwrap_err();
/// let quota = spillway.refusal_quota(&err).unwrap();
/// assert_eq!((quota.policy.as_str(), quota.quota), ("one-at-a-time", 1));
/// assert_eq!(quota.unit, QuotaUnit::ConcurrentRequests);
/// assert_eq!((quota.window, quota.remaining), (None, 0));
/// // Nobody can say when a place frees.
/// assert_eq!(err.retry_after(), None);
/// # Ok::<(), spillway::flow::FlowRuleError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Quota {
    /// The policy's name: the rule's id, or the check's name where no rule has an id.
    pub policy: String,
    /// Units the policy allows now, rounded down (a warm-up rule's current allowance, not its
    /// full count).
    pub quota: u64,
    /// What [`quota`](Self::quota) counts.
    pub unit: QuotaUnit,
    /// The window the quota is per, in whole seconds (none for a concurrency quota, or a
    /// window that is not a whole number of seconds).
    pub window: Option<Duration>,
    /// Units left (0 on a refusal).
    pub remaining: u64,
}

impl Quota {
    pub(crate) fn new(policy: &str, quota: f64, unit: QuotaUnit, window: Option<Duration>) -> Self {
        Self {
            policy: policy.to_owned(),
            // Rounded down and saturating: a quota of 2.7 allows 2 whole requests.
            quota: if quota.is_finite() && quota > 0.0 {
                quota as u64
            } else {
                0
            },
            unit,
            window: window.filter(|w| w.as_secs() >= 1 && w.subsec_nanos() == 0),
            remaining: 0,
        }
    }

    /// The quota with `remaining` units left.
    pub(crate) fn with_remaining(mut self, remaining: u64) -> Self {
        self.remaining = remaining;
        self
    }
}

/// The policy name of the per-key rule `id`: its id, unless a flow rule on its resource has
/// the same id (as `per_second` makes both, named after the resource), then `"<id> per key"`:
/// one name on refused and admitted responses alike, never the flow rule's.
pub(crate) fn keyed_policy_name(id: &str, shared_with_flow: bool) -> String {
    if shared_with_flow {
        format!("{id} per key")
    } else {
        id.to_owned()
    }
}

/// The quota `err` advertises, given the rule that refused it where the kind has rules (`flow`:
/// the flow rule's behaviour and strategy; `keyed`: the per-key rule's grade, window and
/// policy name).
pub(crate) fn refusal_quota(
    err: &BlockError,
    flow: Option<(Grade, &Behavior, &Strategy)>,
    keyed: Option<(Grade, Duration, &str)>,
) -> Option<Quota> {
    if !err.may_advertise_quota() {
        return None;
    }
    let policy = err.rule_id().unwrap_or(err.kind().as_str());
    let threshold = err.threshold();
    let second = Some(Duration::from_secs(1));
    match err.kind() {
        BlockKind::Flow => match flow? {
            // Another resource's count, or a chain's: not this client's quota.
            (_, _, Strategy::Relate { .. } | Strategy::Chain { .. }) => None,
            (Grade::Concurrency, _, _) => Some(Quota::new(
                policy,
                threshold,
                QuotaUnit::ConcurrentRequests,
                None,
            )),
            // The threshold is what the rule allows now: a warm-up's current allowance.
            (Grade::Qps, Behavior::Reject | Behavior::WarmUp { .. }, _) => {
                Some(Quota::new(policy, threshold, QuotaUnit::Requests, second))
            }
            // A pacing rule refuses a call it cannot queue: its quota is its count per
            // `stat_duration`.
            (Grade::Qps, Behavior::Throttle { stat_duration, .. }, _) => Some(Quota::new(
                policy,
                threshold,
                QuotaUnit::Requests,
                Some(*stat_duration),
            )),
            // The rate it paces at now, a second: a warm-up's current allowance.
            (Grade::Qps, Behavior::WarmUpThrottle { .. }, _) => {
                Some(Quota::new(policy, threshold, QuotaUnit::Requests, second))
            }
        },
        BlockKind::Keyed => match keyed? {
            (Grade::Qps, duration, name) => Some(Quota::new(
                name,
                threshold,
                QuotaUnit::Requests,
                Some(duration),
            )),
            (Grade::Concurrency, _, name) => Some(Quota::new(
                name,
                threshold,
                QuotaUnit::ConcurrentRequests,
                None,
            )),
        },
        BlockKind::Adaptive | BlockKind::Executes | BlockKind::Actives => Some(Quota::new(
            policy,
            threshold,
            QuotaUnit::ConcurrentRequests,
            None,
        )),
        BlockKind::Tps => Some(Quota::new(policy, threshold, QuotaUnit::Requests, None)),
        BlockKind::System(SystemCheck::Qps) => {
            Some(Quota::new(policy, threshold, QuotaUnit::Requests, second))
        }
        BlockKind::System(SystemCheck::Concurrency) => Some(Quota::new(
            policy,
            threshold,
            QuotaUnit::ConcurrentRequests,
            None,
        )),
        // Latency, load and CPU are not quotas; a breaker is open, not counting; a cluster
        // limit's window is Redis's; the caps are the process's, not a client's quota; a
        // deadline is the caller's own.
        BlockKind::System(_)
        | BlockKind::Breaker
        | BlockKind::Cluster
        | BlockKind::ResourceCap
        | BlockKind::Accepts
        | BlockKind::ActivesQueueFull
        | BlockKind::Deadline => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_of_keys_is_no_quota_of_the_client_s() {
        let limit = BlockError::owned(BlockKind::Executes, "OrderService", 20.0, 20.0);
        let quota = refusal_quota(&limit, None, None).unwrap();
        assert_eq!(
            (quota.quota, quota.unit),
            (20, QuotaUnit::ConcurrentRequests)
        );
        let full = BlockError::owned(BlockKind::Executes, "OrderService", 1e4, 1e4).without_quota();
        assert_eq!(refusal_quota(&full, None, None), None);
    }

    #[test]
    fn quotas_are_whole_and_windows_whole_seconds() {
        let quota = Quota::new(
            "p",
            2.7,
            QuotaUnit::Requests,
            Some(Duration::from_millis(1500)),
        );
        assert_eq!((quota.quota, quota.window), (2, None));
        let quota = Quota::new(
            "p",
            f64::NAN,
            QuotaUnit::Requests,
            Some(Duration::from_secs(2)),
        );
        assert_eq!(
            (quota.quota, quota.window),
            (0, Some(Duration::from_secs(2)))
        );
        assert_eq!(Quota::new("p", -3.0, QuotaUnit::Requests, None).quota, 0);
    }
}
