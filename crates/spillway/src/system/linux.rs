//! The probe of a Linux host or container: `/proc` and `/sys/fs/cgroup`, sampled once a second.

use super::cgroup::{self, CpuSource};
use super::probe::Readings;
use super::SystemProbe;
use crate::clock::{AnyClock, Clock, SystemClock};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Once, OnceLock, Weak};
use std::time::Duration;

/// Which load signal a [`LinuxProbe`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoadSignal {
    /// The container's load when a CPU quota applies, else the host's load1.
    #[default]
    Auto,
    /// The host's load1 (`/proc/loadavg`), as Sentinel reads it.
    HostLoad1,
    /// The container's load (unknown when no CPU quota applies).
    Container,
}

/// A [`SystemProbe`] for Linux, container aware.
///
/// **CPU usage.** Without a CPU quota, the host's busy share from `/proc/stat`. Inside a cgroup
/// with a quota (v2 `cpu.max`; v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`), the CPU time the
/// cgroup used (v2 `cpu.stat` `usage_usec`; v1 `cpuacct.usage`) per second of wall time, as a
/// share of the quota: a container using its whole 2-CPU quota reads 1.0 on a 64-core host that
/// is mostly idle. Clamped to 0..1.
///
/// **Load.** The host's load1 counts every task on the host and averages over a minute, so in a
/// container it mostly measures the neighbours, and it lags (the seed's "recovers too slowly").
/// With a quota, the probe reports a load for the container instead, in the same unit (tasks
/// wanting a CPU): the CPUs the cgroup used over the last second (tasks running, on average)
/// plus the share of time its tasks waited for CPU (tasks waiting, at least): cgroup v2's CPU
/// pressure `some avg10` where the kernel has it (`cpu.pressure`), otherwise the share of time
/// the cgroup was throttled (`throttled_usec`, v1 `throttled_time`). A container with a 2-CPU
/// quota that is saturated and queueing reads above 2, like a host's load1 above its core count;
/// set `highest_system_load` against the quota's CPUs. [`LoadSignal`] overrides the choice.
///
/// Readings are refreshed once a second by a background thread, started on the first read (and
/// ended when the probe is dropped); until two samples exist, CPU usage and the container load
/// read -1 (unknown, never firing a check). Files that cannot be read also give unknown.
///
/// # Examples
///
/// ```
/// use spillway::system::{LinuxProbe, SystemProbe};
///
/// let probe = LinuxProbe::global();
/// let _load = probe.load(); // -1 until the sampler's first reading
/// ```
#[derive(Clone)]
pub struct LinuxProbe {
    inner: Arc<Inner>,
}

struct Inner {
    readings: Readings,
    proc_root: PathBuf,
    cgroup_root: PathBuf,
    signal: LoadSignal,
    clock: AnyClock,
    background: bool,
    started: Once,
    state: Mutex<State>,
}

/// What the previous sample read.
#[derive(Debug, Default)]
struct State {
    source: Option<CpuSource>,
    last: Option<Sample>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at_nanos: u64,
    /// Host: (idle, total) jiffies.
    host: Option<(u64, u64)>,
    /// cgroup: CPU time used and time throttled, nanoseconds.
    used_nanos: Option<u64>,
    throttled_nanos: Option<u64>,
}

/// Builds a [`LinuxProbe`] (see [`LinuxProbe::builder`]).
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct LinuxProbeBuilder {
    proc_root: PathBuf,
    cgroup_root: PathBuf,
    signal: LoadSignal,
    clock: AnyClock,
    background: bool,
}

impl LinuxProbeBuilder {
    /// Where `/proc` is (default `/proc`); tests point it at fixtures.
    pub fn proc_root(mut self, path: impl Into<PathBuf>) -> Self {
        self.proc_root = path.into();
        self
    }

