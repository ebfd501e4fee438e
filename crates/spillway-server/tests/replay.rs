//! `spillway replay`: event traces through the real routes, rules and limits, for each log
//! format, gzip, lines out of order, malformed lines and bad files.

use spillway_server::checked::parse;
use spillway_server::replay::{replay, Format, ReplayOptions, ReplayReport, RuleReport};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

const BASE: &str = "[listener]\nlisten = \"127.0.0.1:8080\"\n\n\
    [[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:9\"\n\n\
    [[route]]\nresource = \"orders\"\npath = \"/api/orders\"\nupstream = \"app\"\n";

/// 2026-12-04T10:00:00Z in Unix seconds.
const AT: u64 = 1_796_378_400;

fn run_with(rules: &str, files: &[(&str, Vec<u8>)], options: ReplayOptions) -> ReplayReport {
    run_file(&format!("{BASE}\n{rules}"), files, options)
}

/// Replays `files` through the configuration `text`.
fn run_file(text: &str, files: &[(&str, Vec<u8>)], options: ReplayOptions) -> ReplayReport {
    let config = parse(text, "rules.toml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let logs = files
        .iter()
        .map(|(name, bytes)| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        })
        .collect();
    replay(&config, "rules.toml", &ReplayOptions { logs, ..options }).unwrap()
}

fn run(rules: &str, log: &str) -> ReplayReport {
    run_with(
        rules,
        &[("access.log", log.into())],
        ReplayOptions::default(),
    )
}

/// A JSON line: a request to `path` arriving `ms` after [`AT`], taking `took` ms.
fn line(ms: u64, path: &str, status: u16, took: u64) -> String {
    format!(
        "{{\"time\":{}.{:03},\"path\":\"{path}\",\"status\":{status},\"duration_ms\":{took},\"ip\":\"10.0.0.1\"}}\n",
        AT + ms / 1000,
        ms % 1000
    )
}

fn rule<'a>(report: &'a ReplayReport, id: &str) -> &'a RuleReport {
    report
        .rules
        .iter()
        .find(|rule| rule.rule == id)
        .unwrap_or_else(|| panic!("no rule {id} in {:?}", report.rules))
}

#[test]
fn a_qps_rule_refuses_what_passes_its_count_in_each_second() {
    let rules = "[[flow]]\nid = \"two\"\nresource = \"orders\"\ncount = 2\n";
    // Five requests in each of two seconds: the third to the fifth of each are refused.
    let log: String = [0, 100, 200, 300, 400, 1000, 1100, 1200, 1300, 1400]
        .iter()
        .map(|ms| line(*ms, "/api/orders", 200, 5))
        .collect();
    let report = run(rules, &log);
    assert_eq!((report.requests, report.would_refuse), (10, 6));
    let two = rule(&report, "two");
    assert_eq!(
        (two.kind.as_str(), two.resource.as_str()),
        ("flow", "orders")
    );
    assert_eq!(two.would_refuse, 6);
    assert!((two.share - 0.6).abs() < 1e-9);
    assert_eq!(
        two.first_refusal.as_deref(),
        Some("2026-12-04T10:00:00.200Z")
    );
    assert_eq!(
        two.last_refusal.as_deref(),
        Some("2026-12-04T10:00:01.400Z")
    );
    assert_eq!(two.peak_second.as_deref(), Some("2026-12-04T10:00:00.000Z"));
    assert_eq!(two.peak_refusals, 3);
    assert_eq!(report.routes[0].requests, 10);
    let seconds: Vec<(u64, u64, u64)> = (report.timeline.iter())
        .map(|s| (s.at - AT, s.requests, s.would_refuse))
        .collect();
    assert_eq!(seconds, [(0, 5, 3), (1, 5, 3)]);
    assert_eq!(
        report.first_request.as_deref(),
        Some("2026-12-04T10:00:00.000Z")
    );
}

