//! `GET /api/status`: the instance, its listeners and configuration, and each kind of rule with
//! what its state holds now.

use super::Admin;
use serde_json::{json, Value};
use spillway::system::SystemProbe;

impl Admin {
    /// `GET /api/status`: the instance, its listeners and configuration, and each kind's rules
    /// with their state now.
    pub(super) fn status(&self) -> Value {
        let spillway = self.proxy.spillway();
        let probe = spillway::system::LinuxProbe::global();
        let breakers: Vec<Value> = spillway
            .breaker_rules()
            .iter()
            .map(|rule| {
                let state = spillway.breaker_state(&rule.id).map(|s| s.as_str());
                json!({ "rule": rule.id, "resource": rule.resource, "state": state })
            })
            .collect();
        let config = match &self.reloader {
            Some(reloader) => {
                let state = reloader.state();
                let last_reload = state.last_reload_unix_seconds;
                json!({
                    "file": reloader.path().display().to_string(),
                    "reloads": state.reloads,
                    "failures": state.failures,
                    "last_reload_unix_seconds": last_reload,
                    "last_error": state.last_error,
                    "restart_needed": state.restart_needed,
                    "restart_fields": state.restart_fields,
                })
            }
            None => Value::Null,
        };
        let breaker_rules = spillway.breaker_rules();
        let connections = |counts: &crate::conn::ListenerCounts| {
            counts.accepts().map(
                |state| json!({ "open": state.open, "max": state.max, "paused": state.paused }),
            )
        };
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_seconds": self.started.elapsed().as_secs(),
            "config": config,
            // Open connections and their cap (0: none), per listener; the open-file limit the
            // automatic cap comes from (null: unlimited).
            "connections": {
                "proxy": connections(self.proxy.listener_counts()),
                "admin": connections(self.proxy.admin_listener_counts()),
                "upstream": {
                    "open": crate::descriptors::upstream_open(),
                    "max": crate::descriptors::upstream_cap(),
                },
                "open_file_limit": crate::descriptors::Descriptors::now().limit,
            },
            // Absent (null) until the probe's first sample (the probe reads -1 then).
            "probe": {
                "load": Some(probe.load()).filter(|load| *load >= 0.0),
                "cpu_usage": Some(probe.cpu_usage()).filter(|cpu| *cpu >= 0.0),
            },
            "breakers": breakers,
            "transitions": self.transitions.json(&breaker_rules),
            "flow": flow_states(spillway),
            "adaptive": adaptive_states(spillway),
            "cluster": cluster_states(self.proxy.cluster_limits()),
            "keyed": keyed_states(spillway),
            "audit": self.audit.json(),
        })
    }
}

/// Each flow rule in load order, with what its controller holds now: a warm-up's allowed QPS,
/// a pacer's queue wait (milliseconds), a shadow rule's refusals not made.
pub(super) fn flow_states(spillway: &spillway::Spillway) -> Vec<Value> {
    spillway
        .flow_rules()
        .iter()
        .map(|rule| {
            let state = spillway.flow_rule_state(&rule.id).unwrap_or_default();
            json!({
                "rule": rule.id,
                "resource": rule.resource,
                "count": rule.count,
                "shadow": rule.shadow,
                "allowed_qps": state.allowed_qps,
                "queue_wait_ms": state.queue_wait.map(|wait| wait.as_secs_f64() * 1e3),
                "shadow_refusals": state.shadow_refusals,
            })
        })
        .collect()
}

/// Each cluster rule, in file order: its kind, how it is checked (`leased` or `strict`), its
/// state (`starting` before Redis first answers, `global` while it admits against the shared
/// limit, `fallback` while Redis is out of reach) and the instances its last answer counted.
pub(super) fn cluster_states(cluster: &crate::cluster::ClusterLimits) -> Vec<Value> {
    cluster
        .states()
        .into_iter()
        .map(|rule| {
            let state = match (rule.starting, rule.fallback) {
                (_, true) => "fallback",
                (true, false) => "starting",
                (false, false) => "global",
            };
            json!({
                "rule": rule.id,
                "resource": rule.resource,
                "kind": rule.kind,
                "check": rule.mode,
                "state": state,
                "instances": rule.instances,
            })
        })
        .collect()
}

/// Each adaptive rule's limiter now: limit, calls in flight, RT estimates (milliseconds), the
/// reason of the last change, samples, updates, refusals, and its queue (waiting, timeouts).
pub(super) fn adaptive_states(spillway: &spillway::Spillway) -> Vec<Value> {
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
