//! The adaptive rules' metrics, by rule: each limiter's limit, calls in flight, baseline RTT,
//! queue, refusals and queue timeouts (resource `*`: a rule on all inbound traffic).

use super::{counters, gauges, rule_labels};
use prometheus_client::encoding::DescriptorEncoder;
use std::fmt;

/// Writes every adaptive rule's metrics.
pub(crate) fn encode(
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
    ] {
        let rows = adaptive
            .iter()
            .map(|(id, resource, state)| (rule_labels(id, resource), read(state)));
        counters(encoder, name, help, rows)?;
    }
    Ok(())
}