#[test]
fn concurrency_is_held_for_each_request_s_recorded_duration() {
    let text = BASE.replace("upstream = \"app\"\n", "upstream = \"app\"\nexecutes = 2\n");
    // Two calls of 100 ms from 0 and 10 ms: the third, at 20 ms, finds two running; at 150 ms
    // both have ended.
    let log = [(0, 100), (10, 100), (20, 5), (150, 5)]
        .iter()
        .map(|(ms, took)| line(*ms, "/api/orders", 200, *took))
        .collect::<String>();
    let report = run_file(
        &text,
        &[("access.log", log.into())],
        ReplayOptions::default(),
    );
    assert_eq!(report.would_refuse, 1, "{}", report.to_text());
    let executes = rule(&report, "executes");
    assert_eq!(
        executes.first_refusal.as_deref(),
        Some("2026-12-04T10:00:00.020Z")
    );
}

#[test]
fn a_request_that_waited_holds_its_place_for_its_whole_duration_from_then() {
    let text = BASE.replace(
        "upstream = \"app\"\n",
        "upstream = \"app\"\nactives = { max = 1, timeout = \"1600ms\" }\n",
    );
    // A runs 0-2 s; B waits for it and runs 2-4 s; C, at 2.1 s, would wait past its 1.6 s.
    let log: String = [(0, 2000), (500, 2000), (2100, 100)]
        .iter()
        .map(|(ms, took)| line(*ms, "/api/orders", 200, *took))
        .collect();
    let report = run_file(
        &text,
        &[("access.log", log.into())],
        ReplayOptions::default(),
    );
    assert_eq!(report.would_refuse, 1, "{}", report.to_text());
    let actives = rule(&report, "actives");
    assert_eq!(
        actives.first_refusal.as_deref(),
        Some("2026-12-04T10:00:02.100Z")
    );
}

#[test]
fn a_call_is_held_no_longer_than_its_deadline_or_the_upstream_timeout() {
    // A takes 3 s; `serve` answers it 504 after 1 s (its deadline, or the upstream timeout),
    // and frees its place: B, at 1.5 s, finds the place free.
    let log: String = [(0, 3000), (1500, 10)]
        .iter()
        .map(|(ms, took)| line(*ms, "/api/orders", 200, *took))
        .collect();
    let one_place = BASE.replace("upstream = \"app\"\n", "upstream = \"app\"\nexecutes = 1\n");
    let cases = [
        format!("{one_place}\n[deadline]\ndefault = \"1s\"\n"),
        one_place.replace(
            "listen = \"127.0.0.1:8080\"\n",
            "listen = \"127.0.0.1:8080\"\nupstream_timeout = \"1s\"\n",
        ),
    ];
    for text in &cases {
        let report = run_file(
            text,
            &[("access.log", log.clone().into())],
            ReplayOptions::default(),
        );
        assert_eq!(report.would_refuse, 0, "{text}\n{}", report.to_text());
    }
    // Without either, A holds the place for its 3 s.
    let report = run_file(
        &one_place,
        &[("access.log", log.into())],
        ReplayOptions::default(),
    );
    assert_eq!(report.would_refuse, 1, "{}", report.to_text());
}

#[test]
fn a_breaker_opens_on_the_errors_the_service_recorded() {
    let rules = "[[breaker]]\nid = \"errors\"\nresource = \"orders\"\n\
        strategy = { type = \"error_count\", threshold = 3 }\nretry_timeout = \"10s\"\n\
        min_request_amount = 3\n";
    // More than three errors open it (Sentinel's `errCount > threshold`); the next two are
    // refused without reaching the service.
    let log: String = [
        (0, 500),
        (100, 500),
        (200, 500),
        (250, 500),
        (300, 200),
        (400, 200),
    ]
    .iter()
    .map(|(ms, status)| line(*ms, "/api/orders", *status, 10))
    .collect();
    let report = run(rules, &log);
    let errors = rule(&report, "errors");
    assert_eq!(errors.kind, "breaker");
    assert_eq!(errors.would_refuse, 2, "{}", report.to_text());
}

