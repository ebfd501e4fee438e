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
            counts.accepts().map(|state| {
                let mut listener = json!({
                    "open": state.open,
                    "max": state.max,
                    "paused": state.paused,
                    "troubles": crate::troubles::json(counts),
                });
                // The proxy's: the cap on one client's, and the clients with one open.
                if let Some(clients) = counts.clients() {
                    listener["max_per_client"] = clients.max().into();
                    listener["clients"] = clients.clients().into();
                }
                listener
            })
        };
        let mut status = json!({
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
                    "refusals": self.proxy.listener_counts().upstream_refusals(),
                },
                "open_file_limit": crate::descriptors::Descriptors::now().limit,
            },
            // Absent (null) until the probe's first sample (the probe reads -1 then).
            "probe": {
                "load": Some(probe.load()).filter(|load| *load >= 0.0),
                "cpu_usage": Some(probe.cpu_usage()).filter(|cpu| *cpu >= 0.0),
            },
            "transitions": self.transitions.json(&breaker_rules),
            "audit": self.audit.json(),
        });
        // Each kind's rules with their state now.
        for kind in crate::kinds::KINDS {
            if let Some(states) = kind.states(&self.proxy) {
                status[kind.states_key()] = states;
            }
        }
        status["unused_rules"] = Value::Array(self.unused_rules());
        status["criticality"] = self.classes();
        status
    }

    /// Each criticality, lowest first: what became of its requests (those that carry a
    /// claim), the mean time its admitted requests were held, and how many wait now in the
    /// adaptive limits' queues.
    fn classes(&self) -> Value {
        let spillway = self.proxy.spillway();
        let mut waiting = [0_u64; 4];
        for rule in spillway.adaptive_rules() {
            if let Some(state) = spillway.adaptive_state(&rule.id) {
                for (sum, now) in waiting.iter_mut().zip(state.waiting_by_criticality) {
                    *sum += now;
                }
            }
        }
        let classes: Vec<Value> = (self.proxy.metrics().classes.counts().iter())
            .map(|(class, counts)| {
                json!({
                    "class": class.as_str(),
                    "admitted": counts.admitted,
                    "shed": counts.shed,
                    "deadline": counts.deadline,
                    "mean_wait_ms": counts.mean_wait.map(|wait| wait.as_secs_f64() * 1e3),
                    "waiting": waiting[class.rank()],
                })
            })
            .collect();
        json!({ "configured": self.proxy.claims_configured(), "classes": classes })
    }

    /// The rules in force that name a resource no route produces (they never apply), as
    /// `{kind, id, resource}`: `check` and the reload warn of those in the file; this also
    /// sees rules put through the admin API.
    pub(super) fn unused_rules(&self) -> Vec<Value> {
        let produced = self.proxy.produced_resources();
        let mut unused = Vec::new();
        for kind in crate::kinds::KINDS {
            let Value::Array(rules) = kind.read(&self.proxy) else {
                continue;
            };
            for rule in &rules {
                // A rule with no resource (a system rule, an adaptive rule on all traffic)
                // applies to every request.
                let Some(resource) = rule.get("resource").and_then(Value::as_str) else {
                    continue;
                };
                if !produced.contains(resource) {
                    unused.push(json!({
                        "kind": kind.name(),
                        "id": rule.get("id").cloned().unwrap_or(Value::Null),
                        "resource": resource,
                    }));
                }
            }
        }
        unused
    }
}