    /// Where the cgroup hierarchy is mounted (default `/sys/fs/cgroup`).
    pub fn cgroup_root(mut self, path: impl Into<PathBuf>) -> Self {
        self.cgroup_root = path.into();
        self
    }

    /// Which load signal to report (default [`LoadSignal::Auto`]).
    pub fn load_signal(mut self, signal: LoadSignal) -> Self {
        self.signal = signal;
        self
    }

    /// The clock that times samples (default [`SystemClock`]).
    pub fn clock<C: Clock>(mut self, clock: C) -> Self {
        self.clock = AnyClock::from_clock(clock);
        self
    }

    /// No background sampler: readings change only on [`LinuxProbe::refresh`] (for tests, or
    /// for a caller that samples on its own schedule).
    pub fn manual_refresh(mut self) -> Self {
        self.background = false;
        self
    }

    /// The probe.
    pub fn build(self) -> LinuxProbe {
        LinuxProbe {
            inner: Arc::new(Inner {
                readings: Readings::unknown(),
                proc_root: self.proc_root,
                cgroup_root: self.cgroup_root,
                signal: self.signal,
                clock: self.clock,
                background: self.background,
                started: Once::new(),
                state: Mutex::new(State::default()),
            }),
        }
    }
}

impl LinuxProbe {
    /// A builder, for the paths, the load signal and the clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::system::{LinuxProbe, LoadSignal};
    ///
    /// let probe = LinuxProbe::builder().load_signal(LoadSignal::HostLoad1).build();
    /// # let _ = probe;
    /// ```
    pub fn builder() -> LinuxProbeBuilder {
        LinuxProbeBuilder {
            proc_root: PathBuf::from("/proc"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            signal: LoadSignal::Auto,
            clock: AnyClock::from_clock(SystemClock::new()),
            background: true,
        }
    }

    /// The process-wide probe on the real `/proc` and `/sys/fs/cgroup`, shared by every
    /// [`Spillway`](crate::Spillway) that is not given another.
    pub fn global() -> &'static LinuxProbe {
        static GLOBAL: OnceLock<LinuxProbe> = OnceLock::new();
        GLOBAL.get_or_init(|| LinuxProbe::builder().build())
    }

    /// Samples now: reads the files and updates the readings (CPU usage and the container load
    /// from the change since the previous sample).
    pub fn refresh(&self) {
        self.inner.refresh();
    }

    /// Where CPU time is read from: `"host"`, `"cgroup v2"` or `"cgroup v1"`, and the quota in
    /// CPUs if one applies (as of the latest sample).
    pub fn cpu_source(&self) -> (&'static str, Option<f64>) {
        let state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        match &state.source {
            None | Some(CpuSource::Host) => ("host", None),
            Some(source @ CpuSource::V2 { .. }) => ("cgroup v2", source.quota_cpus()),
            Some(source @ CpuSource::V1 { .. }) => ("cgroup v1", source.quota_cpus()),
        }
    }

    fn ensure_started(&self) {
        if !self.inner.background {
            return;
        }
        self.inner.started.call_once(|| {
            let weak = Arc::downgrade(&self.inner);
            let spawned = std::thread::Builder::new()
                .name("spillway-probe".into())
                .spawn(move || sample_every_second(&weak));
            // Without a thread the readings stay unknown, and no check fires on them.
            drop(spawned);
        });
    }
}