#[test]
fn a_per_key_rule_refuses_each_key_apart_and_a_missing_key_is_counted() {
    let rules = "[[keyed]]\nid = \"per-key\"\nresource = \"orders\"\nkey = \"header:x-api-key\"\n\
        count = 1\non_missing = \"refuse\"\n";
    let keyed = |ms: u64, key: Option<&str>| {
        let headers = key.map_or(String::new(), |key| {
            format!(",\"headers\":{{\"x-api-key\":\"{key}\"}}")
        });
        format!(
            "{{\"time\":{AT}.{ms:03},\"path\":\"/api/orders\",\"status\":200,\"duration_ms\":1{headers}}}\n"
        )
    };
    let log = [
        keyed(0, Some("a")),
        keyed(10, Some("b")),
        keyed(20, Some("a")),
        keyed(30, Some("b")),
        keyed(40, None),
    ]
    .concat();
    let report = run(rules, &log);
    let per_key = rule(&report, "per-key");
    assert_eq!(per_key.would_refuse, 2, "{}", report.to_text());
    let keys: Vec<(&str, u64)> = (per_key.top_keys.iter())
        .map(|key| (key.key.as_str(), key.refused))
        .collect();
    assert_eq!(keys, [("a", 1), ("b", 1)]);
    assert!(report
        .to_text()
        .contains("per-key refused most: a (1), b (1)"));
    let hashed = run_with(
        rules,
        &[("access.log", log.clone().into())],
        ReplayOptions {
            hash_keys: true,
            ..ReplayOptions::default()
        },
    );
    let fingerprint = format!("{:016x}", spillway::keyed::fingerprint("a"));
    assert!(rule(&hashed, "per-key")
        .top_keys
        .iter()
        .any(|key| key.key == fingerprint));
    assert_eq!(rule(&report, "missing_key").would_refuse, 1);
    assert_eq!(report.would_refuse, 3);
}

#[test]
fn a_request_no_route_takes_is_counted_on_the_default_resource() {
    let log = line(0, "/elsewhere", 200, 1) + &line(1, "/api/orders", 200, 1);
    let report = run("", &log);
    let unmatched = report
        .routes
        .iter()
        .find(|route| route.resource == "unmatched")
        .unwrap();
    assert_eq!(unmatched.answered_early.get("no_route"), Some(&1));
    assert_eq!(report.requests, 2);
    assert_eq!(report.would_refuse, 0);
}

fn nginx(second: u64, path: &str, took: &str) -> String {
    format!(
        "10.0.0.1 - - [04/Dec/2026:10:00:{second:02} +0000] \"GET {path} HTTP/1.1\" 200 12 \"-\" \"curl/8\" {took}\n"
    )
}

#[test]
fn nginx_logs_plain_and_gzipped_replay_alike() {
    let rules = "[[flow]]\nid = \"two\"\nresource = \"orders\"\ncount = 2\n";
    let log: String = (0..6)
        .map(|i| nginx(1 + i / 3, "/api/orders?id=1", &format!("0.0{i}")))
        .collect();
    let plain = run(rules, &log);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(log.as_bytes()).unwrap();
    let zipped = run_with(
        rules,
        &[("access.log.gz", gz.finish().unwrap())],
        ReplayOptions::default(),
    );
    assert_eq!(plain.requests, 6);
    assert_eq!(plain.would_refuse, 2, "{}", plain.to_text());
    assert_eq!(plain.rules, zipped.rules);
    assert_eq!(plain.timeline, zipped.timeline);
    // nginx logs a request when it ends, to the second: the three that ended in second 1 end
    // at 1/6, 3/6 and 5/6 of it, and arrived their request time before (0.00, 0.01 and
    // 0.02 s); those of second 2 took 0.03 to 0.05 s.
    assert_eq!(
        plain.first_request.as_deref(),
        Some("2026-12-04T10:00:01.166Z")
    );
    assert_eq!(
        plain.last_request.as_deref(),
        Some("2026-12-04T10:00:02.783Z")
    );
}

