//! The circuit breakers' last state changes, each with when and why, for the dashboard's
//! breaker timeline.

use serde_json::{json, Value};
use spillway::breaker::{BreakerEvent, BreakerRule, BreakerState, BreakerStrategy};
use spillway::Spillway;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// State changes kept, over every breaker (the oldest goes first).
pub(crate) const KEPT: usize = 200;

/// One state change.
#[derive(Debug, Clone, PartialEq)]
struct Transition {
    /// Wall time, Unix seconds.
    at: f64,
    rule: &'static str,
    resource: &'static str,
    from: BreakerState,
    to: BreakerState,
    /// On opening: the value that crossed the threshold.
    observed: Option<f64>,
}

impl Transition {
    fn of(event: &BreakerEvent, at: f64) -> Self {
        Self {
            at,
            rule: event.rule_id,
            resource: event.resource,
            from: event.from,
            to: event.to,
            observed: event.observed,
        }
    }
}

/// The last [`KEPT`] state changes of a spillway's breakers.
#[derive(Debug, Default)]
pub(crate) struct Transitions {
    last: Mutex<VecDeque<Transition>>,
}

impl Transitions {
    /// Records every state change of `spillway`'s breakers from now on (for as long as the
    /// returned value lives).
    pub(crate) fn watch(spillway: &Spillway) -> Arc<Self> {
        let this = Arc::new(Self::default());
        let weak = Arc::downgrade(&this);
        spillway.on_breaker_state_change(move |event| {
            if let Some(transitions) = weak.upgrade() {
                transitions.record(Transition::of(event, crate::unix_time::unix_seconds_now()));
            }
        });
        this
    }

    fn record(&self, transition: Transition) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.len() == KEPT {
            last.pop_front();
        }
        last.push_back(transition);
    }

    /// The changes kept, newest first, each with why (told from `rules`, the rules in force).
    pub(crate) fn json(&self, rules: &[BreakerRule]) -> Vec<Value> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.iter()
            .rev()
            .map(|t| {
                let rule = rules.iter().find(|rule| rule.id == t.rule);
                json!({
                    "at": t.at,
                    "rule": t.rule,
                    "resource": t.resource,
                    "from": t.from.as_str(),
                    "to": t.to.as_str(),
                    "observed": t.observed,
                    "why": why(rule, t.from, t.to, t.observed),
                })
            })
            .collect()
    }
}

/// Why a breaker went from `from` to `to`, in words.
fn why(
    rule: Option<&BreakerRule>,
    from: BreakerState,
    to: BreakerState,
    observed: Option<f64>,
) -> String {
    use BreakerState::{Closed, HalfOpen, Open};
    let slow =
        rule.is_some_and(|rule| matches!(rule.strategy, BreakerStrategy::SlowCallRatio { .. }));
    match (from, to) {
        (Closed, Open) => match (rule.map(|rule| (&rule.strategy, rule)), observed) {
            (Some((BreakerStrategy::ErrorRatio { threshold }, _)), Some(seen)) => {
                format!("error ratio {seen:.2} over the threshold {threshold}")
            }
            (Some((BreakerStrategy::ErrorCount { threshold }, rule)), Some(seen)) => format!(
                "{seen} errors in {} over the threshold {threshold}",
                Pretty(rule.stat_interval)
            ),
            (
                Some((
                    BreakerStrategy::SlowCallRatio {
                        max_rt,
                        slow_ratio_threshold,
                    },
                    _,
                )),
                Some(seen),
            ) => format!(
                "slow-call ratio {seen:.2} (calls over {}) over the threshold {slow_ratio_threshold}",
                Pretty(*max_rt)
            ),
            _ => "its threshold was crossed".to_owned(),
        },
        (HalfOpen, Open) if slow => "the probe was slow".to_owned(),
        (HalfOpen, Open) => "the probe failed".to_owned(),
        (Open, HalfOpen) => match rule {
            Some(rule) => format!(
                "the retry timeout of {} passed: letting probes through",
                Pretty(rule.retry_timeout)
            ),
            None => "the retry timeout passed: letting probes through".to_owned(),
        },
        (HalfOpen, Closed) => "the probes succeeded".to_owned(),
        _ => String::new(),
    }
}

/// A duration as the file writes it: `5s`, `200ms`, `1.5s`.
struct Pretty(std::time::Duration);

impl std::fmt::Display for Pretty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway::breaker::BreakerRule;
    use std::time::Duration;

    fn event(from: BreakerState, to: BreakerState, observed: Option<f64>, at: f64) -> Transition {
        Transition {
            at,
            rule: "db-errors",
            resource: "db",
            from,
            to,
            observed,
        }
    }

    #[test]
    fn keeps_the_newest_and_tells_why() {
        let rule = BreakerRule::new(
            "db-errors",
            "db",
            BreakerStrategy::ErrorRatio { threshold: 0.5 },
            Duration::from_secs(5),
        );
        let transitions = Transitions::default();
        use BreakerState::{Closed, HalfOpen, Open};
        for i in 0..KEPT + 3 {
            let at = i as f64;
            transitions.record(event(Closed, Open, Some(0.75), at));
        }
        transitions.record(event(Open, HalfOpen, None, 1e6));
        transitions.record(event(HalfOpen, Open, Some(1.0), 1e6 + 1.0));
        transitions.record(event(HalfOpen, Closed, None, 1e6 + 2.0));
        let json = transitions.json(std::slice::from_ref(&rule));
        assert_eq!(json.len(), KEPT);
        let whys: Vec<&str> = json
            .iter()
            .take(4)
            .map(|t| t["why"].as_str().unwrap())
            .collect();
        assert_eq!(
            whys,
            [
                "the probes succeeded",
                "the probe failed",
                "the retry timeout of 5s passed: letting probes through",
                "error ratio 0.75 over the threshold 0.5",
            ]
        );
        // The oldest went first: the oldest kept is the 7th recorded.
        assert_eq!(json.last().unwrap()["at"], 6.0);
        assert_eq!(json[0]["from"], "half_open");
        assert_eq!(json[0]["to"], "closed");
    }

    #[test]
    fn each_strategy_says_what_crossed() {
        use BreakerState::{Closed, HalfOpen, Open};
        let count = BreakerRule::new(
            "r",
            "db",
            BreakerStrategy::ErrorCount { threshold: 10 },
            Duration::from_secs(1),
        );
        assert_eq!(
            why(Some(&count), Closed, Open, Some(12.0)),
            "12 errors in 1s over the threshold 10"
        );
        let slow = BreakerRule::new(
            "r",
            "db",
            BreakerStrategy::SlowCallRatio {
                max_rt: Duration::from_millis(200),
                slow_ratio_threshold: 0.5,
            },
            Duration::from_secs(1),
        );
        assert_eq!(
            why(Some(&slow), Closed, Open, Some(0.8)),
            "slow-call ratio 0.80 (calls over 200ms) over the threshold 0.5"
        );
        assert_eq!(
            why(Some(&slow), HalfOpen, Open, Some(1.0)),
            "the probe was slow"
        );
        assert_eq!(why(None, Closed, Open, None), "its threshold was crossed");
    }
}
