//! Where system rules read the machine's state.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The machine (or container) readings a system rule checks: a load signal and CPU usage.
///
/// Readings are taken elsewhere (a sampler, a test) and only read here, so both methods must be
/// cheap: they run on every inbound entry while a system rule with a load or CPU threshold is
/// loaded. A negative or NaN reading means "unknown" and never fires a check.
pub trait SystemProbe: Send + Sync + fmt::Debug + 'static {
    /// The load signal compared with `highest_system_load`: the host's load1 or, in a container
    /// with a CPU quota, a load for the container (see [`LinuxProbe`](super::LinuxProbe)).
    fn load(&self) -> f64;

    /// CPU usage from 0 to 1: of the host, or of the container's CPU quota.
    fn cpu_usage(&self) -> f64;
}

impl<P: SystemProbe + ?Sized> SystemProbe for Arc<P> {
    fn load(&self) -> f64 {
        (**self).load()
    }

    fn cpu_usage(&self) -> f64 {
        (**self).cpu_usage()
    }
}

/// A probe whose readings are set by hand, for tests and simulations. Clones share readings.
/// Starts unknown (-1, as Sentinel's listener before its first sample).
///
/// # Examples
///
/// ```
/// use spillway::system::{ManualProbe, SystemProbe};
///
/// let probe = ManualProbe::new();
/// assert_eq!(probe.load(), -1.0);
/// probe.set_load(3.5);
/// probe.set_cpu_usage(0.9);
/// assert_eq!((probe.load(), probe.cpu_usage()), (3.5, 0.9));
/// ```
#[derive(Clone)]
pub struct ManualProbe {
    readings: Arc<Readings>,
}

/// Two readings stored as `f64` bits, each read and written atomically.
pub(crate) struct Readings {
    load: AtomicU64,
    cpu: AtomicU64,
}

impl Readings {
    pub(crate) fn unknown() -> Self {
        Self {
            load: AtomicU64::new((-1.0f64).to_bits()),
            cpu: AtomicU64::new((-1.0f64).to_bits()),
        }
    }

    pub(crate) fn load(&self) -> f64 {
        f64::from_bits(self.load.load(Ordering::Relaxed))
    }

    pub(crate) fn cpu(&self) -> f64 {
        f64::from_bits(self.cpu.load(Ordering::Relaxed))
    }

    pub(crate) fn set_load(&self, load: f64) {
        self.load.store(load.to_bits(), Ordering::Relaxed);
    }

    pub(crate) fn set_cpu(&self, cpu: f64) {
        self.cpu.store(cpu.to_bits(), Ordering::Relaxed);
    }
}

impl ManualProbe {
    /// A probe with unknown readings.
    pub fn new() -> Self {
        Self {
            readings: Arc::new(Readings::unknown()),
        }
    }

    /// Sets the load reading.
    pub fn set_load(&self, load: f64) {
        self.readings.set_load(load);
    }

    /// Sets the CPU usage reading (0..1).
    pub fn set_cpu_usage(&self, usage: f64) {
        self.readings.set_cpu(usage);
    }
}

impl Default for ManualProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl SystemProbe for ManualProbe {
    fn load(&self) -> f64 {
        self.readings.load()
    }

    fn cpu_usage(&self) -> f64 {
        self.readings.cpu()
    }
}

impl fmt::Debug for ManualProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualProbe")
            .field("load", &self.load())
            .field("cpu_usage", &self.cpu_usage())
            .finish()
    }
}