#[test]
fn csv_logs_replay_as_json_lines_do() {
    let rules = "[[flow]]\nid = \"two\"\nresource = \"orders\"\ncount = 2\n";
    let times = [0, 100, 200, 300];
    let jsonl: String = times
        .iter()
        .map(|ms| line(*ms, "/api/orders", 200, 5))
        .collect();
    let csv: String = std::iter::once("time,path,status,duration_ms,ip\n".to_owned())
        .chain(
            times
                .iter()
                .map(|ms| format!("{AT}.{ms:03},/api/orders,200,5,10.0.0.1\n")),
        )
        .collect();
    let (a, b) = (run(rules, &jsonl), run(rules, &csv));
    assert_eq!(a.rules, b.rules);
    assert_eq!(b.would_refuse, 2);
}

#[test]
fn lines_out_of_order_within_the_window_replay_in_order_and_worse_is_reported() {
    let rules = "[[flow]]\nid = \"two\"\nresource = \"orders\"\ncount = 2\n";
    let times = [0u64, 100, 200, 300, 1000, 1100, 1200];
    let sorted: String = times
        .iter()
        .map(|ms| line(*ms, "/api/orders", 200, 5))
        .collect();
    let shuffled: String = [1000u64, 0, 200, 100, 1200, 300, 1100]
        .iter()
        .map(|ms| line(*ms, "/api/orders", 200, 5))
        .collect();
    let (a, b) = (run(rules, &sorted), run(rules, &shuffled));
    assert_eq!(a.rules, b.rules);
    assert_eq!(a.timeline, b.timeline);
    assert_eq!(b.read.late, 0);
    // With no window, a line is given once a later one is read: 100 after 200, and 300 after
    // 1000, are late, replayed at the time of the one before them.
    let strict_order = ReplayOptions {
        reorder_window: Duration::ZERO,
        ..ReplayOptions::default()
    };
    let late = run_with(rules, &[("access.log", shuffled.into())], strict_order);
    assert_eq!(late.read.late, 2, "{}", late.to_text());
    assert_eq!(late.read.late_shown[0].line, 4);
    assert!(late.read.late_shown[0].why.contains("0.100 s before"));
    assert_eq!(late.read.late_shown[1].line, 6);
    assert_eq!(late.requests, 7);
}

#[test]
fn malformed_lines_are_counted_and_shown_and_strict_stops_at_the_first() {
    let log = format!(
        "{}not json at all\n{}{{\"time\":1}}\n\n",
        line(0, "/api/orders", 200, 1),
        line(1, "/api/orders", 200, 1)
    );
    let report = run_with(
        "",
        &[("a.log", log.clone().into())],
        ReplayOptions {
            format: Format::Jsonl,
            ..ReplayOptions::default()
        },
    );
    assert_eq!(report.requests, 2);
    assert_eq!(report.read.lines, 5);
    assert_eq!(report.read.malformed, 2);
    let shown: Vec<(u64, bool)> = (report.read.malformed_shown.iter())
        .map(|p| (p.line, p.file.ends_with("a.log")))
        .collect();
    assert_eq!(shown, [(2, true), (4, true)]);
    assert!(report.to_text().contains("2 malformed lines, skipped"));
    let config = parse(BASE, "rules.toml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    std::fs::write(&path, &log).unwrap();
    let strict = ReplayOptions {
        logs: vec![path],
        strict: true,
        ..ReplayOptions::default()
    };
    let err = replay(&config, "rules.toml", &strict)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("a.log:2:") && err.contains("--strict"),
        "{err}"
    );
}

#[test]
fn a_line_that_is_not_utf8_is_malformed_and_the_next_one_is_read() {
    let mut log = line(0, "/api/orders", 200, 1).into_bytes();
    log.extend_from_slice(b"{\"time\":1,\"path\":\"/\xff\"}\n");
    log.extend_from_slice(line(1, "/api/orders", 200, 1).as_bytes());
    let report = run_with("", &[("a.log", log)], ReplayOptions::default());
    assert_eq!((report.requests, report.read.malformed), (2, 1));
    assert_eq!(report.read.malformed_shown[0].line, 2);
    assert_eq!(report.read.malformed_shown[0].why, "not UTF-8");
}

