//! What is read from spillway at each scrape: each resource's in-flight count and rates, and each
//! kind of rule's metrics (through [`KindMetrics`], each kind's own).

use super::{gauges, KindsMetrics, Sources};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use std::fmt;

/// Gauges read from spillway at each scrape: concurrency and QPS per resource, and each kind's
/// rules loaded and own series.
#[derive(Debug)]
pub(super) struct Live {
    pub(super) spillway: spillway::Spillway,
    /// The cluster rules, leased and strict.
    pub(super) cluster: std::sync::Arc<crate::cluster::ClusterLimits>,
    pub(super) kinds: KindsMetrics,
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let snapshot = self.spillway.snapshot();
        gauges(
            &mut encoder,
            "spillway_concurrency",
            "Requests in flight, by resource",
            snapshot.resources.iter().map(|r| {
                (
                    vec![("resource", r.name.to_string().into())],
                    r.stats.concurrency as f64,
                )
            }),
        )?;
        gauges(
            &mut encoder,
            "spillway_pass_qps",
            "Admitted per second over the sliding second window, by resource",
            snapshot.resources.iter().map(|r| {
                (
                    vec![("resource", r.name.to_string().into())],
                    r.stats.pass_qps,
                )
            }),
        )?;
        gauges(
            &mut encoder,
            "spillway_block_qps",
            "Refused per second over the sliding second window, by resource",
            snapshot.resources.iter().map(|r| {
                (
                    vec![("resource", r.name.to_string().into())],
                    r.stats.block_qps,
                )
            }),
        )?;
        let from = Sources {
            spillway: &self.spillway,
            cluster: &self.cluster,
        };
        let kinds = self.kinds.get().map_or(&[][..], Vec::as_slice);
        for kind in kinds {
            kind.encode(&mut encoder, from)?;
        }
        gauges(
            &mut encoder,
            "spillway_rules",
            "Rules loaded, by kind",
            kinds.iter().map(|kind| {
                let loaded = kind.loaded(from) as f64;
                (vec![("kind", kind.label().into())], loaded)
            }),
        )?;
        Ok(())
    }
}
