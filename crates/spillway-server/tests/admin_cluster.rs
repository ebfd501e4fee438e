//! Cluster rules through the admin API, on a real `redis-server`: read in the file's form,
//! replaced (a rule that stays keeps its lease), refused with the field named and nothing
//! changed, refused without a `[cluster]` section, and persisted into the file.

#[path = "../../spillway-redis/tests/common/mod.rs"]
mod redis_server;
mod support;

use http::StatusCode;
use redis_server::RedisServer;
use spillway_server::checked;
use support::server::{call, get, json, put_rules, Harness, TOKEN};

/// A file routing `/api` to an upstream that is not there (admitted requests get 502), with
/// `cluster` (a `[cluster]` section and rules, or nothing).
fn file_text(cluster: &str) -> String {
    format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:9\"\n\n[[route]]\nresource = \"api\"\npath = \"/api\"\nupstream = \"app\"\n\n{cluster}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_rules_are_read_replaced_and_persisted_through_the_api() {
    let redis = RedisServer::start().await;
    let section = format!("[cluster]\nredis = \"{}\"\n\n", redis.url());
    let rule = "[[cluster_rule]]\nid = \"fleet\"\nresource = \"api\"\nlimit = 300\n";
    let h = Harness::start(&file_text(&format!("{section}{rule}"))).await;

    // Read back in the file's form.
    let (_, rules) = get(h.admin, "/api/rules").await;
    let read = &json(&rules)["cluster_rule"];
    assert_eq!(read[0]["id"], "fleet");
    assert_eq!(
        (read[0]["limit"].as_f64(), read[0]["kind"].as_str()),
        (Some(300.0), Some("qps"))
    );

    // A rule at fault is refused with its field named, and nothing changes.
    let (status, response) = put_rules(
        &h,
        Some(TOKEN),
        r#"{"cluster_rule": [{"id": "fleet", "resource": "api", "limit": 5, "kind": "bucket", "interval": "2s"}]}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{response}");
    let fault = &json(&response)["rule"];
    assert_eq!(
        (
            fault["kind"].as_str(),
            fault["field"].as_str(),
            fault["id"].as_str()
        ),
        (Some("cluster_rule"), Some("interval"), Some("fleet"))
    );
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["cluster_rule"][0]["limit"], 300.0);

    // Replaced and persisted: the old rule stays, a concurrency rule joins it.
    let body = r#"{"cluster_rule": [
        {"id": "fleet", "resource": "api", "limit": 300},
        {"id": "places", "resource": "api", "kind": "concurrency", "limit": 4}]}"#;
    let (status, response) = call(
        h.admin,
        http::Method::PUT,
        "/api/rules?persist=true",
        Some(TOKEN),
        bytes::Bytes::from(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(json(&response)["cluster_rule"][1]["id"], "places");
    let loaded: Vec<String> = h
        .handle
        .spillway()
        .cluster_rules()
        .into_iter()
        .map(|rule| rule.id)
        .collect();
    assert_eq!(loaded, ["fleet", "places"]);
    let (_, status) = get(h.admin, "/api/status").await;
    let states = &json(&status)["cluster"];
    assert_eq!(
        (states[1]["rule"].as_str(), states[1]["kind"].as_str()),
        (Some("places"), Some("concurrency"))
    );
    let text = std::fs::read_to_string(&h.file).unwrap();
    assert!(
        text.contains("[[cluster_rule]]") && text.contains("\"places\""),
        "{text}"
    );
    let reread = checked::load(&h.file).unwrap();
    assert_eq!(reread.cluster_rules.len(), 2);
    assert_eq!(reread.cluster_rules[1].get_ref().limit, 4.0);
    // A reload of the file keeps them.
    h.reloader.reload().unwrap();
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["cluster_rule"][1]["id"], "places");

    // A kind given as null stays as it is.
    let (status, response) = put_rules(&h, Some(TOKEN), r#"{"cluster_rule": null}"#).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(json(&response)["cluster_rule"][1]["id"], "places");

    // None at all: every lease's task stops, and the metrics count none.
    let (status, response) = put_rules(&h, Some(TOKEN), r#"{"cluster_rule": []}"#).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert!(h.handle.spillway().cluster_rules().is_empty());
    let metrics = h.handle.render_metrics().unwrap();
    assert!(
        metrics.contains("spillway_rules{kind=\"cluster\"} 0"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_rules_need_a_cluster_section_in_the_running_configuration() {
    let h = Harness::start(&file_text("")).await;
    let (status, response) = put_rules(
        &h,
        Some(TOKEN),
        r#"{"cluster_rule": [{"id": "fleet", "resource": "api", "limit": 10}]}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{response}");
    assert!(response.contains("[cluster] section"), "{response}");
    let (_, rules) = get(h.admin, "/api/rules").await;
    assert_eq!(json(&rules)["cluster_rule"], serde_json::json!([]));
}

/// `/readyz` without the token: its status and body.
async fn readyz(h: &Harness) -> (StatusCode, String) {
    call(
        h.admin,
        http::Method::GET,
        "/readyz",
        None,
        bytes::Bytes::new(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_the_first_answer_from_redis() {
    // A "Redis" that takes connections and never answers: the rule's state stays unknown
    // (no answer, and no failure before the hour-long call timeout).
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let section = format!(
        "[cluster]\nredis = \"redis://{addr}\"\ncall_timeout = \"1h\"\nstartup_wait = \"1ms\"\n\n"
    );
    let rule = "[[cluster_rule]]\nid = \"fleet\"\nresource = \"api\"\nlimit = 300\n";
    let h = Harness::start(&file_text(&format!("{section}{rule}"))).await;
    let (status, body) = readyz(&h).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        json(&body)["reason"],
        "waiting for Redis: 1 cluster rules have had no answer yet"
    );
    // Live all the same.
    let (status, body) = call(
        h.admin,
        http::Method::GET,
        "/healthz",
        None,
        bytes::Bytes::new(),
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, r#"{"live":true}"#)
    );

    // With a real Redis, ready once the first answer came.
    let redis = RedisServer::start().await;
    let section = format!("[cluster]\nredis = \"{}\"\n\n", redis.url());
    let h = Harness::start(&file_text(&format!("{section}{rule}"))).await;
    let ready = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let (status, body) = readyz(&h).await;
            if status == StatusCode::OK {
                return body;
            }
            // No event says it: asked again every 10 ms (docs/testing.md).
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("ready once Redis answered");
    assert_eq!(ready, r#"{"ready":true}"#);
}
