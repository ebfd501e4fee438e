//! What a layer decides per request: the resource, the origin, the traffic type, how a response
//! is classified, and what a blocked request gets.

use super::missing::OnMissingKey;
use bytes::Bytes;
use http::{request, HeaderMap, Response, StatusCode};
use spillway::{BlockError, Resource, TrafficType};
use std::fmt;
use std::sync::Arc;

/// Picks a request's resource name.
pub(super) type ResourceFn = dyn Fn(&request::Parts) -> String + Send + Sync;
/// Picks a request's origin (the caller), if any.
pub(super) type OriginFn = dyn Fn(&request::Parts) -> Option<String> + Send + Sync;
/// Reads a request's key for per-key rules, if it has one.
pub(super) type KeyFn = dyn Fn(&request::Parts) -> Option<String> + Send + Sync;

/// One key of the per-key rules: where it goes, how it is read, what it is called, and what a
/// request without it gets.
#[derive(Clone)]
pub(super) struct KeyReader {
    pub(super) position: usize,
    pub(super) read: Arc<KeyFn>,
    /// Where the key is read from (`header:x-user`), for the refusal of a request without it.
    pub(super) source: Arc<str>,
    pub(super) missing: OnMissingKey,
}
/// Says whether a response (its status and headers) counts as an error.
pub(super) type ClassifyFn = dyn Fn(StatusCode, &HeaderMap) -> bool + Send + Sync;
/// Builds the response of a blocked request.
pub(super) type BlockedFn =
    dyn Fn(&BlockError, &request::Parts, &spillway::Spillway) -> Response<Bytes> + Send + Sync;

/// How requests map to resources.
#[derive(Clone)]
pub(super) enum Selector {
    /// Every request enters one resource, resolved once.
    Fixed(Resource),
    /// Every request enters the resource of this name (which the registry refused to resolve
    /// ahead: each entry meets the same refusal, as a block).
    Named(Arc<str>),
    /// A name per request.
    Dynamic(Arc<ResourceFn>),
    /// The default, `http`, resolved at the first request: a layer given another resource
    /// never puts this one in the registry.
    Default(Arc<std::sync::OnceLock<Selector>>),
}

/// The default resource's name.
const DEFAULT_RESOURCE: &str = "http";

impl Config {
    /// What a request without the key at `position` gets.
    pub(super) fn missing_at(&self, position: usize) -> OnMissingKey {
        self.missing
            .iter()
            .find(|(at, _)| *at == position)
            .map_or(OnMissingKey::Pass, |(_, missing)| *missing)
    }

    /// Whether a request's head is read (to name its resource or its origin).
    pub(super) fn reads_request(&self) -> bool {
        self.origin.is_some()
            || !self.keys.is_empty()
            || matches!(self.resource, Selector::Dynamic(_))
            || self.claims.reads_request()
    }
}

impl Selector {
    /// The default resource, resolved when first used.
    pub(super) fn default_resource() -> Self {
        Selector::Default(Arc::default())
    }

    /// This selector, the default resolved now if it was not yet.
    pub(super) fn resolved(&self, spillway: &spillway::Spillway) -> &Selector {
        match self {
            Selector::Default(cell) => {
                cell.get_or_init(|| Selector::named(spillway, DEFAULT_RESOURCE))
            }
            other => other,
        }
    }

    /// The resource `name`, resolved now if the registry takes it.
    pub(super) fn named(spillway: &spillway::Spillway, name: &str) -> Self {
        match spillway.resource(name) {
            Ok(resource) => Selector::Fixed(resource),
            Err(_) => Selector::Named(Arc::from(name)),
        }
    }
}

/// Everything a layer and its services share.
#[derive(Clone)]
pub(super) struct Config {
    pub(super) spillway: spillway::Spillway,
    pub(super) resource: Selector,
    pub(super) origin: Option<Arc<OriginFn>>,
    /// The keys of per-key rules.
    pub(super) keys: Vec<KeyReader>,
    /// What a request without the key at each position gets, as said (before or after the
    /// key); unsaid: [`OnMissingKey::Pass`].
    pub(super) missing: Vec<(usize, OnMissingKey)>,
    pub(super) traffic: TrafficType,
    /// `None`: [`default_is_error`].
    pub(super) classify: Option<Arc<ClassifyFn>>,
    pub(super) blocked: Arc<BlockedFn>,
    /// Shadow mode: a refused request goes on without an entry, marked with its refusal.
    pub(super) shadow: bool,
    /// The rate-limit fields of admitted responses (`None`: off).
    pub(super) admitted: super::fields::RateLimitFields,
    /// A `by_route` layer's warnings of rules that cannot apply.
    pub(super) route_check: Option<Arc<super::route_check::RouteCheck>>,
    /// How a request's criticality, tenant and deadline are read.
    pub(super) claims: super::claims::Claims,
    /// What a call whose future is dropped before its response head counts.
    pub(super) on_dropped: super::OnDropped,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resource = match &self.resource {
            Selector::Fixed(resource) => resource.name().to_owned(),
            Selector::Named(name) => name.to_string(),
            Selector::Dynamic(_) => "<per request>".to_owned(),
            Selector::Default(_) => DEFAULT_RESOURCE.to_owned(),
        };
        f.debug_struct("Config")
            .field("resource", &resource)
            .field("traffic", &self.traffic)
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
    }
}
