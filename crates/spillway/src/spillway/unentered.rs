//! Rules that never applied: their resource was never entered.

use super::Spillway;

/// A rule in force whose resource no entry has entered since the instance was made (see
/// [`Spillway::unentered_rules`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnenteredRule {
    /// The kind of rule: `flow`, `breaker`, `adaptive`, `keyed` or `cluster`.
    pub kind: &'static str,
    /// The rule's id.
    pub id: String,
    /// The resource it names.
    pub resource: String,
}

impl Spillway {
    /// The rules in force whose resource no entry has entered (nor
    /// [`resource`](Self::resource) resolved) since this instance was made: rules that have
    /// never applied. Once the service has taken its usual traffic, each one is usually a
    /// mistake: a typo in the resource, a method that differs (`"POST /login"` for a `GET`
    /// route), a route whose path changed. System rules and adaptive rules on all inbound
    /// traffic name no resource and are never listed. A resource a flow rule's `relate`
    /// strategy reads is registered when the rule loads, so rules on it are not listed either.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::FlowRule;
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// spillway.load_flow_rules(vec![
    ///     FlowRule::per_second("GET /search", 10),
    ///     FlowRule::per_second("GET /serch", 10), // a typo
    /// ])?;
    /// spillway.entry("GET /search").enter()?;
    /// let unentered = spillway.unentered_rules();
    /// assert_eq!(unentered.len(), 1);
    /// assert_eq!((unentered[0].kind, unentered[0].resource.as_str()), ("flow", "GET /serch"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn unentered_rules(&self) -> Vec<UnenteredRule> {
        let mut named: Vec<(&'static str, String, String)> = Vec::new();
        named.extend(
            self.flow_rules()
                .into_iter()
                .map(|rule| ("flow", rule.id, rule.resource)),
        );
        named.extend(
            self.breaker_rules()
                .into_iter()
                .map(|rule| ("breaker", rule.id, rule.resource)),
        );
        named.extend(
            self.adaptive_rules()
                .into_iter()
                .filter_map(|rule| Some(("adaptive", rule.id, rule.resource?))),
        );
        named.extend(
            self.keyed_rules()
                .into_iter()
                .map(|rule| ("keyed", rule.id, rule.resource)),
        );
        named.extend(
            self.cluster_rules()
                .into_iter()
                .map(|rule| ("cluster", rule.id, rule.resource)),
        );
        named
            .into_iter()
            .filter(|(_, _, resource)| !self.inner.registry.contains(resource))
            .map(|(kind, id, resource)| UnenteredRule { kind, id, resource })
            .collect()
    }
}
