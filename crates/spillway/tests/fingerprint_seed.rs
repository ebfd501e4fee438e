//! A key's fingerprint is stable within a process and differs between processes (its seed is
//! random per process), so that which keys crowd another cannot be computed from outside.

use spillway::keyed::fingerprint;
use std::process::Command;

/// Set in the child processes: print the fingerprint of "alice" and stop.
const CHILD: &str = "SPILLWAY_TEST_PRINT_FINGERPRINT";

fn child_fingerprint() -> String {
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "each_process_has_its_own_seed", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("the test binary runs");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("fingerprint="))
        .unwrap_or_else(|| panic!("no fingerprint in {stdout}"))
        .to_owned()
}

#[test]
fn each_process_has_its_own_seed() {
    if std::env::var_os(CHILD).is_some() {
        println!("fingerprint={:016x}", fingerprint("alice"));
        return;
    }
    assert_eq!(fingerprint("alice"), fingerprint(&String::from("alice")));
    let (first, second) = (child_fingerprint(), child_fingerprint());
    // Equal once in 2^64 if the seeds are random.
    assert_ne!(first, second, "two processes, one fingerprint");
    assert_ne!(first, format!("{:016x}", fingerprint("alice")));
}