#[test]
fn the_docs_show_what_the_commands_print() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let docs = std::fs::read_to_string(format!("{root}/docs/replay.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("timeline.svg");
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
            .current_dir(root)
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let plain = run(&[
        "replay",
        "--config",
        "docs/replay/rules.toml",
        "--plot",
        plot.to_str().unwrap(),
        "docs/replay/access.log",
    ]);
    assert!(
        docs.contains(&plain),
        "docs/replay.md should show:\n{plain}"
    );
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
    let compared = run(&[
        "replay",
        "--config",
        "docs/replay/rules.toml",
        "--compare",
        "docs/replay/stricter.toml",
        "docs/replay/access.log",
    ]);
    assert!(
        docs.contains(&compared),
        "docs/replay.md should show:\n{compared}"
    );
}

#[test]
fn a_line_too_long_is_malformed_and_a_host_header_stands_for_the_host() {
    let long = format!("{{\"time\":1,\"path\":\"/{}\"}}\n", "a".repeat(9 << 20));
    let host = format!(
        "{{\"time\":{AT},\"path\":\"/api/orders\",\"status\":200,\"duration_ms\":1,\"headers\":{{\"host\":\"shop.example\"}}}}\n"
    );
    let log = format!("{}{long}{host}", line(0, "/api/orders", 200, 1));
    let report = run_with("", &[("a.log", log.into())], ReplayOptions::default());
    assert_eq!((report.requests, report.read.malformed), (2, 1));
    assert_eq!(report.read.malformed_shown[0].line, 2);
    assert_eq!(
        report.read.malformed_shown[0].why,
        "longer than 8388608 bytes"
    );
    // The `Host` among its headers is its host: not refused as naming two.
    assert!(report
        .routes
        .iter()
        .all(|route| route.answered_early.is_empty()));
}

#[test]
fn the_longest_line_spillway_s_access_log_writes_is_replayed() {
    // A head at the largest `max_header_size` (1 MiB) whose bytes are not text: each is
    // logged as U+FFFD (three bytes), in the header and again as the refusal's key. (Such
    // lines were skipped as longer than 64 KiB, found by an attack: a client could drop its
    // requests out of a replay of the shadow mode's log.)
    let value = "\u{fffd}".repeat(1 << 20);
    let line = format!(
        "{{\"time\":{AT},\"path\":\"/api/orders\",\"status\":429,\"duration_ms\":1,\
         \"headers\":{{\"x-user\":\"{value}\"}},\"key\":\"{value}\"}}\n"
    );
    assert!(line.len() > 6 << 20);
    let report = run_with("", &[("a.log", line.into())], ReplayOptions::default());
    assert_eq!((report.requests, report.read.malformed), (1, 0));
}

#[test]
fn a_line_from_far_in_the_future_is_malformed_and_order_is_kept() {
    let rules = "[[flow]]\nid = \"two\"\nresource = \"orders\"\ncount = 2\n";
    let far = "{\"time\":\"2099-01-01T00:00:00Z\",\"path\":\"/api/orders\",\"status\":200,\"duration_ms\":1}\n";
    let times = [0u64, 1000, 200, 1100, 100];
    let mut log = line(times[0], "/api/orders", 200, 5);
    log.push_str(far);
    for ms in &times[1..] {
        log.push_str(&line(*ms, "/api/orders", 200, 5));
    }
    let report = run(rules, &log);
    assert_eq!(report.read.malformed, 1);
    assert_eq!(
        report.read.malformed_shown[0].why,
        "more than a day after the line before it"
    );
    // The lines after it are still put in order: none is late.
    assert_eq!((report.requests, report.read.late), (5, 0));
    assert_eq!(rule(&report, "two").would_refuse, 1);
}

#[test]
fn a_log_format_given_as_a_pattern_replays_as_its_combined_equivalent() {
    let rules = "[[flow]]\nid = \"two\"\nresource = \"orders\"\ncount = 2\n";
    // The same six requests as `nginx_logs_plain_and_gzipped_replay_alike`, in a format of
    // the operator's own: the time first, the request time with a prefix, a field after it.
    let log: String = (0..6)
        .map(|i| {
            format!(
                "[04/Dec/2026:10:00:{:02} +0000] 10.0.0.1 \"GET /api/orders?id=1 HTTP/1.1\" 200 rt=0.0{i} up=10.1.0.1:80\n",
                1 + i / 3
            )
        })
        .collect();
    let options = ReplayOptions {
        log_format: Some(
            "[$time_local] $remote_addr \"$request\" $status rt=$request_time up=$upstream_addr"
                .to_owned(),
        ),
        ..ReplayOptions::default()
    };
    let custom = run_with(rules, &[("access.log", log.into())], options);
    let combined: String = (0..6)
        .map(|i| nginx(1 + i / 3, "/api/orders?id=1", &format!("0.0{i}")))
        .collect();
    let combined = run(rules, &combined);
    assert_eq!(custom.read.malformed, 0, "{}", custom.to_text());
    assert_eq!(custom.rules, combined.rules);
    assert_eq!(custom.timeline, combined.timeline);
    assert_eq!(custom.first_request, combined.first_request);

    // A pattern that cannot be read, or one given for another format, is a clear error.
    let config = parse(BASE, "rules.toml").unwrap();
    for (format, log_format, why) in [
        (
            Format::Auto,
            "$time_local $status $request_time",
            "has no request",
        ),
        (
            Format::Envoy,
            "$time_local $request $status $request_time",
            "not `envoy`",
        ),
    ] {
        let options = ReplayOptions {
            format,
            log_format: Some(log_format.to_owned()),
            ..ReplayOptions::default()
        };
        let err = replay(&config, "rules.toml", &options)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--log-format"), "{err}");
        assert!(err.contains(why), "{err}");
    }
}

#[test]
fn an_unreadable_file_is_a_clear_error() {
    let config = parse(BASE, "rules.toml").unwrap();
    let options = ReplayOptions {
        logs: vec![PathBuf::from("/nonexistent/access.log")],
        ..ReplayOptions::default()
    };
    let err = replay(&config, "rules.toml", &options)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/nonexistent/access.log: cannot be read:"),
        "{err}"
    );
}

