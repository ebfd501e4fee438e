//! The resources of one `Spillway`, capped.

use crate::block::{BlockError, BlockKind};
use crate::bounded_map::BoundedMap;
use crate::core::Core;
use crate::resource::{Resolved, Resource};
use crate::stats::StripedCounter;
use std::fmt;
use std::sync::Arc;

/// Sentinel's cap on resources (`Constants.MAX_SLOT_CHAIN_SIZE`).
pub const DEFAULT_MAX_RESOURCES: usize = 6_000;

/// Name of the resource that collects entries for new names once the registry is full, under
/// [`OverflowPolicy::Overflow`].
pub const OVERFLOW_RESOURCE: &str = "__overflow__";

/// What happens to an entry for a new resource name once the registry holds its cap.
///
/// Sentinel lets such entries through unchecked and uncounted. spillway never does that silently:
/// either they are counted (and later checked) as one shared overflow resource, or refused. Every
/// use of the policy is counted ([`Spillway::resource_overflows`](crate::Spillway::resource_overflows)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OverflowPolicy {
    /// Count the entry under the shared [`OVERFLOW_RESOURCE`] (the default).
    #[default]
    Overflow,
    /// Refuse the entry with [`BlockKind::ResourceCap`].
    Reject,
}

pub(crate) struct Registry {
    resources: BoundedMap<Resource>,
    overflow: Resource,
    policy: OverflowPolicy,
    overflows: StripedCounter,
    core: Arc<Core>,
}

impl Registry {
    pub(crate) fn new(core: Arc<Core>, capacity: usize, policy: OverflowPolicy) -> Self {
        Self {
            resources: BoundedMap::new(capacity),
            overflow: Resource::new(Arc::from(OVERFLOW_RESOURCE), core.clone()),
            policy,
            overflows: StripedCounter::new(),
            core,
        }
    }

    #[inline]
    pub(crate) fn resolve(&self, name: &str) -> Resolved<'_> {
        if let Some((_, resource)) = self.resources.get(name) {
            return Ok(resource);
        }
        self.resolve_slow(name)
    }

    #[cold]
    fn resolve_slow(&self, name: &str) -> Resolved<'_> {
        // A new resource reads the rules in force: hold the rules lock so that a load cannot
        // slip between that read and the resource becoming visible to the load.
        let _lock = self
            .core
            .rules_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.resolve_locked(name)
    }

    /// [`resolve`](Self::resolve) for a caller that holds the core's rules lock.
    pub(crate) fn resolve_locked(&self, name: &str) -> Resolved<'_> {
        let core = &self.core;
        match self
            .resources
            .get_or_insert_with(name, |key| Resource::new(key.clone(), core.clone()))
        {
            Ok((_, resource)) => Ok(resource),
            Err(_) => {
                self.overflows.increment();
                match self.policy {
                    OverflowPolicy::Overflow => Ok(&self.overflow),
                    OverflowPolicy::Reject => {
                        let cap = self.resources.capacity() as f64;
                        Err(BlockError::owned(BlockKind::ResourceCap, name, cap, cap))
                    }
                }
            }
        }
    }

    /// The resource `name`, if it is registered (never registers it).
    pub(crate) fn get(&self, name: &str) -> Option<&Resource> {
        self.resources.get(name).map(|(_, resource)| resource)
    }

    /// Whether the resource `name` has been registered (entered or resolved).
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.resources.get(name).is_some()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Resource> {
        self.resources.iter().map(|(_, r)| r)
    }

    pub(crate) fn overflow(&self) -> &Resource {
        &self.overflow
    }

    pub(crate) fn overflows(&self) -> u64 {
        self.overflows.sum()
    }

    pub(crate) fn len(&self) -> usize {
        self.resources.len()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("resources", &self.resources)
            .field("policy", &self.policy)
            .field("overflows", &self.overflows())
            .finish()
    }
}
