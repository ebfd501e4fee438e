//! The Linux probe's `/proc` and cgroup parsers, through the probe itself: the input is split
//! at each 0xFF byte into the files it reads (`/proc/loadavg`, `/proc/stat`, `/proc/self/cgroup`,
//! and a cgroup v2 directory's `cpu.max`, `cpu.stat`, `cpu.pressure`). Never a panic, and the
//! readings are unknown (-1) or in range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway::system::{LinuxProbe, SystemProbe};
use spillway::ManualClock;

fuzz_target!(|input: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let (proc_root, cgroup_root) = (dir.path().join("proc"), dir.path().join("cgroup"));
    std::fs::create_dir_all(proc_root.join("self")).unwrap();
    std::fs::create_dir_all(&cgroup_root).unwrap();
    std::fs::write(cgroup_root.join("cgroup.controllers"), "cpu\n").unwrap();
    let files = [
        proc_root.join("loadavg"),
        proc_root.join("stat"),
        proc_root.join("self/cgroup"),
        cgroup_root.join("cpu.max"),
        cgroup_root.join("cpu.stat"),
        cgroup_root.join("cpu.pressure"),
    ];
    for (path, contents) in files.iter().zip(input.split(|&byte| byte == 0xFF)) {
        std::fs::write(path, contents).unwrap();
    }
    let clock = ManualClock::new();
    let probe = LinuxProbe::builder()
        .proc_root(&proc_root)
        .cgroup_root(&cgroup_root)
        .clock(clock.clone())
        .manual_refresh()
        .build();
    for _ in 0..2 {
        probe.refresh();
        clock.advance_millis(1_000);
    }
    let (load, cpu) = (probe.load(), probe.cpu_usage());
    assert!(
        load == -1.0 || (load.is_finite() && load >= 0.0),
        "load {load}"
    );
    assert!(cpu == -1.0 || (0.0..=1.0).contains(&cpu), "cpu {cpu}");
});