#[test]
fn the_command_prints_text_or_json() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        format!("{BASE}\n[[flow]]\nid = \"two\"\nresource = \"orders\"\ncount = 2\n"),
    )
    .unwrap();
    let log = dir.path().join("access.log");
    let lines: String = [0, 100, 200]
        .iter()
        .map(|ms| line(*ms, "/api/orders", 200, 5))
        .collect();
    std::fs::write(&log, lines).unwrap();
    let spillway = env!("CARGO_BIN_EXE_spillway");
    let output = std::process::Command::new(spillway)
        .args(["replay", "--config"])
        .arg(&rules)
        .arg(&log)
        .output()
        .unwrap();
    assert!(output.status.success());
    // The progress bar is drawn only on a terminal.
    assert!(
        output.stderr.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with("3 requests from 2026-12-04T10:00:00.000Z"),
        "{text}"
    );
    assert!(text.contains("two | flow | orders | 1 | 33.33%"), "{text}");
    let output = std::process::Command::new(spillway)
        .args(["replay", "--json", "--config"])
        .arg(&rules)
        .arg(&log)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["requests"], 3);
    assert_eq!(json["rules"][0]["rule"], "two");
    assert_eq!(json["rules"][0]["would_refuse"], 1);
    let output = std::process::Command::new(spillway)
        .args(["replay", "--config"])
        .arg(&rules)
        .arg(dir.path().join("missing.log"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let err = String::from_utf8(output.stderr).unwrap();
    assert!(err.contains("missing.log: cannot be read"), "{err}");
}

/// docs/replay.schema.json, compiled.
fn schema() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/replay.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).expect("a valid schema")
}

