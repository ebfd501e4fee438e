//! The binary's `check` subcommand: exit status and the error it prints.

use std::process::Command;

fn check(text: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spillway.toml");
    std::fs::write(&path, text).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).replace(&path.display().to_string(), "FILE"),
        String::from_utf8_lossy(&output.stderr).replace(&path.display().to_string(), "FILE"),
    )
}

#[test]
fn a_good_file_passes() {
    let (ok, stdout, _) = check("[listener]\nlisten = \"127.0.0.1:8080\"\n");
    assert!(ok);
    assert_eq!(stdout, "FILE: ok\n");
}

#[test]
fn a_bad_file_fails_with_file_line_and_field() {
    let (ok, _, stderr) = check("[[flow]]\nid = \"x\"\nresource = \"a\"\ncount = -2\n");
    assert!(!ok);
    assert_eq!(
        stderr,
        "error: FILE:4:1: `flow[0].count`: must be finite and at least 0, got -2\n"
    );
}

#[test]
fn a_missing_file_fails() {
    let output = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["check", "--config", "/nonexistent/spillway.toml"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("error: /nonexistent/spillway.toml: cannot read"),
        "{stderr}"
    );
}

#[test]
fn the_bundled_demo_configuration_is_valid() {
    let config = spillway_server::demo::demo_config("127.0.0.1:1".parse().unwrap()).unwrap();
    assert_eq!(config.routes.len(), 4);
    assert_eq!(config.flow.len(), 3);
    // Its adaptive rule starts open: the demo starts below capacity.
    let protect = &config.adaptive[0].get_ref().algorithm;
    assert!(
        matches!(protect, spillway::adaptive::AdaptiveAlgorithm::EnvoyGradient(c) if c.start_limit == 50),
        "{protect:?}"
    );
}

#[test]
fn the_example_configuration_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/spillway.example.toml");
    let config = spillway_server::checked::load(std::path::Path::new(path)).unwrap();
    assert_eq!((config.routes.len(), config.flow.len()), (3, 4));
    assert_eq!((config.system.len(), config.breakers.len()), (1, 1));
    assert_eq!((config.cluster_rules.len(), config.keyed.len()), (1, 2));
    assert!(config.cluster.is_some() && config.access_log.is_some());
}

#[test]
fn the_example_configuration_has_every_section_the_reference_lists() {
    let example = include_str!("../spillway.example.toml");
    let reference = include_str!("../../../docs/config.md");
    // The reference's table of sections: each row's first cell names one or more.
    let table = reference
        .split("Sections, all optional:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n## ").next())
        .unwrap();
    let mut sections = Vec::new();
    for row in table.lines().filter(|line| line.starts_with("| `[")) {
        let cell = row.split('|').nth(1).unwrap();
        sections.extend(
            cell.split(", ")
                .map(|name| name.trim().trim_matches('`').to_owned()),
        );
    }
    assert!(sections.len() >= 15, "{sections:?}");
    for section in &sections {
        assert!(
            example
                .lines()
                .any(|line| line.starts_with(section.as_str())),
            "the example has no {section}"
        );
    }
    // And `[[criticality.rule]]`, inside `[criticality]`.
    assert!(example.contains("[[criticality.rule]]"));
}

/// Runs `spillway` with `args` and its stdout's read end closed at once, as `| head -0` does.
fn with_stdout_closed(args: &[&str]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

#[test]
fn a_reader_that_goes_away_ends_the_demo_and_check_quietly() {
    // Before: `println!` panicked on the broken pipe (exit status 101, a backtrace on stderr).
    let demo = with_stdout_closed(&["demo", "--seconds", "1"]);
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    assert!(
        demo.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spillway.toml");
    std::fs::write(&path, "[listener]\nlisten = \"127.0.0.1:8080\"\n").unwrap();
    let check = with_stdout_closed(&["check", "--config", path.to_str().unwrap()]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn an_endless_or_huge_file_is_refused_with_its_size_not_read_whole() {
    // `/dev/zero` never ends: read past the cap, refused at once.
    let output = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["check", "--config", "/dev/zero"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("/dev/zero: is larger than 4 MiB"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.toml");
    std::fs::write(&path, "#".repeat(5 << 20)).unwrap();
    let (ok, _, stderr) = {
        let output = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        (
            output.status.success(),
            (),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    assert!(!ok);
    assert!(stderr.contains("is larger than 4 MiB"), "{stderr}");
}

#[test]
fn check_prints_every_problem_and_the_warnings() {
    let (ok, _, stderr) = check(
        "[[flow]]\nid = \"x\"\nresource = \"a\"\ncount = -2\n\n\
         [[flow]]\nid = \"y\"\nresource = \"a\"\ncount = -3\n",
    );
    assert!(!ok);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "error: FILE:4:1: `flow[0].count`: must be finite and at least 0, got -2",
            "error: FILE:9:1: `flow[1].count`: must be finite and at least 0, got -3",
        ]
    );
    let (ok, stdout, stderr) = check("[[flow]]\nid = \"x\"\nresource = \"a\"\ncount = 2\n");
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "FILE: ok\n");
    assert_eq!(
        stderr,
        "warning: FILE:3:1: `flow[0].resource`: no route produces `a`, so this rule never \
         applies\n"
    );
}

#[test]
fn check_reads_the_files_a_configuration_names() {
    let (ok, _, stderr) = check(
        "[listener]\ntls = { cert = \"/nonexistent/cert.pem\", key = \"/nonexistent/key.pem\" }\n",
    );
    assert!(!ok);
    assert!(
        stderr.starts_with("error: FILE: /nonexistent/cert.pem: cannot read"),
        "{stderr}"
    );
    let (ok, _, stderr) = check(
        "[[upstream]]\nname = \"app\"\nurl = \"https://localhost:1\"\nca = \"/nonexistent/ca.pem\"\n",
    );
    assert!(!ok);
    assert!(
        stderr.starts_with("error: FILE: upstream `app`: /nonexistent/ca.pem: cannot read"),
        "{stderr}"
    );
}
