//! The Linux probe on fixture trees: host, cgroup v2 and v1, with and without a quota.

use crate::system::{LinuxProbe, LoadSignal, SystemProbe};
use crate::ManualClock;
use std::fs;
use std::path::Path;
use tempfile::TempDir;

struct Fixture {
    dir: TempDir,
    clock: ManualClock,
}

impl Fixture {
    fn new() -> Self {
        let fixture = Self {
            dir: tempfile::tempdir().unwrap(),
            clock: ManualClock::starting_at_millis(1_700_000_000_000),
        };
        fixture.write("proc/loadavg", "3.25 2.00 1.50 2/345 6789\n");
        fixture.write("proc/self/cgroup", "0::/\n");
        fixture.write(
            "proc/stat",
            "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\n",
        );
        fs::create_dir_all(fixture.path("cgroup")).unwrap();
        fixture
    }

    fn path(&self, relative: &str) -> std::path::PathBuf {
        self.dir.path().join(relative)
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.path(relative);
        fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).unwrap();
        fs::write(path, text).unwrap();
    }

    fn probe(&self, signal: LoadSignal) -> LinuxProbe {
        LinuxProbe::builder()
            .proc_root(self.path("proc"))
            .cgroup_root(self.path("cgroup"))
            .load_signal(signal)
            .clock(self.clock.clone())
            .manual_refresh()
            .build()
    }

    /// Samples, moves time by a second and applies `change`, samples again.
    fn two_samples(&self, probe: &LinuxProbe, change: impl FnOnce(&Self)) {
        probe.refresh();
        self.clock.advance_millis(1_000);
        change(self);
        probe.refresh();
    }
}

#[test]
fn host_cpu_from_proc_stat_and_load1_from_loadavg() {
    let fixture = Fixture::new();
    let probe = fixture.probe(LoadSignal::Auto);
    probe.refresh();
    assert_eq!(probe.load(), 3.25, "load1 is known from the first sample");
    assert_eq!(probe.cpu_usage(), -1.0, "CPU needs two samples");
    fixture.clock.advance_millis(1_000);
    // +300 busy (user 200, system 100) and +100 idle (idle 60, iowait 40): 75% busy.
    fixture.write("proc/stat", "cpu  300 0 200 860 40 0 0 0 0 0\n");
    probe.refresh();
    assert_eq!(probe.cpu_usage(), 0.75);
    assert_eq!(probe.cpu_source(), ("host", None));
}