fn assert_valid(validator: &jsonschema::Validator, output: &serde_json::Value) {
    let errors: Vec<String> = validator
        .iter_errors(output)
        .map(|err| format!("{err} at {}", err.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{output:#}");
}

#[test]
fn the_json_output_follows_its_schema() {
    let validator = schema();
    // Every part filled: refusals with top keys, a request no route takes, malformed and late
    // lines, a note.
    let rules = "[[keyed]]\nid = \"per-key\"\nresource = \"orders\"\nkey = \"header:x-api-key\"\n\
        count = 1\n\n[[keyed]]\nid = \"per-q\"\nresource = \"orders\"\nkey = \"query:u\"\n\
        count = 100\n\n[[flow]]\nid = \"two\"\nresource = \"orders\"\ncount = 2\n\n\
        [[system]]\nid = \"guard\"\nhighest_cpu_usage = 0.9\n";
    let keyed = |ms: u64, path: &str, key: &str| {
        format!(
            "{{\"time\":{AT}.{ms:03},\"path\":\"{path}\",\"status\":200,\"duration_ms\":1,\"headers\":{{\"x-api-key\":\"{key}\"}}}}\n"
        )
    };
    let mut log: String = (0..6).map(|i| keyed(i * 10, "/api/orders", "a")).collect();
    log.push_str(&keyed(100, "/nowhere", "b"));
    // A key given twice is answered before any rule (found by an attack: the schema lacked it).
    log.push_str(&keyed(110, "/api/orders?u=x&u=y", "d"));
    log.push_str("not a request\n");
    log.push_str(&format!(
        "{{\"time\":{},\"path\":\"/api/orders\",\"status\":200,\"duration_ms\":1}}\n",
        AT + 30
    ));
    log.push_str(&keyed(50, "/api/orders", "c"));
    let options = ReplayOptions {
        reorder_window: Duration::from_secs(1),
        ..ReplayOptions::default()
    };
    let report = run_with(rules, &[("access.log", log.into())], options);
    assert!(report.read.malformed > 0 && report.read.late > 0 && !report.notes.is_empty());
    assert!(report.rules.iter().any(|rule| !rule.top_keys.is_empty()));
    let early: Vec<&str> = (report.routes.iter())
        .flat_map(|route| route.answered_early.keys().map(String::as_str))
        .collect();
    assert!(
        early.contains(&"no_route") && early.contains(&"repeated_key"),
        "{early:?}"
    );
    assert_valid(&validator, &serde_json::to_value(&report).unwrap());
    // No request at all.
    let empty = run("", "");
    assert_valid(&validator, &serde_json::to_value(&empty).unwrap());

    // `--compare --json` from the command: both reports.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.toml"), dir.path().join("b.toml"));
    std::fs::write(
        &a,
        format!("{BASE}\n[[flow]]\nid = \"two\"\nresource = \"orders\"\ncount = 2\n"),
    )
    .unwrap();
    std::fs::write(
        &b,
        format!("{BASE}\n[[flow]]\nid = \"one\"\nresource = \"orders\"\ncount = 1\n"),
    )
    .unwrap();
    let access = dir.path().join("access.log");
    let lines: String = [0, 100, 200]
        .iter()
        .map(|ms| line(*ms, "/api/orders", 200, 5))
        .collect();
    std::fs::write(&access, lines).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["replay", "--json", "--config"])
        .arg(&a)
        .arg("--compare")
        .arg(&b)
        .arg(&access)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let both: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_valid(&validator, &both);
    assert_eq!(both["b"]["rules"][0]["would_refuse"], 2);

    // The schema refuses what the output must not be: a field gone, a share past 1.
    let mut broken = serde_json::to_value(&report).unwrap();
    broken.as_object_mut().unwrap().remove("timeline");
    assert!(!validator.is_valid(&broken));
    let mut broken = serde_json::to_value(&report).unwrap();
    broken["routes"][0]["share"] = serde_json::json!(1.5);
    assert!(!validator.is_valid(&broken));
}
