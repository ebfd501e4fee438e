//! The admin API and hot reload on loopback: statistics, rules read and replaced (with the
//! token), malformed input, status, metrics, and reloads of a good and a bad file.

mod support;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use spillway_server::admin::{self, Admin, MAX_BODY};
use spillway_server::checked;
use spillway_server::Server;
use std::net::SocketAddr;

use support::server::{call, call_with, get, json, put_rules, Harness, TOKEN};

/// The proxy in front of nothing (requests get 404 or 429) with `rules`, its admin API, and
/// its file.
async fn start(rules: &str) -> Harness {
    Harness::start(&file_text(rules)).await
}

fn file_text(rules: &str) -> String {
    format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:9\"\n\n[[route]]\nresource = \"orders\"\npath = \"/orders\"\nupstream = \"app\"\n\n{rules}"
    )
}

const ORDERS_QPS_1: &str = "[[flow]]\nid = \"orders-qps\"\nresource = \"orders\"\ncount = 1\n";

#[tokio::test(start_paused = true)]
async fn statistics_rules_and_status_read_back() {
    let h = start(ORDERS_QPS_1).await;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    for _ in 0..2 {
        let uri = format!("http://{}/orders", h.proxy).parse().unwrap();
        client.get(uri).await.unwrap();
    }
    let (status, body) = get(h.admin, "/api/resources").await;
    assert_eq!(status, StatusCode::OK);
    let resources = json(&body);
    let orders = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "orders")
        .unwrap();
    assert_eq!(orders["stats"]["total_pass"], 1);
    assert_eq!(orders["stats"]["total_block"], 1);

    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["flow"][0]["id"], "orders-qps");

    let (_, status) = get(h.admin, "/api/status").await;
    let status = json(&status);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["config"]["reloads"], 0);
    assert!(status["probe"]["load"].is_number());

    assert_eq!(get(h.admin, "/nope").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        call(
            h.admin,
            Method::DELETE,
            "/api/rules",
            Some(TOKEN),
            Bytes::new()
        )
        .await
        .0,
        StatusCode::METHOD_NOT_ALLOWED
    );
}

#[tokio::test(start_paused = true)]
async fn the_kinds_the_dashboard_forms_are_built_from_are_the_kinds_of_the_rules() {
    let h = start(ORDERS_QPS_1).await;
    let (status, _) = call(h.admin, Method::GET, "/api/kinds", None, Bytes::new()).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the token, as for the rules"
    );
    let (status, kinds) = get(h.admin, "/api/kinds").await;
    assert_eq!(status, StatusCode::OK);
    let kinds = json(&kinds);
    let names: Vec<&str> = kinds
        .as_array()
        .unwrap()
        .iter()
        .map(|kind| kind["name"].as_str().unwrap())
        .collect();
    let (_, rules) = get(h.admin, "/api/rules").await;
    let rules = json(&rules);
    let mut ruled: Vec<&str> = rules
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut listed = names.clone();
    ruled.sort_unstable();
    listed.sort_unstable();
    assert_eq!(listed, ruled);
    assert_eq!(
        names,
        [
            "flow",
            "system",
            "breaker",
            "adaptive",
            "cluster_rule",
            "keyed"
        ]
    );
    for kind in kinds.as_array().unwrap() {
        assert!(!kind["title"].as_str().unwrap().is_empty(), "{kind}");
        assert_eq!(kind["template"]["id"], "", "{kind}");
    }
}

/// A rule on a resource no route produces never applies: `/api/status` lists it, whether it
/// came from the file (where `check` also warns of it) or through the API.
#[tokio::test(start_paused = true)]
async fn the_status_lists_the_rules_no_route_reaches() {
    let typo = "[[flow]]\nid = \"typo\"\nresource = \"order\"\ncount = 1\n";
    let h = start(&format!("{ORDERS_QPS_1}\n{typo}")).await;
    let (_, status) = get(h.admin, "/api/status").await;
    assert_eq!(
        json(&status)["unused_rules"],
        serde_json::json!([{ "kind": "flow", "id": "typo", "resource": "order" }])
    );
    let replacement = r#"{"flow": [
        {"id": "orders-qps", "resource": "orders", "count": 1},
        {"id": "elsewhere", "resource": "GET /nowhere", "count": 5}
    ]}"#;
    assert_eq!(
        put_rules(&h, Some(TOKEN), replacement).await.0,
        StatusCode::OK
    );
    let (_, status) = get(h.admin, "/api/status").await;
    assert_eq!(
        json(&status)["unused_rules"],
        serde_json::json!([{ "kind": "flow", "id": "elsewhere", "resource": "GET /nowhere" }])
    );
    // The metrics count them by kind, every kind present.
    let (_, metrics) = get(h.admin, "/metrics").await;
    assert!(
        metrics.contains("spillway_unused_rules{kind=\"flow\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("spillway_unused_rules{kind=\"breaker\"} 0\n"),
        "{metrics}"
    );
    let fixed = r#"{"flow": [{"id": "orders-qps", "resource": "orders", "count": 1}]}"#;
    assert_eq!(put_rules(&h, Some(TOKEN), fixed).await.0, StatusCode::OK);
    let (_, metrics) = get(h.admin, "/metrics").await;
    assert!(
        metrics.contains("spillway_unused_rules{kind=\"flow\"} 0\n"),
        "{metrics}"
    );
}

