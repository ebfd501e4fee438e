//! What a route's admissions count: a pass, or in shadow mode a refusal that was let through
//! (counted, and logged at most once a second).

use crate::log_sampled::Sampled;
use crate::metrics::{Metrics, ResourceMetrics};
use std::sync::Arc;
use std::time::Duration;

/// One route's admission counts, shared by the services of its stack.
#[derive(Debug)]
pub(crate) struct Tally {
    resource: String,
    counters: ResourceMetrics,
    metrics: Arc<Metrics>,
    shadow_log: Arc<Sampled>,
}

impl Tally {
    pub(crate) fn new(
        resource: &str,
        counters: ResourceMetrics,
        metrics: Arc<Metrics>,
        shadow_log: Arc<Sampled>,
    ) -> Self {
        Self {
            resource: resource.to_owned(),
            counters,
            metrics,
            shadow_log,
        }
    }

    /// An admission.
    pub(crate) fn passed(&self) {
        self.counters.passed();
    }

    /// An admission of a request of `class` that carries a claim, held `waited` since it
    /// arrived.
    pub(crate) fn admitted_class(&self, class: spillway::Criticality, waited: Duration) {
        self.metrics.classes.admitted(class, waited);
    }

    /// Its resource.
    pub(crate) fn resource(&self) -> &str {
        &self.resource
    }

    /// A refusal by the check `kind` that shadow mode let through: counted, and logged with
    /// `reason` at most once a second (with the count since the last line).
    pub(crate) fn shadowed(&self, kind: &'static str, reason: &str) {
        self.metrics.count(&self.resource, "shadow_block", kind);
        if let Some(count) = self.shadow_log.note(tokio::time::Instant::now()) {
            let resource = &self.resource;
            tracing::info!(%resource, %reason, count, "shadow mode: would block (count: since the last such line)");
        }
    }
}
