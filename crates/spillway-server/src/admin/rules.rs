//! `GET` and `PUT /api/rules`: the rules the admin API reads and writes, by kind; a body is
//! checked whole before any of it is applied (a bad body changes nothing), persisted to the
//! file on request, and audited.

use super::{error, json_response, Admin, MAX_BODY};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde::Deserialize;
use serde_json::{json, Value};
use spillway::breaker::BreakerRule;
use spillway::flow::FlowRule;
use spillway::system::SystemRule;

/// A `PUT /api/rules` body: the rule kinds to replace (a kind left out stays as it is).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesBody {
    flow: Option<Vec<FlowRule>>,
    system: Option<Vec<SystemRule>>,
    breaker: Option<Vec<BreakerRule>>,
    adaptive: Option<Vec<spillway::adaptive::AdaptiveRule>>,
    /// Per-key rules in the file's form (`[[keyed]]`, with their key sources).
    keyed: Option<Vec<crate::config::KeyedConfig>>,
}

impl Admin {
    /// `GET /api/rules`: every kind's rules in force, as loaded.
    pub(super) fn rules(&self) -> Value {
        let spillway = self.proxy.spillway();
        json!({
            "flow": spillway.flow_rules(),
            "system": spillway.system_rules(),
            "breaker": spillway.breaker_rules(),
            "adaptive": spillway.adaptive_rules(),
            "keyed": self.proxy.keyed_rules(),
        })
    }

    /// `PUT /api/rules[?persist=true]`: replaces the kinds of rules the body holds, every one
    /// checked before any is applied (so a bad body changes nothing), audited.
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
        let mut rules = match parse_rules_body(&body) {
            Ok(rules) => rules,
            Err(err) => return refused("invalid", err.response(), &err.message),
        };
        // Per-key rules read keys on the running routes: checked against them too.
        let keyed = match rules.keyed.take() {
            Some(keyed) => match self.proxy.stage_keyed(keyed.clone()) {
                Ok(staged) => Some((keyed, staged)),
                Err(fault) => {
                    let err = BodyError::keyed(&keyed, fault);
                    return refused("invalid", err.response(), &err.message);
                }
            },
            None => None,
        };
        let before = self.rules();
        if let Some(file) = &file {
            // Written first: if the file cannot take the rules, nothing changes.
            let written = crate::persist::write_rules(
                file,
                &crate::persist::Rules {
                    flow: rules.flow.as_deref(),
                    system: rules.system.as_deref(),
                    breakers: rules.breaker.as_deref(),
                    adaptive: rules.adaptive.as_deref(),
                    keyed: keyed.as_ref().map(|(keyed, _)| keyed.as_slice()),
                },
            );
            if let Err(err) = written {
                let why = format!("not persisted: {err}");
                return refused(
                    "failed",
                    error(StatusCode::INTERNAL_SERVER_ERROR, &why),
                    &why,
                );
            }
        }
        let kinds: Vec<&str> = [
            ("flow", rules.flow.is_some()),
            ("system", rules.system.is_some()),
            ("breaker", rules.breaker.is_some()),
            ("adaptive", rules.adaptive.is_some()),
            ("keyed", keyed.is_some()),
        ]
        .into_iter()
        .filter_map(|(kind, given)| given.then_some(kind))
        .collect();
        let spillway = self.proxy.spillway();
        let applied = (|| -> Result<(), spillway::RuleError> {
            if let Some(flow) = rules.flow {
                spillway.load_flow_rules(flow)?;
            }
            if let Some(system) = rules.system {
                spillway.load_system_rules(system)?;
            }
            if let Some(breaker) = rules.breaker {
                spillway.load_breaker_rules(breaker)?;
            }
            if let Some(adaptive) = rules.adaptive {
                // Rules that stay the same keep their limiters (limit, RT estimates, queue).
                spillway.load_adaptive_rules(adaptive)?;
            }
            if let Some((_, staged)) = keyed {
                // Rules that stay the same keep every key's state.
                self.proxy.install_keyed(staged)?;
            }
            Ok(())
        })();
        if let Err(err) = applied {
            let err = BodyError::rule(err);
            return refused("invalid", err.response(), &err.message);
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
            .record(&who, ACTION, "applied", &detail.join("; "));
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
    fn rule(err: spillway::RuleError) -> Self {
        Self::at(
            err.kind(),
            err.index(),
            err.id(),
            err.field(),
            err.problem(),
        )
    }

    /// Per-key rule `index` of `rules` at fault, as the proxy's checks name it.
    fn keyed(
        rules: &[crate::config::KeyedConfig],
        (index, field, problem): (usize, &'static str, String),
    ) -> Self {
        let id = rules.get(index).map_or("", |rule| rule.id.as_str());
        Self::at("keyed", index, id, field, &problem)
    }

    fn at(kind: &str, index: usize, id: &str, field: &str, problem: &str) -> Self {
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: format!("{kind} rule #{index} (id `{id}`): `{field}` {problem}"),
            rule: Some(json!({
                "kind": kind,
                "index": index,
                "id": id,
                "field": field,
                "problem": problem,
            })),
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

/// The body's rule kinds, every one checked.
fn parse_rules_body(body: &[u8]) -> Result<RulesBody, BodyError> {
    let rules: RulesBody = serde_json::from_slice(body).map_err(|err| BodyError {
        status: StatusCode::BAD_REQUEST,
        message: format!("bad JSON: {err}"),
        rule: None,
    })?;
    if let Some(flow) = &rules.flow {
        spillway::flow::validate_flow_rules(flow).map_err(BodyError::rule)?;
    }
    if let Some(system) = &rules.system {
        spillway::system::validate_system_rules(system).map_err(BodyError::rule)?;
    }
    if let Some(breaker) = &rules.breaker {
        spillway::breaker::validate_breaker_rules(breaker).map_err(BodyError::rule)?;
    }
    if let Some(adaptive) = &rules.adaptive {
        spillway::adaptive::validate_adaptive_rules(adaptive).map_err(BodyError::rule)?;
    }
    if let Some(keyed) = &rules.keyed {
        // Their own fields and key sources; against the routes when applied.
        crate::keyed::plan(keyed).map_err(|fault| BodyError::keyed(keyed, fault))?;
    }
    Ok(rules)
}
