//! `GET` and `PUT /api/rules`: the rules the admin API reads and writes, by kind; a body is
//! checked whole before any of it is applied (a bad body changes nothing), persisted to the
//! file on request, and audited.

use super::{error, json_response, Admin, MAX_BODY};
use crate::kinds::{self, Change, Fault, Problem, RuleKind, KINDS};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{json, Value};
use std::sync::Arc;

/// A `PUT /api/rules` body, read and checked: each kind it holds (in [`KINDS`]' order), with
/// its rules as given. A kind left out stays as it is.
type RulesBody = Vec<(&'static dyn RuleKind, Box<dyn Change>)>;

impl Admin {
    /// `GET /api/rules`: every kind's rules in force, in the file's form.
    pub(super) fn rules(&self) -> Value {
        let rules: serde_json::Map<String, Value> = KINDS
            .iter()
            .map(|kind| (kind.name().to_owned(), kind.read(&self.proxy)))
            .collect();
        Value::Object(rules)
    }

    /// `GET /api/kinds`: every kind, in the order `/api/rules` and the status list them, with
    /// what the dashboard's forms need: its name, its section's title, and a new rule's
    /// template in the file's form.
    pub(super) fn kinds(&self) -> Value {
        let kinds: Vec<Value> = KINDS
            .iter()
            .map(|kind| json!({ "name": kind.name(), "title": kind.title(), "template": kind.template() }))
            .collect();
        Value::Array(kinds)
    }

    /// `PUT /api/rules[?persist=true]`: replaces the kinds of rules the body holds, every one
    /// checked (its own fields, then against the running proxy) before any is applied, so a
    /// bad body changes nothing; written to the file first if asked; audited.
    pub(super) async fn put_rules(
        &self,
        request: Request<axum::body::Body>,
    ) -> Response<Full<Bytes>> {
        const ACTION: &str = "PUT /api/rules";
        let who = crate::audit::Who::of(&request);
        let refused = |outcome: &str, response: Response<Full<Bytes>>, why: &str| {
            self.audit.record(&who, ACTION, outcome, why);
            response
        };
        let persist = request
            .uri()
            .query()
            .is_some_and(|query| query.split('&').any(|pair| pair == "persist=true"));
        let file = match (&self.reloader, persist) {
            (Some(reloader), true) => Some(reloader.path().to_path_buf()),
            (None, true) => {
                let why = "persist=true needs a configuration file, and this server has none";
                return refused("refused", error(StatusCode::CONFLICT, why), why);
            }
            (_, false) => None,
        };
        let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => {
                let why = format!("the body is larger than {MAX_BODY} bytes, or was cut short");
                return refused("refused", error(StatusCode::PAYLOAD_TOO_LARGE, &why), &why);
            }
        };
        // The file is written and fsynced off the runtime, as a reload reads it: a slow or
        // hung disk holds this request and the writes after it, never the threads that serve
        // the status, the metrics and the dashboard.
        // One at a time on a blocking thread: the others wait for their turn here, so that a
        // hung disk holds one thread, and a request whose client leaves while it waits goes
        // with it. (One that has begun runs to its end: the file it wrote and the rules in
        // force must agree.)
        // (The semaphore is never closed: `None` cannot happen, and would only skip the turn.)
        let turn = Arc::clone(&self.write_turn).acquire_owned().await.ok();
        let this = self.clone();
        let audited = who.clone();
        let wrote = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            this.write_rules(&audited, file, &body)
        });
        match wrote.await {
            Ok(response) => response,
            Err(err) => {
                // Some kinds may be in force already: said so in the audit.
                let why = format!("the write failed part way: {err}");
                refused(
                    "failed",
                    error(StatusCode::INTERNAL_SERVER_ERROR, &why),
                    &why,
                )
            }
        }
    }

    /// [`put_rules`](Self::put_rules)'s checks and writes, one at a time (on a blocking
    /// thread): `body` checked whole, written to `file` if given, applied, audited as `who`'s.
    fn write_rules(
        &self,
        who: &crate::audit::Who,
        file: Option<std::path::PathBuf>,
        body: &[u8],
    ) -> Response<Full<Bytes>> {
        const ACTION: &str = "PUT /api/rules";
        let refused = |outcome: &str, response: Response<Full<Bytes>>, why: &str| {
            self.audit.record(who, ACTION, outcome, why);
            response
        };
        let _writing = self
            .writing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut changes = match parse_rules_body(body) {
            Ok(changes) => changes,
            Err(err) => return refused("invalid", err.response(), &err.message),
        };
        for (kind, change) in &mut changes {
            if let Err(fault) = change.stage(&self.proxy) {
                let err = BodyError::at(kind.name(), fault);
                return refused("invalid", err.response(), &err.message);
            }
        }
        let before = self.rules();
        if let Some(file) = &file {
            // Written first: if the file cannot take the rules, nothing changes.
            let tables: Result<Vec<_>, String> = changes
                .iter()
                .map(|(kind, change)| Ok((kind.name(), change.toml(kind.name())?)))
                .collect();
            let written = tables.and_then(|tables| crate::persist::write_rules(file, &tables));
            if let Err(err) = written {
                let why = format!("not persisted: {err}");
                return refused(
                    "failed",
                    error(StatusCode::INTERNAL_SERVER_ERROR, &why),
                    &why,
                );
            }
        }
        let kinds: Vec<&str> = changes.iter().map(|(kind, _)| kind.name()).collect();
        for (kind, change) in changes {
            if let Err(fault) = change.apply(&self.proxy) {
                let err = BodyError::at(kind.name(), fault);
                return refused("invalid", err.response(), &err.message);
            }
        }
        let after = self.rules();
        let mut detail: Vec<String> = kinds
            .iter()
            .map(|kind| crate::audit::changes(kind, &before[kind], &after[kind]))
            .collect();
        if file.is_some() {
            detail.push("persisted to the file".to_owned());
        }
        self.audit
            .record(who, ACTION, "applied", &detail.join("; "));
        json_response(StatusCode::OK, &after)
    }
}

