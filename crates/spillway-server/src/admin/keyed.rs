//! The per-key rules in `GET /api/status`.

use serde_json::{json, Value};

/// Each per-key rule, in load order: what it checked and refused, the checks its sketch
/// decided, the keys that lost their place, the keys it holds exactly now, and its memory.
pub(super) fn keyed_states(spillway: &spillway::Spillway) -> Vec<Value> {
    spillway
        .keyed_rules()
        .iter()
        .filter_map(|rule| {
            let (stats, bytes) = spillway.keyed_stats(&rule.id)?;
            Some(json!({
                "rule": rule.id,
                "resource": rule.resource,
                "checks": stats.checks,
                "refused": stats.refused,
                "sketched": stats.sketched,
                "evictions": stats.evictions,
                "exact_keys": stats.exact_keys,
                "capacity": rule.capacity,
                "memory_bytes": bytes,
            }))
        })
        .collect()
}
