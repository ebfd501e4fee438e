//! Adaptive concurrency limits (`[[adaptive]]`).

use super::core_kind::CoreKind;
use crate::metrics::{counters, gauges, rule_labels};
use prometheus_client::encoding::DescriptorEncoder;
use serde_json::{json, Value};
use spillway::adaptive::AdaptiveRule;
use std::fmt;

/// Adaptive rules: a rule that stays the same keeps its limiter (limit, RT estimates, queue).
pub(super) const ADAPTIVE: CoreKind<AdaptiveRule> = CoreKind {
    name: "adaptive",
    states_key: None,
    tables: |config| &config.adaptive,
    read: |spillway| spillway.adaptive_rules(),
    states: Some(states),
    validate: spillway::adaptive::validate_adaptive_rules,
    load: |spillway, rules| spillway.load_adaptive_rules(rules),
    title: "Adaptive concurrency rules",
    template: || json!({ "id": "", "algorithm": { "type": "envoy_gradient" } }),
    metrics: Some(metrics),
};

/// Each adaptive rule's limiter now: limit, calls in flight, RT estimates (milliseconds), the
/// reason of the last change, samples, calls paced by their clients (no sample), updates,
/// refusals, and its queue (waiting, timeouts,
/// whether it serves the newest first now).
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
                "paced": state.paced,
                "updates": state.updates,
                "refusals": state.refusals,
                "waiting": state.waiting,
                "queue_timeouts": state.queue_timeouts,
                "newest_first": state.newest_first,
                "by_criticality": by_criticality(&state),
            }))
        })
        .collect()
}

/// A queue's callers by criticality, lowest first: waiting now, and since the limiter was
/// made, evicted (a more critical caller, or one of a tenant with fewer waiters, took their
/// place), refused for their deadline, and refused at once by a queue full of callers that
/// keep their places.
fn by_criticality(state: &spillway::adaptive::AdaptiveState) -> Value {
    let classes: Vec<Value> = spillway::Criticality::ALL
        .iter()
        .map(|class| {
            let rank = class.rank();
            json!({
                "class": class.as_str(),
                "waiting": state.waiting_by_criticality[rank],
                "evicted": state.evicted[rank],
                "expired": state.expired[rank],
                "full": state.full[rank],
            })
        })
        .collect();
    Value::Array(classes)
}

/// The adaptive rules' metrics, by rule: each limiter's limit, calls in flight, baseline RTT,
/// queue, refusals, queue timeouts and paced calls (resource `*`: a rule on all inbound traffic).
pub(super) fn metrics(
    encoder: &mut DescriptorEncoder<'_>,
    spillway: &spillway::Spillway,
) -> Result<(), fmt::Error> {
    let adaptive: Vec<_> = spillway
        .adaptive_rules()
        .into_iter()
        .filter_map(|rule| {
            let state = spillway.adaptive_state(&rule.id)?;
            let resource = rule.resource.clone().unwrap_or_else(|| "*".to_owned());
            Some((rule.id, resource, state))
        })
        .collect();
    gauges(
        encoder,
        "spillway_adaptive_limit",
        "An adaptive rule's concurrency limit now, by rule (resource \"*\": all inbound)",
        adaptive
            .iter()
            .map(|(id, resource, state)| (rule_labels(id, resource), f64::from(state.limit))),
    )?;
    gauges(
        encoder,
        "spillway_adaptive_in_flight",
        "Calls holding a place under an adaptive rule, by rule",
        adaptive
            .iter()
            .map(|(id, resource, state)| (rule_labels(id, resource), f64::from(state.in_flight))),
    )?;
    gauges(
        encoder,
        "spillway_adaptive_baseline_rtt_seconds",
        "An adaptive rule's baseline RTT (minRTT, no-load or long-term RTT), by rule",
        adaptive.iter().filter_map(|(id, resource, state)| {
            let rtt = state.estimates.baseline?;
            Some((rule_labels(id, resource), rtt.as_secs_f64()))
        }),
    )?;
    gauges(
        encoder,
        "spillway_adaptive_waiting",
        "Requests waiting in an adaptive rule's queue now, by rule",
        adaptive
            .iter()
            .map(|(id, resource, state)| (rule_labels(id, resource), state.waiting as f64)),
    )?;
    gauges(
        encoder,
        "spillway_adaptive_queue_newest_first",
        "1 while an adaptive rule's queue hands a freed place to the newest request (order \
         \"lifo\", or \"adaptive\" from when it fails a request until it is empty), else 0",
        adaptive.iter().map(|(id, resource, state)| {
            (
                rule_labels(id, resource),
                f64::from(u8::from(state.newest_first)),
            )
        }),
    )?;
    for (name, help, read) in [
        (
            "spillway_adaptive_refusals",
            "Calls an adaptive rule refused at its limit (its queue full, or waited out), by rule",
            (|state| state.refusals) as fn(&spillway::adaptive::AdaptiveState) -> u64,
        ),
        (
            "spillway_adaptive_queue_timeouts",
            "Requests refused after waiting out an adaptive rule's queue timeout, by rule",
            |state| state.queue_timeouts,
        ),
        (
            "spillway_adaptive_paced",
            "Requests an adaptive rule took no sample of, paced by their clients (a slow \
             upload or a slow reader for more than a quarter of the call), by rule",
            |state| state.paced,
        ),
    ] {
        let rows = adaptive
            .iter()
            .map(|(id, resource, state)| (rule_labels(id, resource), read(state)));
        counters(encoder, name, help, rows)?;
    }
    let by_class = |read: fn(&spillway::adaptive::AdaptiveState) -> [u64; 4]| {
        adaptive.iter().flat_map(move |(id, resource, state)| {
            spillway::Criticality::ALL.iter().map(move |class| {
                let mut labels = rule_labels(id, resource);
                labels.push(("criticality", class.as_str().into()));
                (labels, read(state)[class.rank()])
            })
        })
    };
    gauges(
        encoder,
        "spillway_adaptive_waiting_by_criticality",
        "Requests waiting in an adaptive rule's queue now, by rule and criticality",
        by_class(|state| state.waiting_by_criticality).map(|(labels, n)| (labels, n as f64)),
    )?;
    for (name, help, read) in [
        (
            "spillway_adaptive_evicted",
            "Waiting requests an adaptive rule's full queue refused to make room for a more \
             critical one (or one of a tenant with fewer waiters), by rule and criticality",
            (|state| state.evicted) as fn(&spillway::adaptive::AdaptiveState) -> [u64; 4],
        ),
        (
            "spillway_adaptive_expired",
            "Requests an adaptive rule's queue refused for their deadline (passed, or too \
             near to be met at the current latency), by rule and criticality",
            |state| state.expired,
        ),
        (
            "spillway_adaptive_queue_full",
            "Requests an adaptive rule's queue refused at once, full of requests that keep \
             their places, by rule and criticality",
            |state| state.full,
        ),
    ] {
        counters(encoder, name, help, by_class(read))?;
    }
    Ok(())
}
