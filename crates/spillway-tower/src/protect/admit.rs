//! How a request enters its resource: its resource, origin and keys read from the request as
//! the layer is configured, and whether its resource's cluster rules can decide it at once.

use super::config::{Config, Selector};
use spillway::{BlockError, OwnedAdmission};

/// Enters the request's resource: ready, queued, or blocked. `parts` is the request's head
/// when the configuration reads it.
pub(super) fn admit(
    config: &Config,
    parts: Option<&http::request::Parts>,
) -> Result<OwnedAdmission, BlockError> {
    let origin = match (&config.origin, parts) {
        (Some(origin), Some(parts)) => origin(parts),
        _ => None,
    };
    let enter = |builder: spillway::EntryBuilder<'_>| {
        let mut builder = builder.traffic(config.traffic);
        if let Some(parts) = parts {
            for (position, key) in &config.keys {
                if let Some(key) = key(parts) {
                    builder = builder.key_at(*position, key.as_str());
                }
            }
        }
        match &origin {
            Some(origin) => builder.origin(origin).try_enter_owned(),
            None => builder.try_enter_owned(),
        }
    };
    match (&config.resource, parts) {
        (Selector::Fixed(resource), _) => enter(resource.entry()),
        (Selector::Named(name), _) => enter(config.spillway.entry(name)),
        (Selector::Dynamic(name), Some(parts)) => {
            let name = name(parts);
            enter(config.spillway.entry(&name))
        }
        (Selector::Dynamic(_), None) => unreachable!("a dynamic resource reads the request"),
    }
}

/// The request's resource, if one of its cluster rules cannot decide it at once (a lease that
/// holds no pass: see [`spillway::Spillway::cluster_ready`]). At once false without cluster
/// rules.
pub(super) fn unready(config: &Config, parts: Option<&http::request::Parts>) -> Option<String> {
    // Most services have none: no name worked out for nothing.
    if !config.spillway.has_cluster_rules() {
        return None;
    }
    let name = match (&config.resource, parts) {
        (Selector::Fixed(resource), _) => std::borrow::Cow::Borrowed(resource.name()),
        (Selector::Named(name), _) => std::borrow::Cow::Borrowed(&**name),
        (Selector::Dynamic(name), Some(parts)) => std::borrow::Cow::Owned(name(parts)),
        (Selector::Dynamic(_), None) => unreachable!("a dynamic resource reads the request"),
    };
    (!config.spillway.cluster_is_ready(&name, 1)).then(|| name.into_owned())
}
