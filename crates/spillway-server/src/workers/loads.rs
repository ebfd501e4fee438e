//! Each worker's open connections, for the balancer and the metrics.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Each worker's open connections (those placed on it and not yet closed).
#[derive(Debug)]
pub(crate) struct Loads(pub(super) Box<[AtomicUsize]>);

impl Loads {
    /// Each worker's open connections, in worker order.
    pub(crate) fn get(&self) -> Vec<usize> {
        self.0
            .iter()
            .map(|load| load.load(Ordering::Relaxed))
            .collect()
    }
}