#[tokio::test(start_paused = true)]
async fn writes_need_the_token_and_bad_bodies_change_nothing() {
    let h = start(ORDERS_QPS_1).await;
    let replacement = r#"{"flow": [{"id": "orders-qps", "resource": "orders", "count": 100}]}"#;
    assert_eq!(
        put_rules(&h, None, replacement).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        put_rules(&h, Some("wrong"), replacement).await.0,
        StatusCode::UNAUTHORIZED
    );

    let (status, body) = put_rules(&h, Some(TOKEN), "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(json(&body)["error"]
        .as_str()
        .unwrap()
        .starts_with("bad JSON"));

    let (status, body) = put_rules(&h, Some(TOKEN), r#"{"flw": []}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("unknown rule kind `flw`"), "{body}");
    // A kind given twice is refused, not read as its last.
    let (status, body) = put_rules(&h, Some(TOKEN), r#"{"flow": [], "flow": []}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("`flow` given twice"), "{body}");

    let bad = r#"{"flow": [{"id": "x", "resource": "orders", "count": -1}],
                 "breaker": []}"#;
    let (status, body) = put_rules(&h, Some(TOKEN), bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        json(&body)["error"],
        "flow rule #0 (id `x`): `count` must be finite and at least 0, got -1"
    );
    // Named for a form to show by its field.
    assert_eq!(
        json(&body)["rule"],
        serde_json::json!({"kind": "flow", "index": 0, "id": "x", "field": "count",
                           "problem": "must be finite and at least 0, got -1"})
    );
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["flow"][0]["count"], 1.0, "nothing changed");

    let huge = format!("{{\"flow\": [], \"pad\": \"{}\"}}", "x".repeat(MAX_BODY));
    assert_eq!(
        put_rules(&h, Some(TOKEN), &huge).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );

    let (status, body) = put_rules(&h, Some(TOKEN), replacement).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(json(&body)["flow"][0]["count"], 100.0);

    // Every write is in the audit trail, newest first: who (the peer), what, the outcome.
    let (_, status) = get(h.admin, "/api/status").await;
    let audit = json(&status)["audit"].as_array().unwrap().clone();
    let outcomes: Vec<(&str, &str)> = audit
        .iter()
        .map(|w| {
            (
                w["outcome"].as_str().unwrap(),
                w["detail"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(outcomes.len(), 8, "{outcomes:?}");
    assert_eq!(
        outcomes[0],
        ("applied", "flow: changed orders-qps (count 1.0 -> 100.0)")
    );
    assert_eq!(outcomes[2].0, "invalid");
    assert!(outcomes[2].1.contains("`count`"), "{outcomes:?}");
    assert_eq!(outcomes[6], ("refused", "no valid admin token"));
    assert_eq!(outcomes[7], ("refused", "no valid admin token"));
    assert!(audit.iter().all(|w| w["action"] == "PUT /api/rules"
        && w["peer"].as_str().unwrap().starts_with("127.0.0.1:")));
}

/// Checks the Prometheus text format line by line: `# HELP`/`# TYPE`/`# EOF` comments, or
/// `name{labels} value` samples whose value parses.
fn parse_prometheus(text: &str) -> Vec<(String, f64)> {
    let mut samples = Vec::new();
    for line in text.lines().filter(|line| !line.is_empty()) {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") || line == "# EOF" {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad metric name in {line}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "unclosed labels in {line}");
        }
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line}"));
        samples.push((series.to_owned(), value));
    }
    samples
}

/// The value of `series` among `samples` (parsed from `text`); panics with the text if absent.
fn sample(samples: &[(String, f64)], text: &str, series: &str) -> f64 {
    samples
        .iter()
        .find(|(s, _)| s == series)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

#[tokio::test(start_paused = true)]
async fn metrics_are_prometheus_text() {
    let h = start(ORDERS_QPS_1).await;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    for _ in 0..2 {
        let uri = format!("http://{}/orders", h.proxy).parse().unwrap();
        client.get(uri).await.unwrap();
    }
    let (status, text) = get(h.admin, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let samples = parse_prometheus(&text);
    let value = |series: &str| sample(&samples, &text, series);
    assert_eq!(
        value(r#"spillway_requests_total{resource="orders",outcome="pass",reason=""}"#),
        1.0
    );
    assert_eq!(
        value(r#"spillway_requests_total{resource="orders",outcome="block",reason="flow"}"#),
        1.0
    );
    assert_eq!(
        value(r#"spillway_requests_total{resource="orders",outcome="error",reason=""}"#),
        1.0,
        "the upstream is down: 502"
    );
    assert_eq!(value(r#"spillway_rules{kind="flow"}"#), 1.0);
    assert_eq!(value(r#"spillway_concurrency{resource="orders"}"#), 0.0);
    assert_eq!(
        value(r#"spillway_response_seconds_count{resource="orders"}"#),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn a_shadow_rule_counts_its_refusals_by_rule_and_admits() {
    let h =
        start("[[flow]]\nid = \"orders-try\"\nresource = \"orders\"\ncount = 1\nshadow = true\n")
            .await;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    for _ in 0..3 {
        let uri = format!("http://{}/orders", h.proxy).parse().unwrap();
        client.get(uri).await.unwrap();
    }
    let (_, text) = get(h.admin, "/metrics").await;
    let samples = parse_prometheus(&text);
    let value = |series: &str| sample(&samples, &text, series);
    assert_eq!(
        value(r#"spillway_flow_rule_shadow_refusals_total{rule="orders-try",resource="orders"}"#),
        2.0
    );
    assert_eq!(
        value(r#"spillway_requests_total{resource="orders",outcome="pass",reason=""}"#),
        1.0
    );
    assert_eq!(
        value(r#"spillway_requests_total{resource="orders",outcome="shadow_block",reason="flow"}"#),
        2.0
    );
    assert!(
        !samples
            .iter()
            .any(|(s, _)| s.contains(r#"outcome="block""#)),
        "nothing was refused:\n{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn adaptive_rules_show_in_the_rules_the_status_and_the_metrics() {
    let h = start(
        "[[adaptive]]\nid = \"service\"\nalgorithm = { type = \"envoy_gradient\" }\n\
         [[adaptive]]\nid = \"orders-bbr\"\nresource = \"orders\"\n\
         algorithm = { type = \"bbr\", probe_rtt_interval = \"5s\" }\n\
         queue = { capacity = 5, order = \"adaptive\", timeout = \"50ms\" }\n\
         [[adaptive]]\nid = \"search-open\"\nresource = \"search\"\n\
         algorithm = { type = \"envoy_gradient\", start_limit = 50 }\n\
         queue = { order = \"lifo\" }\n",
    )
    .await;
    let (_, rules) = get(h.admin, "/api/rules").await;
    let rules = json(&rules);
    assert_eq!(rules["adaptive"][0]["id"], "service");
    assert_eq!(rules["adaptive"][0]["algorithm"]["start_limit"], 0);
    assert_eq!(rules["adaptive"][2]["algorithm"]["start_limit"], 50);
    let bbr = &rules["adaptive"][1];
    assert_eq!(bbr["algorithm"]["type"], "bbr");
    assert_eq!(bbr["algorithm"]["probe_rtt_interval"], "5s");
    assert_eq!(bbr["queue"]["order"], "adaptive");
    assert_eq!(bbr["queue"]["timeout"], "50ms");
    let (_, status) = get(h.admin, "/api/status").await;
    let adaptive = &json(&status)["adaptive"][0];
    assert_eq!(adaptive["rule"], "service");
    // Envoy's controller starts at its minimum concurrency, measuring the minRTT.
    assert_eq!(adaptive["limit"], 3);
    assert_eq!(adaptive["last_change"], "initial");
    let (_, text) = get(h.admin, "/metrics").await;
    let samples = parse_prometheus(&text);
    let value = |series: &str| sample(&samples, &text, series);
    // Each rule's series and its value: Envoy's start at its minimum; BBR's initial limit and
    // its empty queue; the adaptive order serves in order until its queue fails a request, and
    // "lifo" always serves the newest first; an open start admits up to its `start_limit`.
    for (metric, rule, resource, expected) in [
        ("limit", "service", "*", 3.0),
        ("in_flight", "service", "*", 0.0),
        ("refusals_total", "service", "*", 0.0),
        ("limit", "orders-bbr", "orders", 10.0),
        ("waiting", "orders-bbr", "orders", 0.0),
        ("queue_timeouts_total", "orders-bbr", "orders", 0.0),
        ("queue_newest_first", "orders-bbr", "orders", 0.0),
        ("queue_newest_first", "search-open", "search", 1.0),
        ("limit", "search-open", "search", 50.0),
    ] {
        let series =
            format!(r#"spillway_adaptive_{metric}{{rule="{rule}",resource="{resource}"}}"#);
        assert_eq!(value(&series), expected, "{series}");
    }
    assert_eq!(value(r#"spillway_rules{kind="adaptive"}"#), 3.0);
    let (_, status) = get(h.admin, "/api/status").await;
    let bbr = &json(&status)["adaptive"][1];
    assert_eq!(
        (bbr["waiting"].as_u64(), bbr["queue_timeouts"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(bbr["newest_first"], false);
    assert_eq!(json(&status)["adaptive"][2]["newest_first"], true);
}

#[tokio::test(start_paused = true)]
async fn a_reload_rebuilds_each_route_s_stack_with_its_new_limits() {
    // Each route's stack is built at its first request and kept: a reload must replace it.
    let text = |tps: &str| {
        format!(
            "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:9\"\n\n[[route]]\nresource = \"orders\"\npath = \"/orders\"\nupstream = \"app\"\n{tps}\n"
        )
    };
    let h = Harness::start(&text("tps = { rate = 1, interval = \"1h\" }")).await;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let status = |client: Client<_, Empty<Bytes>>| async move {
        let uri = format!("http://{}/orders", h.proxy).parse().unwrap();
        client.get(uri).await.unwrap().status()
    };
    // Admitted (nothing listens upstream: 502), then refused by the route's tps.
    assert_eq!(status(client.clone()).await, StatusCode::BAD_GATEWAY);
    assert_eq!(status(client.clone()).await, StatusCode::TOO_MANY_REQUESTS);
    std::fs::write(&h.file, text("")).unwrap();
    let (reloaded, _) = call(
        h.admin,
        Method::POST,
        "/api/reload",
        Some(TOKEN),
        Bytes::new(),
    )
    .await;
    assert_eq!(reloaded, StatusCode::OK);
    for _ in 0..3 {
        assert_eq!(
            status(client.clone()).await,
            StatusCode::BAD_GATEWAY,
            "no tps now"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_good_reload_applies_and_a_bad_one_changes_nothing() {
    let h = start(ORDERS_QPS_1).await;
    std::fs::write(
        &h.file,
        file_text("[[flow]]\nid = \"orders-qps\"\nresource = \"orders\"\ncount = 50\n"),
    )
    .unwrap();
    let (status, _) = call(
        h.admin,
        Method::POST,
        "/api/reload",
        Some(TOKEN),
        Bytes::new(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["flow"][0]["count"], 50.0);

    std::fs::write(
        &h.file,
        file_text("[[flow]]\nid = \"orders-qps\"\ncount = 5\n"),
    )
    .unwrap();
    let (status, body) = call(
        h.admin,
        Method::POST,
        "/api/reload",
        Some(TOKEN),
        Bytes::new(),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        json(&body)["error"]
            .as_str()
            .unwrap()
            .contains("missing field `resource`"),
        "{body}"
    );
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(
        json(&rules)["flow"][0]["count"],
        50.0,
        "the good rules stay"
    );
    let (_, status) = get(h.admin, "/api/status").await;
    let status = json(&status);
    assert_eq!(status["config"]["reloads"], 1);
    assert!(status["config"]["last_error"]
        .as_str()
        .unwrap()
        .contains("spillway.toml:13:1: `flow[0].resource`: missing field `resource`"));
    assert_eq!(h.reloader.state().reloads, 1);
}

#[tokio::test(start_paused = true)]
async fn persisted_rules_are_written_into_the_file_keeping_the_rest() {
    let h = start(ORDERS_QPS_1).await;
    let with_comment = std::fs::read_to_string(&h.file)
        .unwrap()
        .replace("[[route]]", "# keep this comment\n[[route]]");
    std::fs::write(&h.file, with_comment).unwrap();
    let body = r#"{"flow": [{"id": "orders-qps", "resource": "orders", "count": 7,
                   "behavior": {"type": "warm_up", "period": "10s"}}]}"#;
    let (status, response) = call(
        h.admin,
        Method::PUT,
        "/api/rules?persist=true",
        Some(TOKEN),
        Bytes::from(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let text = std::fs::read_to_string(&h.file).unwrap();
    assert!(text.contains("# keep this comment"), "{text}");
    assert!(text.contains("[[route]]"), "{text}");
    assert!(
        text.contains(r#"behavior = { type = "warm_up", period = "10s", cold_factor = 3 }"#),
        "{text}"
    );
    let reread = checked::load(&h.file).unwrap();
    let flow = reread.flow[0].get_ref();
    assert_eq!((flow.id.as_str(), flow.count), ("orders-qps", 7.0));
    // Without persist, the file stays as it is.
    let (status, _) = put_rules(&h, Some(TOKEN), r#"{"flow": []}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(std::fs::read_to_string(&h.file).unwrap(), text);
}

/// Writes at once, on two threads: a flow rule and a breaker, each with `persist=true`, sent
/// together round after round. Each answers 200, and after each round the file and the rules
/// in force hold both (before they were applied one at a time, one could write the file from
/// what it read before the other wrote, and both could fail on one temporary file name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persisted_writes_sent_together_keep_each_other() {
    let h = start(ORDERS_QPS_1).await;
    for round in 1..=20 {
        let flow = format!(
            r#"{{"flow": [{{"id": "orders-qps-{round}", "resource": "orders", "count": 5}}]}}"#
        );
        let breaker = format!(
            r#"{{"breaker": [{{"id": "orders-errors-{round}", "resource": "orders",
                "retry_timeout": "60s", "strategy": {{"type": "error_count", "threshold": 3}}}}]}}"#
        );
        let send = |body: String| {
            call(
                h.admin,
                Method::PUT,
                "/api/rules?persist=true",
                Some(TOKEN),
                Bytes::from(body),
            )
        };
        let (flowed, broken) = tokio::join!(send(flow), send(breaker));
        assert_eq!(flowed.0, StatusCode::OK, "round {round}: {}", flowed.1);
        assert_eq!(broken.0, StatusCode::OK, "round {round}: {}", broken.1);
        let reread = checked::load(&h.file).unwrap();
        assert_eq!(reread.flow[0].get_ref().id, format!("orders-qps-{round}"));
        assert_eq!(
            reread.breakers[0].get_ref().id,
            format!("orders-errors-{round}")
        );
        let (_, rules) = get(h.admin, "/api/rules").await;
        let rules = json(&rules);
        assert_eq!(rules["flow"][0]["id"], format!("orders-qps-{round}"));
        assert_eq!(rules["breaker"][0]["id"], format!("orders-errors-{round}"));
    }
}

#[tokio::test(start_paused = true)]
async fn the_dashboard_is_one_page_over_the_api() {
    let h = start(ORDERS_QPS_1).await;
    let (status, page) = get(h.admin, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.starts_with("<!doctype html>"));
    for endpoint in ["\"/api/history\"", "\"/api/stream\"", "\"/api/status\""] {
        assert!(page.contains(endpoint), "{endpoint}");
    }
}

#[tokio::test(start_paused = true)]
async fn adaptive_rules_are_replaced_and_persisted_through_the_api() {
    let h = start(ORDERS_QPS_1).await;
    let body = r#"{"adaptive": [
        {"id": "orders-g2", "resource": "orders",
         "algorithm": {"type": "gradient2", "min_limit": 2,
                       "sampling": {"type": "window", "min_time": "100ms", "max_time": "100ms"}},
         "queue": {"capacity": 10, "order": "lifo", "timeout": "20ms"}}]}"#;
    let (status, response) = call(
        h.admin,
        Method::PUT,
        "/api/rules?persist=true",
        Some(TOKEN),
        Bytes::from(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(json(&response)["adaptive"][0]["queue"]["order"], "lifo");
    let (_, status_body) = get(h.admin, "/api/status").await;
    assert_eq!(
        json(&status_body)["adaptive"][0]["limit"],
        20,
        "Gradient2's initial limit"
    );
    // The file holds the rule as one would write it, and loads back the same.
    let text = std::fs::read_to_string(&h.file).unwrap();
    assert!(text.contains("[[adaptive]]"), "{text}");
    assert!(
        text.contains(r#"queue = { capacity = 10, order = "lifo", timeout = "20ms" }"#),
        "{text}"
    );
    let reread = checked::load(&h.file).unwrap();
    let rule = reread.adaptive[0].get_ref();
    assert_eq!(rule.id, "orders-g2");
    assert_eq!(rule.queue.map(|queue| queue.capacity), Some(10));
    // A bad rule is refused whole, naming the field, and changes nothing.
    let (status, response) = put_rules(
        &h,
        Some(TOKEN),
        r#"{"adaptive": [{"id": "x", "algorithm": {"type": "bbr", "probe_gain": 0.5}}]}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(response.contains("algorithm.probe_gain"), "{response}");
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["adaptive"][0]["id"], "orders-g2");
}

#[cfg(unix)]
#[tokio::test(start_paused = true)]
async fn persisting_keeps_the_file_s_permissions_and_writes_through_a_symlink() {
    use std::os::unix::fs::PermissionsExt;
    let h = start(ORDERS_QPS_1).await;
    // The file holds the admin token: readable by its owner and group only.
    std::fs::set_permissions(&h.file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let (status, response) = call(
        h.admin,
        Method::PUT,
        "/api/rules?persist=true",
        Some(TOKEN),
        Bytes::from(r#"{"flow": []}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let mode = std::fs::metadata(&h.file).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640, "the mode changed to {mode:o}");

    // A configuration reached through a symbolic link (a mounted ConfigMap, a deploy link):
    // the file it points to is replaced, and the link stays a link.
    let directory = h.file.parent().unwrap();
    let real = directory.join("real.toml");
    std::fs::rename(&h.file, &real).unwrap();
    std::os::unix::fs::symlink(&real, &h.file).unwrap();
    let body = r#"{"flow": [{"id": "orders-qps", "resource": "orders", "count": 9}]}"#;
    let (status, response) = call(
        h.admin,
        Method::PUT,
        "/api/rules?persist=true",
        Some(TOKEN),
        Bytes::from(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert!(std::fs::symlink_metadata(&h.file)
        .unwrap()
        .file_type()
        .is_symlink());
    let reread = checked::load(&real).unwrap();
    assert_eq!(reread.flow[0].get_ref().count, 9.0);
    assert_eq!(
        std::fs::metadata(&real).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    // No temporary file is left behind.
    let left: Vec<_> = std::fs::read_dir(directory)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .filter(|name| name.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Sends a GET with `headers` (name, value) and no token unless given among them.
async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> StatusCode {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::builder().uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap()
        .status()
}

#[tokio::test(start_paused = true)]
async fn with_a_token_every_admin_request_needs_it_but_the_dashboard_page() {
    let h = start(ORDERS_QPS_1).await;
    for path in [
        "/api/resources",
        "/api/rules",
        "/api/status",
        "/metrics",
        "/nope",
    ] {
        assert_eq!(
            get_with(h.admin, path, &[]).await,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
        let wrong = get_with(h.admin, path, &[("authorization", "Bearer nope")]).await;
        assert_eq!(wrong, StatusCode::UNAUTHORIZED, "{path}");
    }
    assert_eq!(get_with(h.admin, "/", &[]).await, StatusCode::OK);
    // The scheme is case-insensitive.
    let lower = format!("bearer {TOKEN}");
    assert_eq!(
        get_with(h.admin, "/api/status", &[("authorization", &lower)]).await,
        StatusCode::OK
    );
    let (status, _) = call(h.admin, Method::POST, "/api/reload", None, Bytes::new()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test(start_paused = true)]
async fn metrics_can_be_opened_to_a_scraper_without_the_token() {
    let h = start(ORDERS_QPS_1).await;
    let listener = admin::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let proxy = {
        let config = checked::load(&h.file).unwrap();
        Server::bind(&config, spillway::Spillway::new())
            .await
            .unwrap()
            .proxy()
            .clone()
    };
    let api = Admin::new(proxy, None, Some(TOKEN.into())).with_public_metrics(true);
    tokio::spawn(api.run(listener, std::future::pending()));
    assert_eq!(get_with(addr, "/metrics", &[]).await, StatusCode::OK);
    assert_eq!(
        get_with(addr, "/api/status", &[]).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test(start_paused = true)]
async fn on_loopback_a_foreign_host_is_refused_against_dns_rebinding() {
    let h = start(ORDERS_QPS_1).await;
    let bearer = format!("Bearer {TOKEN}");
    let port = h.admin.port();
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "LOCALHOST".to_owned(),
    ] {
        let status = get_with(
            h.admin,
            "/api/status",
            &[("host", &host), ("authorization", &bearer)],
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{host}");
    }
    for host in [format!("evil.example:{port}"), "10.0.0.1".to_owned()] {
        let status = get_with(
            h.admin,
            "/api/status",
            &[("host", &host), ("authorization", &bearer)],
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{host}");
    }
    // A name the operator allows.
    let listener = admin::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = checked::load(&h.file).unwrap();
    let server = Server::bind(&config, spillway::Spillway::new())
        .await
        .unwrap();
    let api = Admin::new(server.proxy().clone(), None, None)
        .with_allowed_hosts(vec!["Spillway.Internal".into()]);
    tokio::spawn(api.run(listener, std::future::pending()));
    let allowed = get_with(addr, "/api/status", &[("host", "spillway.internal:80")]).await;
    assert_eq!(allowed, StatusCode::OK);
    let foreign = get_with(addr, "/api/status", &[("host", "evil.example")]).await;
    assert_eq!(foreign, StatusCode::FORBIDDEN);
}

/// A request with the token and `headers`: status, headers and body.
async fn exchange(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, http::HeaderMap, String) {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("authorization", format!("Bearer {TOKEN}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_wrong_method_gets_405_with_allow_and_head_is_answered_as_get() {
    let h = start(ORDERS_QPS_1).await;
    for (method, path, allow) in [
        (Method::DELETE, "/api/rules", "GET,HEAD,PUT"),
        (Method::GET, "/api/reload", "POST"),
        (Method::POST, "/metrics", "GET,HEAD"),
    ] {
        let (status, headers, _) = exchange(h.admin, method, path, &[]).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{path}");
        assert_eq!(headers["allow"], allow, "{path}");
    }
    let (status, headers, body) = exchange(h.admin, Method::HEAD, "/api/status", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/json");
    assert!(body.is_empty());
    // Until the probe's first sample, load and CPU are absent, not -1.
    let (_, _, status) = exchange(h.admin, Method::GET, "/api/status", &[]).await;
    let probe = &json(&status)["probe"];
    for reading in ["load", "cpu_usage"] {
        assert!(
            probe[reading].is_null() || probe[reading].as_f64().unwrap() >= 0.0,
            "{probe}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn metrics_are_openmetrics_when_asked_and_prometheus_text_otherwise() {
    let h = start(ORDERS_QPS_1).await;
    let openmetrics = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    let (_, headers, text) =
        exchange(h.admin, Method::GET, "/metrics", &[("accept", openmetrics)]).await;
    assert_eq!(
        headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    let (_, headers, text) = exchange(h.admin, Method::GET, "/metrics", &[]).await;
    assert_eq!(
        headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert!(!text.contains("# EOF"), "{text}");
    assert!(
        text.contains("spillway_accept_errors_total{listener=\"proxy\"} 0"),
        "{text}"
    );
}

/// A file written in place is empty for a moment: a reload never applies an empty file (it
/// would drop every route and rule), and the running configuration stays.
#[tokio::test(start_paused = true)]
async fn a_reload_of_an_empty_file_changes_nothing() {
    let h = start(ORDERS_QPS_1).await;
    for empty in ["", "\n  \n"] {
        std::fs::write(&h.file, empty).unwrap();
        let err = h.reloader.reload().unwrap_err().to_string();
        assert!(err.contains("the file is empty"), "{err}");
    }
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["flow"][0]["id"], "orders-qps");
    let (status, _) = get(h.proxy, "/orders").await;
    assert_ne!(status, StatusCode::NOT_FOUND, "the routes stay");
    assert_eq!(h.reloader.state().reloads, 0);
    assert_eq!(h.reloader.state().failures, 2);
}

#[tokio::test(start_paused = true)]
async fn a_reload_says_truly_what_needs_a_restart_and_a_missing_file_is_reported() {
    let h = start(ORDERS_QPS_1).await;
    // Settings that apply at once: not reported.
    let applied_at_once = file_text(ORDERS_QPS_1).replace(
        "listen = \"127.0.0.1:0\"\n",
        "listen = \"127.0.0.1:0\"\nshadow = true\nupstream_timeout = \"5s\"\nbody_timeout = \"3s\"\n",
    );
    std::fs::write(&h.file, applied_at_once).unwrap();
    h.reloader.reload().unwrap();
    let state = h.reloader.state();
    assert_eq!((state.reloads, state.restart_needed), (1, false));
    assert!(state.restart_fields.is_empty());
    assert!(state.last_reload_unix_seconds.is_some_and(|at| at > 1.6e9));
    // The listener's address and the admin token: applied only by a restart, and said so.
    let restart = file_text(ORDERS_QPS_1)
        .replace("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:1\"")
        + "\n[admin]\ntoken = \"other\"\n";
    std::fs::write(&h.file, restart).unwrap();
    h.reloader.reload().unwrap();
    let state = h.reloader.state();
    assert!(state.restart_needed);
    assert_eq!(state.restart_fields, ["listener.listen", "admin.token"]);
    let (_, status) = get(h.admin, "/api/status").await;
    let config = &json(&status)["config"];
    assert_eq!(config["restart_fields"][0], "listener.listen");
    assert_eq!(config["reloads"], 2);
    // The file goes away: reported once, the running configuration stays.
    std::fs::remove_file(&h.file).unwrap();
    assert!(!h.reloader.file_changed());
    assert!(!h.reloader.file_changed());
    let state = h.reloader.state();
    assert_eq!(state.failures, 1);
    assert!(
        state.last_error.as_deref().unwrap().contains("cannot read"),
        "{state:?}"
    );
    let (_, text) = get(h.admin, "/metrics").await;
    assert!(text.contains("spillway_config_reloads_total 2"), "{text}");
    assert!(
        text.contains("spillway_config_reload_failures_total 1"),
        "{text}"
    );
    assert!(text.contains("spillway_config_restart_needed 1"), "{text}");
    // Back again: a change, reloaded.
    std::fs::write(&h.file, file_text(ORDERS_QPS_1)).unwrap();
    assert!(h.reloader.file_changed());
}

// Real time: the file notifications come from another thread, which paused time would not wait
// for.
#[tokio::test]
async fn the_watcher_reloads_a_file_written_in_place_or_renamed_over() {
    let h = start(ORDERS_QPS_1).await;
    tokio::spawn(h.reloader.clone().watch());
    // Written in place (the watcher may also see the first write as it starts: wait for the
    // count, not for one attempt).
    let in_place = file_text("[[flow]]\nid = \"orders-qps\"\nresource = \"orders\"\ncount = 2\n");
    std::fs::write(&h.file, in_place).unwrap();
    wait_for_reloads(&h.reloader, 1).await;
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["flow"][0]["count"], 2.0);
    // Renamed over, as editors and deploy tools replace a file.
    let next = h.file.with_extension("next");
    std::fs::write(
        &next,
        file_text("[[flow]]\nid = \"orders-qps\"\nresource = \"orders\"\ncount = 3\n"),
    )
    .unwrap();
    std::fs::rename(&next, &h.file).unwrap();
    wait_for_reloads(&h.reloader, 2).await;
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["flow"][0]["count"], 3.0);
}

/// Waits until `reloader` has reloaded `count` times, 20 s at most.
async fn wait_for_reloads(reloader: &spillway_server::reload::Reloader, count: u64) {
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while reloader.state().reloads < count {
            let attempted = reloader.attempted();
            tokio::pin!(attempted);
            attempted.as_mut().enable();
            if reloader.state().reloads >= count {
                break;
            }
            attempted.await;
        }
    })
    .await
    .expect("reloaded within 20 s");
}

// Real time, as above. Without the fix, the swap was seen by the minute's backstop look only.
#[cfg(unix)]
#[tokio::test]
async fn the_watcher_reloads_a_file_whose_link_is_swapped_as_kubernetes_swaps_it() {
    use std::os::unix::fs::symlink;
    let h = start(ORDERS_QPS_1).await;
    // A ConfigMap's volume: `spillway.toml` -> `..data/spillway.toml`, `..data` -> the
    // current version's directory; an update writes a new directory and renames a new
    // `..data` link over the old one, so no event names `spillway.toml`.
    let dir = h.file.parent().unwrap().to_path_buf();
    let version = |name: &str, count: u32| {
        std::fs::create_dir(dir.join(name)).unwrap();
        let rule =
            format!("[[flow]]\nid = \"orders-qps\"\nresource = \"orders\"\ncount = {count}\n");
        std::fs::write(dir.join(name).join("spillway.toml"), file_text(&rule)).unwrap();
    };
    version("..v1", 1);
    symlink("..v1", dir.join("..data")).unwrap();
    std::fs::remove_file(&h.file).unwrap();
    symlink("..data/spillway.toml", &h.file).unwrap();
    tokio::spawn(h.reloader.clone().watch());
    // The watcher's first look sees a new file (the link): read once.
    wait_for_reloads(&h.reloader, 1).await;
    version("..v2", 4);
    symlink("..v2", dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    wait_for_reloads(&h.reloader, 2).await;
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["flow"][0]["count"], 4.0);
}

#[tokio::test(start_paused = true)]
async fn the_status_shows_each_flow_rule_s_state_and_the_breakers_transitions_with_why() {
    let rules = "[[flow]]\nid = \"orders-paced\"\nresource = \"orders\"\ncount = 10\nbehavior = { type = \"throttle\", max_queueing_time = \"1s\" }\n\n[[breaker]]\nid = \"orders-errors\"\nresource = \"orders\"\nretry_timeout = \"60s\"\nmin_request_amount = 2\nstrategy = { type = \"error_count\", threshold = 1 }\n";
    let h = start(rules).await;
    let (_, status) = get(h.admin, "/api/status").await;
    let status = json(&status);
    assert_eq!(status["transitions"], serde_json::json!([]));
    assert_eq!(status["flow"][0]["rule"], "orders-paced");
    assert_eq!(status["flow"][0]["queue_wait_ms"], 0.0);
    assert_eq!(status["flow"][0]["allowed_qps"], Value::Null);
    assert!(status["uptime_seconds"].is_u64());
    // Nothing listens upstream: each admitted request is a 502, an error to the breaker. The
    // second error crosses the threshold of 1 and opens it.
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let uri = format!("http://{}/orders", h.proxy).parse().unwrap();
        statuses.push(client.get(uri).await.unwrap().status());
        // Past the pacer's 100 ms between calls.
        tokio::time::advance(std::time::Duration::from_millis(150)).await;
    }
    assert_eq!(
        statuses,
        [
            StatusCode::BAD_GATEWAY,
            StatusCode::BAD_GATEWAY,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let (_, status) = get(h.admin, "/api/status").await;
    let status = json(&status);
    let transitions = status["transitions"].as_array().unwrap();
    assert_eq!(transitions.len(), 1, "{transitions:?}");
    let opened = &transitions[0];
    assert_eq!(
        (
            &opened["rule"],
            &opened["resource"],
            &opened["from"],
            &opened["to"]
        ),
        (
            &Value::from("orders-errors"),
            &Value::from("orders"),
            &Value::from("closed"),
            &Value::from("open")
        )
    );
    assert_eq!(opened["why"], "2 errors in 1s over the threshold 1");
    assert!(
        opened["at"].as_f64().unwrap() > 1.7e9,
        "wall time, Unix seconds"
    );
    assert_eq!(status["breakers"][0]["state"], "open");
}

/// Of `n` requests to `/orders` as `user`, how many were admitted (nothing listens upstream:
/// 502) rather than refused (429).
async fn admitted_as(h: &Harness, user: &str, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let headers = [("x-user", user)];
        let call = call_with(
            h.proxy,
            Method::GET,
            "/orders",
            None,
            &headers,
            Bytes::new(),
        );
        match call.await.0 {
            StatusCode::BAD_GATEWAY => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("{other}"),
        }
    }
    admitted
}

#[tokio::test(start_paused = true)]
async fn per_key_rules_are_read_replaced_and_persisted_through_the_api() {
    let per_user =
        "[[keyed]]\nid = \"per-user\"\nresource = \"orders\"\nkey = \"header:x-user\"\ncount = 3\n";
    let h = start(per_user).await;
    // Read back in the file's form, the key source included.
    let (_, rules) = get(h.admin, "/api/rules").await;
    let rule = &json(&rules)["keyed"][0];
    assert_eq!(rule["id"], "per-user");
    assert_eq!(rule["key"], "header:x-user");
    assert_eq!(rule["count"], 3.0);
    assert_eq!(admitted_as(&h, "alice", 4).await, 3);

    // Replaced and persisted: one a user now, two for `batch`; the file says so and loads back.
    let body = r#"{"keyed": [{"id": "per-user", "resource": "orders", "key": "header:x-user",
        "count": 1, "exceptions": [{"key": "batch", "count": 2}]}]}"#;
    let (status, response) = call(
        h.admin,
        Method::PUT,
        "/api/rules?persist=true",
        Some(TOKEN),
        Bytes::from(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(json(&response)["keyed"][0]["count"], 1.0);
    assert_eq!(admitted_as(&h, "bob", 3).await, 1);
    assert_eq!(admitted_as(&h, "batch", 3).await, 2);
    let text = std::fs::read_to_string(&h.file).unwrap();
    assert!(
        text.contains("[[keyed]]") && text.contains(r#"key = "header:x-user""#),
        "{text}"
    );
    let reread = checked::load(&h.file).unwrap();
    assert_eq!(reread.keyed[0].get_ref().count, 1.0);
    assert_eq!(reread.keyed[0].get_ref().exceptions.len(), 1);

    // A key the routes cannot give (no `{id}` in `/orders`) is refused, the field named, and
    // nothing changes.
    let (status, response) = put_rules(
        &h,
        Some(TOKEN),
        r#"{"keyed": [{"id": "per-id", "resource": "orders", "key": "path:id", "count": 5}]}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{response}");
    let fault = &json(&response)["rule"];
    assert_eq!(
        (fault["kind"].as_str(), fault["field"].as_str()),
        (Some("keyed"), Some("key"))
    );
    assert!(
        fault["problem"]
            .as_str()
            .unwrap()
            .contains("no such segment"),
        "{response}"
    );
    // So is a source that is none, by the rule's own checks.
    let (status, response) = put_rules(
        &h,
        Some(TOKEN),
        r#"{"keyed": [{"id": "x", "resource": "orders", "key": "cookie:sid", "count": 5}]}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{response}");
    assert!(response.contains("not a key source"), "{response}");
    // So is an exception no client's key can be: IPv6 clients are keyed by their /64.
    let (status, response) = put_rules(
        &h,
        Some(TOKEN),
        r#"{"keyed": [{"id": "x", "resource": "orders", "key": "peer_ip", "count": 5,
            "exceptions": [{"key": "2001:db8::1", "count": 9}]}]}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{response}");
    let fault = &json(&response)["rule"];
    assert_eq!(fault["field"], "exceptions", "{response}");
    assert!(response.contains("write `2001:db8::/64`"), "{response}");
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["keyed"][0]["id"], "per-user");
    assert_eq!(admitted_as(&h, "carol", 2).await, 1);

    // A reload of the file keeps the persisted rules.
    h.reloader.reload().unwrap();
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["keyed"][0]["count"], 1.0);
}

/// A `PUT /api/rules?persist=true` whose file hangs (here a FIFO no one writes to yet, as a
/// hung disk would) holds only itself: the status is answered meanwhile, and the write ends
/// once the file answers. On real time: it waits on events, each with a timeout.
#[tokio::test]
async fn a_hung_file_holds_only_the_write_that_waits_on_it() {
    use std::io::Write;
    let h = start("").await;
    let original = std::fs::read_to_string(&h.file).unwrap();
    std::fs::remove_file(&h.file).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&h.file)
        .status()
        .unwrap();
    assert!(made.success());
    let (blocked_tx, blocked) = tokio::sync::oneshot::channel();
    let (answered, answered_rx) = std::sync::mpsc::channel::<()>();
    let fifo = h.file.clone();
    let writer = std::thread::spawn(move || {
        // Opening a FIFO to write waits for its reader: the PUT, holding the write lock.
        let mut file = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        let _ = blocked_tx.send(());
        // The file answers once the status was answered, or after 30 s (the test then fails).
        let waited = answered_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .is_ok();
        file.write_all(original.as_bytes()).unwrap();
        waited
    });
    let admin = h.admin;
    let body = Bytes::from_static(br#"{"flow": [{"id": "a", "resource": "orders", "count": 7}]}"#);
    let put = tokio::spawn(async move {
        call(
            admin,
            Method::PUT,
            "/api/rules?persist=true",
            Some(TOKEN),
            body,
        )
        .await
    });
    let timeout = std::time::Duration::from_secs(30);
    tokio::time::timeout(timeout, blocked)
        .await
        .expect("the PUT opened the file")
        .unwrap();
    let (status, _) = tokio::time::timeout(timeout, get(h.admin, "/api/status"))
        .await
        .expect("the status is answered while the write waits");
    assert_eq!(status, StatusCode::OK);
    let _ = answered.send(());
    assert!(
        writer.join().unwrap(),
        "the status was answered before the file was"
    );
    let (status, response) = tokio::time::timeout(timeout, put).await.unwrap().unwrap();
    assert_eq!(status, StatusCode::OK, "{response}");
    let text = std::fs::read_to_string(&h.file).unwrap();
    assert!(text.contains("count = 7"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_rule_id_cannot_write_series_of_its_own_into_the_metrics() {
    let h = start(ORDERS_QPS_1).await;
    // An id that, written as given, ends its series and starts others (found by an attack).
    let body = serde_json::json!({"breaker": [{
        "id": "b\"} 9\n# EOF\ninjected_total 1\n#\\",
        "resource": "orders",
        "retry_timeout": "60s",
        "strategy": {"type": "error_count", "threshold": 1}
    }]});
    let (status, response) = call(
        h.admin,
        Method::PUT,
        "/api/rules",
        Some(TOKEN),
        Bytes::from(body.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let (_, text) = get(h.admin, "/metrics").await;
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.contains(&"# EOF"), "{text}");
    assert!(!lines.iter().any(|l| l.starts_with("injected")), "{text}");
    assert!(
        text.contains(r#"spillway_breaker_state{rule="b\"} 9\n# EOF\ninjected_total 1\n#\\",resource="orders"}"#),
        "{text}"
    );
}
