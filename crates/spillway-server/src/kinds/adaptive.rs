//! Adaptive concurrency limits (`[[adaptive]]`).

use super::core_kind::CoreKind;
use serde_json::{json, Value};
use spillway::adaptive::AdaptiveRule;

/// Adaptive rules: a rule that stays the same keeps its limiter (limit, RT estimates, queue).
pub(super) const ADAPTIVE: CoreKind<AdaptiveRule> = CoreKind {
    name: "adaptive",
    states_key: None,
    tables: |config| &config.adaptive,
    read: |spillway| spillway.adaptive_rules(),
    states: Some(states),
    validate: spillway::adaptive::validate_adaptive_rules,
    load: |spillway, rules| spillway.load_adaptive_rules(rules),
    metrics: Some(crate::metrics::adaptive::encode),
};

/// Each adaptive rule's limiter now: limit, calls in flight, RT estimates (milliseconds), the
/// reason of the last change, samples, updates, refusals, and its queue (waiting, timeouts).
fn states(spillway: &spillway::Spillway) -> Vec<Value> {
    let millis = |rtt: Option<std::time::Duration>| rtt.map(|rtt| rtt.as_secs_f64() * 1e3);
    spillway
        .adaptive_rules()
        .iter()
        .filter_map(|rule| {
            let state = spillway.adaptive_state(&rule.id)?;
            Some(json!({
                "rule": rule.id,
                "resource": rule.resource,
                "limit": state.limit,
                "in_flight": state.in_flight,
                "baseline_rtt_ms": millis(state.estimates.baseline),
                "latest_rtt_ms": millis(state.estimates.latest),
                "last_change": state.last_change.as_str(),
                "samples": state.samples,
                "updates": state.updates,
                "refusals": state.refusals,
                "waiting": state.waiting,
                "queue_timeouts": state.queue_timeouts,
            }))
        })
        .collect()
}
