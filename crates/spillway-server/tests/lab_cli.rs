//! `spillway lab --quick`: its JSON rows, determinism, and errors for bad options.

use std::process::{Command, Output};

fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("lab")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn quick_json_has_a_row_per_strategy_scenario_and_load_and_repeats_byte_for_byte() {
    let args = [
        "--quick",
        "--seed",
        "7",
        "--json",
        "--strategies",
        "none,static_concurrency",
    ];
    let first = lab(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = lab(&args);
    assert_eq!(first.stdout, second.stdout);

    let rows: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    // 2 strategies x (6 sweep loads + spike + slowdown).
    assert_eq!(rows.len(), 16);
    for row in rows {
        for field in [
            "scenario",
            "strategy",
            "load",
            "goodput",
            "p99_ms",
            "unloaded_p99_ms",
            "recovery_s",
        ] {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
    }
    let find = |scenario: &str, strategy: &str, load: f64| {
        rows.iter()
            .find(|r| r["scenario"] == scenario && r["strategy"] == strategy && r["load"] == load)
            .unwrap_or_else(|| panic!("no row {scenario} {strategy} {load}"))
    };
    // Without protection, 3x with timeouts and retries collapses; a concurrency limit holds.
    assert!(find("sweep", "none", 3.0)["goodput"].as_f64().unwrap() < 0.2);
    assert!(
        find("sweep", "static_concurrency", 3.0)["goodput"]
            .as_f64()
            .unwrap()
            > 0.9
    );
    // Sweeps have no recovery; the events have one (a number) or never (null).
    assert!(find("sweep", "none", 1.0)["recovery_s"].is_null());
    assert!(find("slowdown", "none", 1.0)["recovery_s"].is_null());
    assert!(find("spike", "static_concurrency", 1.0)["recovery_s"].is_number());
}

#[test]
fn quick_prints_the_markdown_tables() {
    let output = lab(&["--quick", "--strategies", "bbr"]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("| strategy | 0.5x | 1x | 2x | 3x | 5x |"),
        "{text}"
    );
    assert!(text.contains("| bbr |"), "{text}");
}

#[test]
fn bad_options_get_a_clear_error_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().to_str().unwrap();
    for (args, message) in [
        (
            vec!["--workers", "0"],
            "error: lab parameter `workers`: must be between 1 and 100000, got 0",
        ),
        (
            vec!["--workers", "-3"],
            "error: lab parameter `workers`: must be between 1 and 100000, got -3",
        ),
        (
            vec!["--service-ms", "NaN"],
            "error: lab parameter `service_ms`: must be a number of milliseconds, at least 0, got NaN",
        ),
        (
            vec!["--timeout-ms", "-5"],
            "error: lab parameter `timeout_ms`: must be a number of milliseconds, at least 0, got -5",
        ),
        (
            vec!["--distribution", "lognormal", "--sigma", "-1"],
            "error: lab parameter `service_time.sigma`: must be between 0 and 4, got -1",
        ),
        (
            vec!["--distribution", "bimodal", "--slow-share", "2"],
            "error: lab parameter `service_time.slow_share`: must be between 0 and 1, got 2",
        ),
        (
            vec!["--distribution", "bimodal", "--slow-factor", "0.5"],
            "error: lab parameter `service_time.slow_factor`: must be between 1 and 1000, got 0.5",
        ),
        (
            vec!["--queue-capacity", "-1"],
            "error: lab parameter `queue_capacity`: must be between 0 and 1000000, got -1",
        ),
        (
            vec!["--queue-capacity", "2000000"],
            "error: lab parameter `queue_capacity`: must be at most 1000000, got 2000000",
        ),
        (
            vec!["--queue-timeout-ms", "-5"],
            "error: lab parameter `queue_timeout_ms`: must be a number of milliseconds, at least 0, got -5",
        ),
        (
            vec!["--queue-capacity", "5", "--queue-timeout-ms", "0"],
            "error: lab parameter `queue_timeout_ms`: must be longer than 0",
        ),
        (
            vec!["--queue-capacity", "5"],
            "error: lab parameter `queue_capacity`: the full lab writes docs/overload.md without \
             a queue: give a queue with --quick, --matrix, --long-run or --trace",
        ),
        (
            vec!["--loopback"],
            "error: lab parameter `loopback`: --loopback runs the shape matrix, the scenarios \
             with claims, the long run or a trace on loopback: give --matrix, --mix, --long-run \
             or --trace too (the full lab runs the loopback lab unless --no-loopback)",
        ),
        (
            vec!["--mix", "--queue-capacity", "5"],
            "error: lab parameter `queue_capacity`: the scenarios with claims (--mix) give each \
             its own queue",
        ),
        (
            vec![
                "--matrix",
                "--loopback",
                "--queue-capacity",
                "5",
                "--queue-timeout-ms",
                "8000",
            ],
            "error: lab parameter `queue_timeout_ms`: the loopback matrix stretches it 8 times \
             on its slowest services, and there it must be at most 60s, got 64s",
        ),
        (
            vec!["--envoy-start-limit", "50"],
            "error: lab parameter `envoy_start_limit`: the full lab and the loopback scenarios \
             with claims run envoy_gradient's defaults: give --envoy-start-limit with --quick, \
             --matrix, --mix, --long-run \
             or --trace (on loopback: --matrix, --long-run or --trace)",
        ),
        (
            vec!["--envoy-buffer-scaling", "spread"],
            "error: lab parameter `envoy_buffer_scaling`: the full lab and the loopback \
             scenarios with claims run envoy_gradient's defaults: give --envoy-buffer-scaling \
             with --quick, --matrix, --mix, --long-run \
             or --trace (on loopback: --matrix, --long-run or --trace)",
        ),
        (
            vec!["--mix", "--loopback", "--envoy-buffer-scaling", "spread"],
            "error: lab parameter `envoy_buffer_scaling`: the full lab and the loopback \
             scenarios with claims run envoy_gradient's defaults: give --envoy-buffer-scaling \
             with --quick, --matrix, --mix, --long-run \
             or --trace (on loopback: --matrix, --long-run or --trace)",
        ),
        (
            vec!["--mix", "--loopback", "--envoy-start-limit", "50"],
            "error: lab parameter `envoy_start_limit`: the full lab and the loopback scenarios \
             with claims run envoy_gradient's defaults: give --envoy-start-limit with --quick, \
             --matrix, --mix, --long-run \
             or --trace (on loopback: --matrix, --long-run or --trace)",
        ),
        (
            vec!["--envoy-window-min-rtts", "0"],
            "error: lab parameter `envoy_window_min_rtts`: the full lab and the loopback \
             scenarios with claims run envoy_gradient's defaults: give --envoy-window-min-rtts \
             with --quick, --matrix, --mix, --long-run \
             or --trace (on loopback: --matrix, --long-run or --trace)",
        ),
        (
            vec!["--quick", "--envoy-window-min-rtts", "-1"],
            "error: lab parameter `envoy_window_min_rtts`: must be a number from 0 to 100, got -1",
        ),
        (
            vec!["--quick", "--envoy-window-min-rtts", "NaN"],
            "error: lab parameter `envoy_window_min_rtts`: must be a number from 0 to 100, got NaN",
        ),
        (
            vec!["--envoy-in-flight-floor", "0"],
            "error: lab parameter `envoy_in_flight_floor`: the full lab and the loopback \
             scenarios with claims run envoy_gradient's defaults: give --envoy-in-flight-floor \
             with --quick, --matrix, --mix, --long-run \
             or --trace (on loopback: --matrix, --long-run or --trace)",
        ),
        (
            vec!["--matrix", "--envoy-in-flight-floor", "101"],
            "error: lab parameter `envoy_in_flight_floor`: must be a number from 0 to 100, got 101",
        ),
        (
            vec!["--mix", "--loopback", "--queue-capacity", "5"],
            "error: lab parameter `queue_capacity`: the scenarios with claims (--mix) give each \
             its own queue",
        ),
        (
            vec!["--long-run", "--loopback", "--envoy-start-limit", "2"],
            "error: lab parameter `envoy_start_limit`: must be at least `min_concurrency` (3), \
             got 2",
        ),
        (
            vec!["--quick", "--envoy-start-limit", "2"],
            "error: lab parameter `envoy_start_limit`: must be at least `min_concurrency` (3), \
             got 2",
        ),
        (
            vec!["--quick", "--envoy-start-limit", "1001"],
            "error: lab parameter `envoy_start_limit`: must be at most `max_limit` (1000), got \
             1001",
        ),
        (
            vec!["--quick", "--envoy-start-limit", "-1"],
            "error: lab parameter `envoy_start_limit`: must be between 0 and 1000, got -1",
        ),
        (
            vec!["--strategies", "magic"],
            "error: lab parameter `strategies`: unknown strategy `magic`; known: none, static_qps, \
             static_concurrency, sentinel_system, bbr, bbr_bucket_average, bbr_probe, gradient2, vegas, \
             aimd, envoy_gradient",
        ),
    ] {
        // Full mode, so that a bad option is refused before anything runs or is written.
        let mut all = vec!["--docs", docs];
        all.extend(args);
        let output = lab(&all);
        assert!(!output.status.success(), "{all:?}");
        assert_eq!(String::from_utf8_lossy(&output.stderr).trim_end(), message);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}

#[test]
fn a_reader_that_goes_away_is_not_an_error() {
    // As `spillway lab --quick | head -1`: the pipe's read end is closed before the lab prints.
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["lab", "--quick", "--strategies", "none"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_long_run_counts_each_strategy_s_refusals_by_10_s_and_repeats() {
    let args = [
        "--long-run",
        "--workers",
        "2",
        "--strategies",
        "none,envoy_gradient",
        "--json",
    ];
    let first = lab(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(first.stdout, lab(&args).stdout);
    let report: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(report["loopback"], false);
    assert_eq!(report["workers"], 2);
    assert_eq!(report["capacity"], 200.0);
    assert_eq!(report["envoy"]["start_limit"], 0);
    assert_eq!(report["envoy"]["window_min_rtts"], 12.0);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert!(row["loopback"].is_null(), "simulated only: {row}");
        let simulated = &row["simulated"];
        let by_10s: Vec<u64> = serde_json::from_value(simulated["refused_by_10s"].clone()).unwrap();
        // 0.5x, 0.7x and 0.9x for 60 s each.
        assert_eq!(by_10s.len(), 18);
        assert_eq!(
            by_10s.iter().sum::<u64>(),
            simulated["refused"].as_u64().unwrap()
        );
    }
    assert_eq!(rows[0]["strategy"], "none");
    assert_eq!(rows[0]["simulated"]["refused"], 0);
    // A latency limit refuses at 0.9x on 2 workers, where the service's own queue is most of
    // the latency (docs/overload.md).
    assert_eq!(rows[1]["strategy"], "envoy_gradient");
    assert!(rows[1]["simulated"]["refused"].as_u64().unwrap() > 0);

    let table = lab(&args[..args.len() - 1]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.starts_with(
            "Long run, simulated: 2 workers, exponential, mean 10ms, capacity 200 requests/s"
        ),
        "{text}"
    );
    assert!(text.contains("| strategy | refused (first 10 s + after) | in each 10 s |"));
}

#[test]
fn the_long_run_takes_envoy_s_open_start() {
    // On 4 workers, Envoy's start refuses in the long run's first 10 s (its first minRTT is
    // measured at a limit of 3); an open start of 50 does not (docs/config.md).
    let first_10s = |extra: &[&str]| {
        let mut args = vec![
            "--long-run",
            "--workers",
            "4",
            "--strategies",
            "envoy_gradient",
            "--json",
        ];
        args.extend(extra);
        let output = lab(&args);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let start = report["envoy"]["start_limit"].as_u64().unwrap();
        (
            start,
            report["rows"][0]["simulated"]["refused_by_10s"][0]
                .as_u64()
                .unwrap(),
        )
    };
    let (start, pinned) = first_10s(&[]);
    assert_eq!(start, 0);
    assert!(pinned > 0, "Envoy's start refuses: {pinned}");
    assert_eq!(first_10s(&["--envoy-start-limit", "50"]), (50, 0));
}

#[test]
fn the_long_run_takes_envoy_s_windows_and_gradient_and_names_them() {
    let args = [
        "--long-run",
        "--workers",
        "2",
        "--strategies",
        "envoy_gradient",
        "--envoy-window-min-rtts",
        "0",
        "--envoy-in-flight-floor",
        "0",
    ];
    let output = lab(&args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("`envoy_gradient` has in_flight_floor = 0.0 and window_min_rtts = 0.0"),
        "{text}"
    );
    let mut json = args.to_vec();
    json.push("--json");
    let report: serde_json::Value = serde_json::from_slice(&lab(&json).stdout).unwrap();
    assert_eq!(report["envoy"]["window_min_rtts"], 0.0);
    assert_eq!(report["envoy"]["in_flight_floor"], 0.0);
}

#[test]
fn the_long_run_has_no_quick_form_and_no_full_lab_option() {
    for other in ["--quick", "--matrix", "--mix", "--no-loopback"] {
        let output = lab(&["--long-run", other]);
        assert!(!output.status.success(), "{other}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("cannot be used with"), "{other}: {stderr}");
    }
}
