//! How a request enters its resource: its resource, origin and keys read from the request as
//! the layer is configured, and whether its resource's cluster rules can decide it at once.

use super::config::{Config, Selector};
use super::missing::{MissingKey, OnMissingKey, SHARED_MISSING};
use spillway::{BlockError, OwnedAdmission, Quota};

/// Why a request was not admitted.
pub(super) enum Refused {
    /// A check refused it.
    Blocked(BlockError),
    /// It lacks a key whose rules refuse requests without one.
    Missing(MissingKey),
}

/// Enters the request's resource: ready, queued, or refused. `parts` is the request's head
/// when the configuration reads it.
pub(super) fn admit(
    config: &Config,
    parts: Option<&http::request::Parts>,
) -> Result<OwnedAdmission, Refused> {
    let origin = match (&config.origin, parts) {
        (Some(origin), Some(parts)) => origin(parts),
        _ => None,
    };
    with_builder(config, parts, |builder| {
        let admission = match &origin {
            Some(origin) => builder.origin(origin).try_enter_owned(),
            None => builder.try_enter_owned(),
        };
        admission.map_err(Refused::Blocked)
    })
}

/// The quotas the request's entry meets now and what is left of each (see
/// [`spillway::EntryBuilder::quotas`]), for an admitted response's fields; none for a request
/// whose keys are missing.
pub(super) fn quotas(config: &Config, parts: Option<&http::request::Parts>) -> Vec<Quota> {
    with_builder(config, parts, |builder| Ok(builder.quotas())).unwrap_or_default()
}

/// Runs `use_builder` on the request's entry builder: its resource, traffic type and keys as
/// the layer reads them (a missing key as its rules say: passed, shared, or refused).
fn with_builder<T>(
    config: &Config,
    parts: Option<&http::request::Parts>,
    use_builder: impl FnOnce(spillway::EntryBuilder<'_>) -> Result<T, Refused>,
) -> Result<T, Refused> {
    let enter = |builder: spillway::EntryBuilder<'_>| {
        let builder = builder.traffic(config.traffic);
        let mut builder = config.claims.apply(builder, parts);
        if let Some(parts) = parts {
            for key in &config.keys {
                builder = match ((key.read)(parts), key.missing) {
                    (Some(value), _) => builder.key_at(key.position, value.as_str()),
                    (None, OnMissingKey::Pass) => builder,
                    (None, OnMissingKey::Shared) => builder.key_at(key.position, SHARED_MISSING),
                    (None, OnMissingKey::Refuse) => {
                        return Err(Refused::Missing(MissingKey {
                            position: key.position,
                            source: key.source.clone(),
                        }))
                    }
                };
            }
        }
        use_builder(builder)
    };
    match (config.resource.resolved(&config.spillway), parts) {
        (Selector::Fixed(resource), _) => enter(resource.entry()),
        (Selector::Named(name), _) => enter(config.spillway.entry(name)),
        (Selector::Dynamic(name), Some(parts)) => {
            let name = name(parts);
            enter(config.spillway.entry(&name))
        }
        (Selector::Dynamic(_), None) => unreachable!("a dynamic resource reads the request"),
        (Selector::Default(_), _) => unreachable!("a resolved selector is not the default"),
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
    let name = match (config.resource.resolved(&config.spillway), parts) {
        (Selector::Fixed(resource), _) => std::borrow::Cow::Borrowed(resource.name()),
        (Selector::Named(name), _) => std::borrow::Cow::Borrowed(&**name),
        (Selector::Dynamic(name), Some(parts)) => std::borrow::Cow::Owned(name(parts)),
        (Selector::Dynamic(_), None) => unreachable!("a dynamic resource reads the request"),
        (Selector::Default(_), _) => unreachable!("a resolved selector is not the default"),
    };
    (!config.spillway.cluster_is_ready(&name, 1)).then(|| name.into_owned())
}
