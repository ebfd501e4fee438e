//! The admin API's audit trail: every write (a change of rules, a reload, a write refused for
//! want of the token), who made it, what it changed and when, logged at `info` under the target
//! `spillway::audit` and kept (the last [`KEPT`]) for the dashboard.

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Mutex;

/// The peer of an admin connection, in each of its requests' extensions (for the audit).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// Writes kept for the dashboard.
pub(crate) const KEPT: usize = 100;

/// Longest actor name kept (the `X-Spillway-Actor` header).
const MAX_ACTOR: usize = 64;

/// The header a client may name itself with (the dashboard sends `dashboard`). It labels the
/// write in the log; it authenticates nothing.
pub(crate) const ACTOR_HEADER: &str = "x-spillway-actor";

/// Who made a write: the peer's address and the name it gave, if any.
#[derive(Debug, Clone)]
pub(crate) struct Who {
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) actor: Option<String>,
}

impl Who {
    /// The writer of `request`, from its connection's peer and its actor header (printable ASCII
    /// only, at most 64 characters; anything else is dropped).
    pub(crate) fn of<B>(request: &http::Request<B>) -> Self {
        let peer = request.extensions().get::<Peer>().map(|peer| peer.0);
        let actor = request
            .headers()
            .get(ACTOR_HEADER)
            .and_then(|value| value.to_str().ok())
            .map(|name| {
                name.chars()
                    .filter(|c| c.is_ascii_graphic() || *c == ' ')
                    .take(MAX_ACTOR)
                    .collect::<String>()
            })
            .filter(|name| !name.trim().is_empty());
        Self { peer, actor }
    }
}

/// The last writes.
#[derive(Debug, Default)]
pub(crate) struct Audit {
    last: Mutex<VecDeque<Value>>,
}

impl Audit {
    /// Logs and keeps a write: `action` (`PUT /api/rules`, say), its `outcome` (`applied`,
    /// `refused`, ...) and what it changed or why it was refused.
    pub(crate) fn record(&self, who: &Who, action: &str, outcome: &str, detail: &str) {
        let peer = who.peer.map(|peer| peer.to_string());
        tracing::info!(
            target: "spillway::audit",
            peer = peer.as_deref().unwrap_or("-"),
            actor = who.actor.as_deref().unwrap_or("-"),
            action,
            outcome,
            detail,
            "admin write"
        );
        let entry = json!({
            "at": crate::unix_time::unix_seconds_now(),
            "peer": peer,
            "actor": who.actor,
            "action": action,
            "outcome": outcome,
            "detail": detail,
        });
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.len() == KEPT {
            last.pop_front();
        }
        last.push_back(entry);
    }

    /// The writes kept, newest first.
    pub(crate) fn json(&self) -> Vec<Value> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.iter().rev().cloned().collect()
    }
}

/// What replacing the rules `old` with `new` (JSON arrays of rules with an `id`) changes, in
/// words: `flow: added a; changed b (count 10 -> 5); removed c`, or `flow: unchanged`.
pub(crate) fn changes(kind: &str, old: &Value, new: &Value) -> String {
    let by_id = |rules: &Value| -> Vec<(String, Value)> {
        rules
            .as_array()
            .into_iter()
            .flatten()
            .map(|rule| (rule["id"].as_str().unwrap_or("").to_owned(), rule.clone()))
            .collect()
    };
    let (old, new) = (by_id(old), by_id(new));
    let find = |rules: &[(String, Value)], id: &str| {
        rules
            .iter()
            .find(|(other, _)| other == id)
            .map(|(_, rule)| rule.clone())
    };
    let mut parts = Vec::new();
    for (id, rule) in &new {
        match find(&old, id) {
            None => parts.push(format!("added {id}")),
            Some(before) if before != *rule => {
                parts.push(format!("changed {id} ({})", fields_changed(&before, rule)));
            }
            Some(_) => {}
        }
    }
    for (id, _) in &old {
        if find(&new, id).is_none() {
            parts.push(format!("removed {id}"));
        }
    }
    if parts.is_empty() {
        format!("{kind}: unchanged")
    } else {
        format!("{kind}: {}", parts.join("; "))
    }
}

/// `field old -> new` for each top-level field that differs.
fn fields_changed(before: &Value, after: &Value) -> String {
    let empty = serde_json::Map::new();
    let (b, a) = (
        before.as_object().unwrap_or(&empty),
        after.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|key| b.get(*key) != a.get(*key))
        .map(|key| {
            let show = |v: Option<&Value>| v.map_or("-".to_owned(), Value::to_string);
            format!("{key} {} -> {}", show(b.get(key)), show(a.get(key)))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_what_was_added_changed_and_removed() {
        let old = json!([{"id": "a", "count": 10}, {"id": "b", "count": 1}, {"id": "c"}]);
        let new = json!([{"id": "a", "count": 5, "shadow": true}, {"id": "c"}, {"id": "d"}]);
        assert_eq!(
            changes("flow", &old, &new),
            "flow: changed a (count 10 -> 5, shadow - -> true); added d; removed b"
        );
        assert_eq!(changes("flow", &old, &old), "flow: unchanged");
    }

    #[test]
    fn keeps_the_newest_writes_and_cleans_the_actor() {
        let audit = Audit::default();
        let request = http::Request::builder()
            .header(ACTOR_HEADER, "ops\t-bot")
            .body(())
            .unwrap();
        let who = Who::of(&request);
        assert_eq!(who.actor.as_deref(), Some("ops-bot"));
        for i in 0..KEPT + 5 {
            audit.record(&who, "PUT /api/rules", "applied", &format!("write {i}"));
        }
        let kept = audit.json();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[0]["detail"], format!("write {}", KEPT + 4));
        assert_eq!(kept[0]["actor"], "ops-bot");
        let long = http::Request::builder()
            .header(ACTOR_HEADER, "x".repeat(500))
            .body(())
            .unwrap();
        assert_eq!(Who::of(&long).actor.unwrap().len(), MAX_ACTOR);
    }
}