#[test]
fn cgroup_v2_with_a_quota_measures_against_the_quota_and_reports_pressure_load() {
    let fixture = Fixture::new();
    fixture.write("cgroup/cgroup.controllers", "cpu io memory\n");
    fixture.write("cgroup/cpu.max", "200000 100000\n"); // 2 CPUs
    fixture.write("cgroup/cpu.stat", "usage_usec 1000000\nthrottled_usec 0\n");
    fixture.write(
        "cgroup/cpu.pressure",
        "some avg10=20.00 avg60=10.00 avg300=5.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    );
    let probe = fixture.probe(LoadSignal::Auto);
    fixture.two_samples(&probe, |f| {
        // 1.5 CPU-seconds in one second: 75% of the 2-CPU quota.
        f.write("cgroup/cpu.stat", "usage_usec 2500000\nthrottled_usec 0\n");
    });
    assert_eq!(probe.cpu_usage(), 0.75);
    // 1.5 tasks running on average + 20% of the time someone waited.
    assert!((probe.load() - 1.7).abs() < 1e-12, "{}", probe.load());
    assert_eq!(probe.cpu_source(), ("cgroup v2", Some(2.0)));

    let host = fixture.probe(LoadSignal::HostLoad1);
    host.refresh();
    assert_eq!(host.load(), 3.25);
}

#[test]
fn cgroup_v2_without_pressure_counts_throttled_time_as_waiting() {
    let fixture = Fixture::new();
    fixture.write("cgroup/cgroup.controllers", "cpu\n");
    fixture.write("cgroup/cpu.max", "100000 100000\n");
    fixture.write("cgroup/cpu.stat", "usage_usec 0\nthrottled_usec 0\n");
    let probe = fixture.probe(LoadSignal::Auto);
    fixture.two_samples(&probe, |f| {
        f.write(
            "cgroup/cpu.stat",
            "usage_usec 1200000\nthrottled_usec 300000\n",
        );
    });
    assert_eq!(probe.cpu_usage(), 1.0, "clamped at the whole quota");
    assert!((probe.load() - 1.5).abs() < 1e-12, "{}", probe.load());
}

#[test]
fn cgroup_v2_follows_the_process_path() {
    let fixture = Fixture::new();
    fixture.write("proc/self/cgroup", "0::/kubepods/pod7/app\n");
    fixture.write("cgroup/cgroup.controllers", "cpu\n");
    fixture.write("cgroup/kubepods/pod7/app/cpu.max", "50000 100000\n"); // half a CPU
    fixture.write("cgroup/kubepods/pod7/app/cpu.stat", "usage_usec 0\n");
    let probe = fixture.probe(LoadSignal::Auto);
    fixture.two_samples(&probe, |f| {
        f.write("cgroup/kubepods/pod7/app/cpu.stat", "usage_usec 250000\n");
    });
    assert_eq!(probe.cpu_source(), ("cgroup v2", Some(0.5)));
    assert_eq!(probe.cpu_usage(), 0.5);
}

#[test]
fn cgroup_v2_without_a_quota_reads_the_host() {
    let fixture = Fixture::new();
    fixture.write("cgroup/cgroup.controllers", "cpu\n");
    fixture.write("cgroup/cpu.max", "max 100000\n");
    fixture.write("cgroup/cpu.stat", "usage_usec 0\n");
    let probe = fixture.probe(LoadSignal::Auto);
    fixture.two_samples(&probe, |f| {
        f.write("proc/stat", "cpu  150 0 150 900 0 0 0 0 0 0\n");
    });
    assert_eq!(probe.cpu_source(), ("host", None));
    assert_eq!(probe.cpu_usage(), 0.5);
    assert_eq!(probe.load(), 3.25);
    let container = fixture.probe(LoadSignal::Container);
    container.refresh();
    assert_eq!(container.load(), -1.0, "no quota: no container load");
}

#[test]
fn cgroup_v1_with_a_quota() {
    let fixture = Fixture::new();
    fixture.write("proc/self/cgroup", "5:cpuacct,cpu:/\n4:memory:/\n");
    fixture.write("cgroup/cpu,cpuacct/cpu.cfs_quota_us", "50000\n");
    fixture.write("cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    fixture.write("cgroup/cpu,cpuacct/cpuacct.usage", "0\n");
    fixture.write(
        "cgroup/cpu,cpuacct/cpu.stat",
        "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
    );
    let probe = fixture.probe(LoadSignal::Auto);
    fixture.two_samples(&probe, |f| {
        f.write("cgroup/cpu,cpuacct/cpuacct.usage", "250000000\n"); // 0.25 CPU-seconds
        f.write(
            "cgroup/cpu,cpuacct/cpu.stat",
            "nr_periods 10\nnr_throttled 1\nthrottled_time 100000000\n",
        );
    });
    assert_eq!(probe.cpu_source(), ("cgroup v1", Some(0.5)));
    assert_eq!(probe.cpu_usage(), 0.5);
    assert!((probe.load() - 0.35).abs() < 1e-12, "{}", probe.load());
}

#[test]
fn cgroup_v1_without_a_quota_reads_the_host() {
    let fixture = Fixture::new();
    fixture.write("proc/self/cgroup", "5:cpu,cpuacct:/\n");
    fixture.write("cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    fixture.write("cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    fixture.write("cgroup/cpu,cpuacct/cpuacct.usage", "0\n");
    let probe = fixture.probe(LoadSignal::Auto);
    probe.refresh();
    assert_eq!(probe.cpu_source(), ("host", None));
    assert_eq!(probe.load(), 3.25);
}

#[test]
fn unreadable_files_give_unknown_readings() {
    let fixture = Fixture::new();
    fs::remove_file(fixture.path("proc/loadavg")).unwrap();
    fs::remove_file(fixture.path("proc/stat")).unwrap();
    let probe = fixture.probe(LoadSignal::Auto);
    fixture.two_samples(&probe, |_| {});
    assert_eq!((probe.load(), probe.cpu_usage()), (-1.0, -1.0));
}

/// What no kernel writes, but a parser must survive: `nan`, `inf`, negative numbers, counters
/// that would overflow when summed. Each reading stays unknown rather than NaN or infinite, and
/// nothing panics (found by the `probe` fuzz target's properties).
#[test]
fn readings_a_kernel_never_writes_are_unknown_not_nan() {
    let fixture = Fixture::new();
    fixture.write("proc/loadavg", "nan 0 0 1/1 1\n");
    fixture.write(
        "proc/stat",
        "cpu  18446744073709551615 1 1 18446744073709551615 1 0 0 0 0 0\n",
    );
    let probe = fixture.probe(LoadSignal::Auto);
    fixture.two_samples(&probe, |_| {});
    assert_eq!(probe.load(), -1.0);
    assert!((0.0..=1.0).contains(&probe.cpu_usage()) || probe.cpu_usage() == -1.0);

    let fixture = Fixture::new();
    fixture.write("cgroup/cgroup.controllers", "cpu\n");
    fixture.write("cgroup/cpu.max", "inf inf\n");
    let probe = fixture.probe(LoadSignal::Auto);
    probe.refresh();
    assert_eq!(
        probe.cpu_source(),
        ("host", None),
        "an infinite quota is no quota"
    );

    let fixture = Fixture::new();
    fixture.write("cgroup/cgroup.controllers", "cpu\n");
    fixture.write("cgroup/cpu.max", "200000 100000\n");
    fixture.write("cgroup/cpu.stat", "usage_usec 1000000\nthrottled_usec 0\n");
    fixture.write(
        "cgroup/cpu.pressure",
        "some avg10=nan avg60=0 avg300=0 total=0\n",
    );
    let probe = fixture.probe(LoadSignal::Auto);
    fixture.two_samples(&probe, |f| {
        f.write("cgroup/cpu.stat", "usage_usec 2000000\nthrottled_usec 0\n");
    });
    assert!(probe.load().is_finite(), "{}", probe.load());
}