/// The sampler: one sample a second while the probe lives.
fn sample_every_second(probe: &Weak<Inner>) {
    loop {
        match probe.upgrade() {
            Some(inner) => inner.refresh(),
            None => return,
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

impl Inner {
    fn refresh(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let read = |path: PathBuf| cgroup::read(&path);
        let source = state
            .source
            .get_or_insert_with(|| {
                let self_cgroup = read(self.proc_root.join("self/cgroup")).unwrap_or_default();
                cgroup::discover(&self.cgroup_root, &self_cgroup)
            })
            .clone();
        let now = self.clock.now_nanos();
        let sample = Sample {
            at_nanos: now,
            host: read(self.proc_root.join("stat")).and_then(|t| cgroup::proc_stat_cpu(&t)),
            used_nanos: match &source {
                CpuSource::Host => None,
                CpuSource::V2 { dir, .. } => read(dir.join("cpu.stat"))
                    .and_then(|t| cgroup::keyed(&t, "usage_usec"))
                    .map(|us| us.saturating_mul(1_000)),
                CpuSource::V1 { acct_dir, .. } => {
                    read(acct_dir.join("cpuacct.usage")).and_then(|t| t.trim().parse().ok())
                }
            },
            throttled_nanos: match &source {
                CpuSource::Host => None,
                CpuSource::V2 { dir, .. } => read(dir.join("cpu.stat"))
                    .and_then(|t| cgroup::keyed(&t, "throttled_usec"))
                    .map(|us| us.saturating_mul(1_000)),
                CpuSource::V1 { cpu_dir, .. } => {
                    read(cpu_dir.join("cpu.stat")).and_then(|t| cgroup::keyed(&t, "throttled_time"))
                }
            },
        };
        let pressure = match &source {
            CpuSource::V2 { dir, .. } => {
                read(dir.join("cpu.pressure")).and_then(|t| cgroup::psi_some_avg10(&t))
            }
            _ => None,
        };
        let host_load1 = read(self.proc_root.join("loadavg")).and_then(|t| cgroup::load1(&t));

        let previous = state.last.replace(sample);
        let delta = |now: Option<u64>, then: Option<u64>| Some(now?.checked_sub(then?)? as f64);
        let (mut cpu, mut container_load) = (None, None);
        if let Some(previous) = previous {
            let wall = sample.at_nanos.saturating_sub(previous.at_nanos) as f64;
            match source.quota_cpus() {
                Some(quota) if wall > 0.0 => {
                    if let Some(used) = delta(sample.used_nanos, previous.used_nanos) {
                        let used_cpus = used / wall;
                        cpu = Some((used_cpus / quota).clamp(0.0, 1.0));
                        let waiting = pressure.map(|percent| percent / 100.0).or_else(|| {
                            delta(sample.throttled_nanos, previous.throttled_nanos)
                                .map(|throttled| (throttled / wall).clamp(0.0, 1.0))
                        });
                        container_load = Some(used_cpus + waiting.unwrap_or(0.0));
                    }
                }
                Some(_) => {}
                None => {
                    if let (Some((idle, total)), Some((idle0, total0))) =
                        (sample.host, previous.host)
                    {
                        let total = total.saturating_sub(total0) as f64;
                        let idle = idle.saturating_sub(idle0) as f64;
                        if total > 0.0 {
                            cpu = Some((1.0 - idle / total).clamp(0.0, 1.0));
                        }
                    }
                }
            }
        }
        let load = match (self.signal, source.quota_cpus()) {
            (LoadSignal::HostLoad1, _) | (LoadSignal::Auto, None) => host_load1,
            (LoadSignal::Container, _) | (LoadSignal::Auto, Some(_)) => container_load,
        };
        self.readings.set_cpu(cpu.unwrap_or(-1.0));
        self.readings.set_load(load.unwrap_or(-1.0));
    }
}

impl SystemProbe for LinuxProbe {
    fn load(&self) -> f64 {
        self.ensure_started();
        self.inner.readings.load()
    }

    fn cpu_usage(&self) -> f64 {
        self.ensure_started();
        self.inner.readings.cpu()
    }
}

impl fmt::Debug for LinuxProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinuxProbe")
            .field("proc_root", &self.inner.proc_root)
            .field("cgroup_root", &self.inner.cgroup_root)
            .field("signal", &self.inner.signal)
            .field("load", &self.inner.readings.load())
            .field("cpu_usage", &self.inner.readings.cpu())
            .finish_non_exhaustive()
    }
}
