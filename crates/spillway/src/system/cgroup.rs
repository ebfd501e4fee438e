//! Where CPU time is accounted (the host, or a cgroup v1 or v2 with a CPU quota), and parsers
//! for the `/proc` and `/sys/fs/cgroup` files involved. Pure functions of file contents, so
//! tests run them on fixtures.

use std::fs;
use std::path::{Path, PathBuf};

/// Where this process's CPU time is accounted and limited.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum CpuSource {
    /// No CPU quota applies: the host's CPU (`/proc/stat`).
    Host,
    /// A cgroup v2 directory with a quota of `quota_cpus` CPUs (`cpu.max`).
    V2 { dir: PathBuf, quota_cpus: f64 },
    /// cgroup v1 `cpu` and `cpuacct` directories with a quota of `quota_cpus` CPUs.
    V1 {
        cpu_dir: PathBuf,
        acct_dir: PathBuf,
        quota_cpus: f64,
    },
}

impl CpuSource {
    pub(super) fn quota_cpus(&self) -> Option<f64> {
        match self {
            CpuSource::Host => None,
            CpuSource::V2 { quota_cpus, .. } | CpuSource::V1 { quota_cpus, .. } => {
                Some(*quota_cpus)
            }
        }
    }
}

/// Finds the cgroup accounting this process: `cgroup_root` is where the hierarchy is mounted
/// (`/sys/fs/cgroup`), `self_cgroup` the text of `/proc/self/cgroup`. Inside a container with a
/// cgroup namespace the process's path is `/` and the mount is the container's own cgroup.
pub(super) fn discover(cgroup_root: &Path, self_cgroup: &str) -> CpuSource {
    if cgroup_root.join("cgroup.controllers").exists() {
        let relative = self_cgroup
            .lines()
            .find_map(|line| line.strip_prefix("0::"))
            .unwrap_or("/");
        let dir = [
            cgroup_root.join(relative.trim_start_matches('/')),
            cgroup_root.to_path_buf(),
        ]
        .into_iter()
        .find(|dir| dir.join("cpu.max").exists());
        return dir
            .and_then(|dir| {
                let quota = parse_cpu_max(&read(&dir.join("cpu.max"))?)?;
                Some(CpuSource::V2 {
                    dir,
                    quota_cpus: quota,
                })
            })
            .unwrap_or(CpuSource::Host);
    }
    let relative = self_cgroup
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            controllers.split(',').any(|c| c == "cpu").then_some(path)
        })
        .next()
        .unwrap_or("/");
    let find = |mounts: &[&str], file: &str| {
        mounts.iter().find_map(|mount| {
            let base = cgroup_root.join(mount);
            [base.join(relative.trim_start_matches('/')), base]
                .into_iter()
                .find(|dir| dir.join(file).exists())
        })
    };
    let (Some(cpu_dir), Some(acct_dir)) = (
        find(&["cpu,cpuacct", "cpu"], "cpu.cfs_quota_us"),
        find(&["cpu,cpuacct", "cpuacct"], "cpuacct.usage"),
    ) else {
        return CpuSource::Host;
    };
    let quota = read(&cpu_dir.join("cpu.cfs_quota_us")).and_then(|q| q.trim().parse::<i64>().ok());
    let period =
        read(&cpu_dir.join("cpu.cfs_period_us")).and_then(|p| p.trim().parse::<i64>().ok());
    match (quota, period) {
        (Some(quota), Some(period)) if quota > 0 && period > 0 => CpuSource::V1 {
            cpu_dir,
            acct_dir,
            quota_cpus: quota as f64 / period as f64,
        },
        _ => CpuSource::Host,
    }
}

pub(super) fn read(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// A number as the kernel writes one: finite and at least 0 (`f64`'s parser also takes `nan`,
/// `inf` and negatives, which no counter of the kernel's is).
fn reading(text: &str) -> Option<f64> {
    text.parse::<f64>()
        .ok()
        .filter(|value| value.is_finite() && *value >= 0.0)
}

/// cgroup v2 `cpu.max` (`"$QUOTA $PERIOD"`, or `"max $PERIOD"` for none): the quota in CPUs.
pub(super) fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota = reading(fields.next()?)?;
    let period = reading(fields.next()?)?;
    let cpus = quota / period;
    (quota > 0.0 && period > 0.0 && cpus.is_finite() && cpus > 0.0).then_some(cpus)
}

/// The value of `key` in a flat keyed file (`cpu.stat`: `"usage_usec 123"` lines).
pub(super) fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        (fields.next()? == key).then(|| fields.next()?.parse().ok())?
    })
}

/// `some avg10` of a PSI file (`cpu.pressure`): percent of the last 10 s in which at least one
/// task waited for CPU.
pub(super) fn psi_some_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|line| line.starts_with("some "))?;
    reading(
        line.split_whitespace()
            .find_map(|field| field.strip_prefix("avg10="))?,
    )
}

/// The aggregate `cpu` line of `/proc/stat`: (idle, total) jiffies, idle counting iowait.
pub(super) fn proc_stat_cpu(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|line| line.starts_with("cpu "))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    if values.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total = values
        .iter()
        .take(8)
        .fold(0u64, |sum, value| sum.saturating_add(*value));
    let idle = values[3].saturating_add(values.get(4).copied().unwrap_or(0));
    Some((idle, total))
}

/// The first field of `/proc/loadavg`: load1.
pub(super) fn load1(text: &str) -> Option<f64> {
    reading(text.split_whitespace().next()?)
}
