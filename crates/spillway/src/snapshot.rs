//! Read-only copies of statistics, for metrics and dashboards.

use crate::resource::Resource;
use crate::stats::NodeStats;
use std::sync::Arc;

/// Every resource's statistics at one time ([`Spillway::snapshot`](crate::Spillway::snapshot)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Snapshot {
    /// The clock reading the snapshot was taken at, nanoseconds.
    pub at_nanos: u64,
    /// The global inbound node.
    pub inbound: NodeStats,
    /// Each resource, in registration order (the overflow resource last, if it was used).
    pub resources: Vec<ResourceSnapshot>,
    /// Entries for new names that met a full registry.
    pub resource_overflows: u64,
}

/// One resource's statistics.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ResourceSnapshot {
    /// The resource name.
    pub name: Arc<str>,
    /// Its statistics.
    pub stats: NodeStats,
    /// Per-origin statistics, in first-seen order (the overflow origin last, if it was used).
    pub origins: Vec<(Arc<str>, NodeStats)>,
    /// Entries whose origin met the origin cap.
    pub origin_overflows: u64,
}

impl ResourceSnapshot {
    pub(crate) fn read(resource: &Resource, now: u64) -> Self {
        let inner = &resource.inner;
        Self {
            name: inner.name.clone(),
            stats: inner.node.stats(now),
            origins: inner.origins.snapshot(now),
            origin_overflows: inner.origins.overflows(),
        }
    }
}
