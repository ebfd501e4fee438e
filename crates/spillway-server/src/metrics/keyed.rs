//! The per-key rules' metrics: by rule, what each checked and refused, how many checks its
//! sketch decided, the keys that lost their place, the keys it holds exactly and its memory.

use super::{counters, gauges, rule_labels};
use prometheus_client::encoding::DescriptorEncoder;
use spillway::keyed::KeyedStats;
use std::fmt;

/// Writes every per-key rule's metrics.
pub(crate) fn encode(
    encoder: &mut DescriptorEncoder<'_>,
    spillway: &spillway::Spillway,
) -> Result<(), fmt::Error> {
    let rules: Vec<(String, String, KeyedStats, usize)> = spillway
        .keyed_rules()
        .into_iter()
        .filter_map(|rule| {
            let (stats, bytes) = spillway.keyed_stats(&rule.id)?;
            Some((rule.id, rule.resource, stats, bytes))
        })
        .collect();
    type Read = fn(&KeyedStats) -> u64;
    let totals: [(&str, &str, Read); 4] = [
        (
            "spillway_keyed_checks",
            "Requests a per-key rule checked (each with its key), by rule",
            |stats| stats.checks,
        ),
        (
            "spillway_keyed_refusals",
            "Requests a per-key rule refused, by rule",
            |stats| stats.refused,
        ),
        (
            "spillway_keyed_sketched",
            "Checks a per-key rule decided by its sketch (keys without a place of their own), by rule",
            |stats| stats.sketched,
        ),
        (
            "spillway_keyed_evictions",
            "Keys that lost their place in a per-key rule's table to a busier key, by rule",
            |stats| stats.evictions,
        ),
    ];
    for (name, help, read) in totals {
        let rows = rules
            .iter()
            .map(|(id, resource, stats, _)| (rule_labels(id, resource), read(stats)));
        counters(encoder, name, help, rows)?;
    }
    gauges(
        encoder,
        "spillway_keyed_exact_keys",
        "Keys a per-key rule holds exactly now (at most its capacity), by rule",
        rules
            .iter()
            .map(|(id, resource, stats, _)| (rule_labels(id, resource), stats.exact_keys as f64)),
    )?;
    gauges(
        encoder,
        "spillway_keyed_memory_bytes",
        "Bytes a per-key rule holds (its table, sketches and counters: fixed by its capacity), by rule",
        rules
            .iter()
            .map(|(id, resource, _, bytes)| (rule_labels(id, resource), *bytes as f64)),
    )?;
    gauges(
        encoder,
        "spillway_keyed_sketch_bytes",
        "Bytes of a per-key rule's sketches (part of its memory), by rule",
        rules
            .iter()
            .map(|(id, resource, stats, _)| (rule_labels(id, resource), stats.sketch_bytes as f64)),
    )
}