/// A `PUT /api/rules` body, read and checked as the admin API reads it: every kind it holds is
/// checked before any is applied, so a bad body changes nothing.
///
/// # Errors
///
/// What is wrong: malformed JSON, or a rule at fault (named with its field).
///
/// # Examples
///
/// ```
/// use spillway_server::admin::check_rules_body;
///
/// assert!(check_rules_body(br#"{"flow": [{"id": "a", "resource": "r", "count": 5}]}"#).is_ok());
/// let err = check_rules_body(br#"{"flow": [{"id": "a", "resource": "r", "count": -5}]}"#);
/// assert!(err.unwrap_err().contains("count"));
/// ```
pub fn check_rules_body(body: &[u8]) -> Result<(), String> {
    parse_rules_body(body)
        .map(|_| ())
        .map_err(|err| err.message)
}

/// What is wrong with a `PUT /api/rules` body: 400 for malformed JSON, 422 for a rule at fault,
/// named (kind, position, id, field) so that a form can show the error by its field.
#[derive(Debug)]
struct BodyError {
    status: StatusCode,
    message: String,
    /// The rule at fault: `{"kind", "index", "id", "field", "problem"}`.
    rule: Option<Value>,
}

impl BodyError {
    /// A rule of kind `kind` at fault.
    fn at(kind: &str, fault: Fault) -> Self {
        let Fault {
            index,
            id,
            field,
            problem,
        } = fault;
        let message = if field.is_empty() {
            format!("{kind} rule #{index} (id `{id}`): {problem}")
        } else {
            format!("{kind} rule #{index} (id `{id}`): `{field}` {problem}")
        };
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message,
            rule: Some(json!({
                "kind": kind,
                "index": index,
                "id": id,
                "field": field,
                "problem": problem,
            })),
        }
    }

    /// Malformed JSON, or rules not in their kind's form.
    fn malformed(message: String) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: format!("bad JSON: {message}"),
            rule: None,
        }
    }

    /// `{"error": message, "rule": {"kind", "index", "id", "field", "problem"}}` (no `rule` for
    /// malformed JSON).
    fn response(&self) -> Response<Full<Bytes>> {
        let mut body = json!({ "error": self.message });
        if let Some(rule) = &self.rule {
            body["rule"] = rule.clone();
        }
        json_response(self.status, &body)
    }
}

/// The body's rule kinds, every one read and checked on its own fields.
fn parse_rules_body(body: &[u8]) -> Result<RulesBody, BodyError> {
    let Given(mut given) =
        serde_json::from_slice(body).map_err(|err| BodyError::malformed(err.to_string()))?;
    if let Some(unknown) = given.keys().find(|name| kinds::named(name).is_none()) {
        let known: Vec<&str> = KINDS.iter().map(|kind| kind.name()).collect();
        return Err(BodyError::malformed(format!(
            "unknown rule kind `{unknown}`, expected one of {}",
            known.join(", ")
        )));
    }
    let mut changes = Vec::new();
    for kind in KINDS {
        // A kind left out, or given as null, stays as it is.
        let Some(rules) = given.remove(kind.name()).filter(|rules| !rules.is_null()) else {
            continue;
        };
        match kind.parse(rules) {
            Ok(change) => changes.push((*kind, change)),
            Err(Problem::Malformed(why)) => {
                return Err(BodyError::malformed(format!("`{}`: {why}", kind.name())))
            }
            Err(Problem::Rule(fault)) => return Err(BodyError::at(kind.name(), fault)),
        }
    }
    Ok(changes)
}

/// A body's kinds by name, a name given twice refused (a JSON object read into a map would
/// keep the last silently).
struct Given(serde_json::Map<String, Value>);

impl<'de> serde::Deserialize<'de> for Given {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Kinds;
        impl<'de> serde::de::Visitor<'de> for Kinds {
            type Value = Given;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of rule kinds")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Given, A::Error> {
                let mut kinds = serde_json::Map::new();
                while let Some((name, rules)) = map.next_entry::<String, Value>()? {
                    if kinds.contains_key(&name) {
                        return Err(serde::de::Error::custom(format!("`{name}` given twice")));
                    }
                    kinds.insert(name, rules);
                }
                Ok(Given(kinds))
            }
        }
        deserializer.deserialize_map(Kinds)
    }
}
