//! The refusal shadow mode let a request through with: a route's own limit's (Dubbo's, a
//! strict cluster rule's), a rule's in the spillway layer, or its deadline's. The innermost
//! service (the forwarder, the replay's recorded response) marks the response with the first,
//! for the access log and the replay.

use spillway::BlockError;
use spillway_tower::protect::{ShadowBlock, ShadowRefusal};

/// A route's own limit that shadow mode let a request through: a request extension the route's
/// limits insert.
#[derive(Debug, Clone)]
pub(crate) struct ShadowLimit(pub(crate) BlockError);

/// The refusal a request was let through with: the rule (if it has an id) and the kind. A
/// response extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shadowed {
    pub(crate) rule: Option<String>,
    pub(crate) kind: &'static str,
}

impl Shadowed {
    /// The one `err` names.
    pub(crate) fn of(err: &BlockError) -> Self {
        Self {
            rule: err.rule_id().map(str::to_owned),
            kind: err.kind().as_str(),
        }
    }

    /// The first refusal the request with `extensions` was let through with, in the order the
    /// checks ran: its route's limits, then the spillway layer's (a refusal, or a flow rule in
    /// shadow mode).
    pub(crate) fn first(extensions: &http::Extensions) -> Option<Self> {
        if let Some(ShadowLimit(err)) = extensions.get::<ShadowLimit>() {
            return Some(Self::of(err));
        }
        if let Some(ShadowBlock(err)) = extensions.get::<ShadowBlock>() {
            return Some(Self::of(err));
        }
        let ShadowRefusal { rule } = extensions.get::<ShadowRefusal>()?;
        Some(Self {
            rule: Some((*rule).to_owned()),
            kind: spillway::BlockKind::Flow.as_str(),
        })
    }
}
