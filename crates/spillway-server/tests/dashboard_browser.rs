//! The dashboard in a real browser: Debian's headless Chromium driven over WebDriver
//! (chromedriver, through fantoccini), against the real `spillway` binary and a real upstream.
//!
//! Every wait is on an event with a deadline: a line of a child's log, an answer from the proxy,
//! or a condition in the page, checked by a `MutationObserver` inside the browser whenever the
//! page changes (bounded by WebDriver's script timeout). The tests run one at a time: each
//! starts a browser, and the machine has two cores.
//!
//! Needs `chromium` and `chromedriver` (Debian's `chromium` and `chromium-driver`, which
//! `.ci/run` installs); `SPILLWAY_CHROMIUM` and `SPILLWAY_CHROMEDRIVER` name others.
//! `SPILLWAY_UPDATE_SCREENSHOT=1` writes the demo's screenshot to `docs/dashboard.png`.

#![cfg(unix)]

use support::child;
mod support;

use bytes::Bytes;
use child::free_port;
use fantoccini::{Client, ClientBuilder, Locator};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// Longest any one wait may take before the test fails (never reached when it passes).
const DEADLINE: Duration = Duration::from_secs(30);
const TOKEN: &str = "dashboard-s3cret";

/// One browser at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A child's output lines, as they come.
fn lines_of(
    reader: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Reads `lines` until one holds `needle`; returns it.
async fn wait_for_line(lines: &mut mpsc::UnboundedReceiver<String>, needle: &str) -> String {
    tokio::time::timeout(DEADLINE, async {
        loop {
            match lines.recv().await {
                Some(line) if line.contains(needle) => return line,
                Some(_) => {}
                None => panic!("the output ended before `{needle}`"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no `{needle}` within {DEADLINE:?}"))
}

/// An upstream answering 200 `ok`, but 500 under `/flaky`.
async fn upstream() -> SocketAddr {
    support::upstream(|request: Request<hyper::body::Incoming>| async move {
        let status = if request.uri().path().starts_with("/flaky") {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        };
        let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
        *response.status_mut() = status;
        response
    })
    .await
}

/// `spillway serve` on `config`, once it says it listens.
async fn serve(config: &Path) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["serve", "--config"])
        .arg(config)
        .env("SPILLWAY_LOG", "info")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = lines_of(child.stderr.take().unwrap());
    wait_for_line(&mut lines, "spillway listening").await;
    // The rest of the log is read, so that the child never blocks on a full pipe.
    tokio::spawn(async move { while lines.recv().await.is_some() {} });
    child
}

/// A headless Chromium session, and the chromedriver serving it.
struct Browser {
    client: Client,
    _driver: Child,
    _profile: tempfile::TempDir,
}

async fn browser() -> Browser {
    let chromium =
        std::env::var("SPILLWAY_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let driver_path =
        std::env::var("SPILLWAY_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
    let port = free_port();
    let mut driver = Command::new(&driver_path)
        .arg(format!("--port={port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| {
            panic!("cannot start `{driver_path}` ({err}): install Debian's chromium-driver")
        });
    let mut lines = lines_of(driver.stdout.take().unwrap());
    wait_for_line(&mut lines, "started successfully").await;
    tokio::spawn(async move { while lines.recv().await.is_some() {} });
    let profile = tempfile::tempdir().unwrap();
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1400,1900",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        }),
    );
    capabilities.insert("goog:loggingPrefs".into(), json!({ "browser": "ALL" }));
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a WebDriver session in headless Chromium");
    client
        .update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
            Some(DEADLINE),
            Some(DEADLINE),
            Some(Duration::ZERO),
        ))
        .await
        .unwrap();
    Browser {
        client,
        _driver: driver,
        _profile: profile,
    }
}

/// Chromium's console since the last call (chromedriver's log endpoint).
#[derive(Debug)]
struct ConsoleLog;

impl fantoccini::wd::WebDriverCompatibleCommand for ConsoleLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type": "browser"}"#.into()))
    }
}

/// The console's errors since the last call.
async fn console_errors(client: &Client) -> Vec<String> {
    let log = client.issue_cmd(ConsoleLog).await.unwrap();
    log.as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["level"] == "SEVERE")
        .map(|entry| entry["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Waits until `condition` (a JavaScript function body) returns a truthy value in the page,
/// checking it whenever the page changes; returns that value.
async fn until(client: &Client, what: &str, condition: &str) -> Value {
    const SCRIPT: &str = r#"
        const [body, done] = [arguments[0], arguments[arguments.length - 1]];
        const condition = new Function(body);
        let observer = null;
        const check = () => {
            let value = null;
            try { value = condition(); } catch (e) { value = null; }
            if (value) { if (observer) observer.disconnect(); done(value); return true; }
            return false;
        };
        if (!check()) {
            observer = new MutationObserver(check);
            observer.observe(document, { subtree: true, childList: true, characterData: true,
                                         attributes: true });
        }
    "#;
    client
        .execute_async(SCRIPT, vec![Value::from(condition)])
        .await
        .unwrap_or_else(|err| panic!("waiting for {what}: {err}"))
}

/// Sends `GET path` to the proxy; returns the status.
async fn get(proxy: SocketAddr, path: &str) -> StatusCode {
    let client: HttpClient<_, Empty<Bytes>> =
        HttpClient::builder(TokioExecutor::new()).build_http();
    let uri = format!("http://{proxy}{path}").parse().unwrap();
    let response = client.get(uri).await.unwrap();
    let status = response.status();
    let _ = response.into_body().collect().await;
    status
}

/// `GET path` to the proxy, whatever comes of it.
async fn try_get(proxy: SocketAddr, path: &str) {
    let client: HttpClient<_, Empty<Bytes>> =
        HttpClient::builder(TokioExecutor::new()).build_http();
    let uri = format!("http://{proxy}{path}").parse().unwrap();
    if let Ok(response) = client.get(uri).await {
        let _ = response.into_body().collect().await;
    }
}

/// An admin API call with the token; the status and the JSON body.
async fn admin_call(
    admin: SocketAddr,
    method: http::Method,
    path: &str,
    body: &str,
) -> (StatusCode, Value) {
    let client: HttpClient<_, Full<Bytes>> = HttpClient::builder(TokioExecutor::new()).build_http();
    let request = Request::builder()
        .method(method)
        .uri(format!("http://{admin}{path}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        // As a script writes: a JSON body declared (a write without one gets 415).
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Requests to `/orders` and `/flaky`, 25 a second each, until dropped.
struct Traffic(tokio::task::JoinHandle<()>);

impl Traffic {
    fn start(proxy: SocketAddr) -> Self {
        Self(tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(40));
            loop {
                every.tick().await;
                // Refused while the server restarts: not counted.
                tokio::spawn(try_get(proxy, "/orders"));
                tokio::spawn(try_get(proxy, "/flaky"));
            }
        }))
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn config_text(proxy: u16, admin: &str, upstream: SocketAddr, token: Option<&str>) -> String {
    let token = token.map_or(String::new(), |token| format!("token = \"{token}\"\n"));
    format!(
        "[listener]\nlisten = \"127.0.0.1:{proxy}\"\n\n[admin]\nlisten = \"{admin}\"\n{token}\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"orders\"\npath = \"/orders\"\nupstream = \"app\"\n\n\
         [[route]]\nresource = \"flaky\"\npath = \"/flaky\"\nupstream = \"app\"\n\
         criticality = \"sheddable\"\n\n\
         [[flow]]\nid = \"orders-qps\"\nresource = \"orders\"\ncount = 1000\n\n\
         [[keyed]]\nid = \"orders-per-client\"\nresource = \"orders\"\nkey = \"peer_ip\"\ncount = 1000\n\n\
         [[breaker]]\nid = \"flaky-errors\"\nresource = \"flaky\"\nretry_timeout = \"60s\"\n\
         min_request_amount = 5\nstrategy = {{ type = \"error_ratio\", threshold = 0.5 }}\n"
    )
}

/// Waits until the page is live on the stream and shows the rules.
async fn loaded(client: &Client) {
    until(
        client,
        "the stream",
        "return document.getElementById('state').textContent === 'live';",
    )
    .await;
    until(
        client,
        "the rules",
        "return document.querySelector('#rules-flow tr[data-id=\"orders-qps\"]');",
    )
    .await;
}

/// `spillway serve` on a file of its own in front of a real upstream, its admin API on
/// `admin_host` (`127.0.0.1` or `0.0.0.0`) with `token`, if any.
struct Served {
    proxy: SocketAddr,
    /// The admin API, reached through loopback.
    admin: SocketAddr,
    config: PathBuf,
    server: Child,
    _dir: tempfile::TempDir,
}

async fn served(admin_host: &str, token: Option<&str>) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let upstream = upstream().await;
    let (proxy_port, admin_port) = (free_port(), free_port());
    let config = dir.path().join("spillway.toml");
    let listen = format!("{admin_host}:{admin_port}");
    std::fs::write(&config, config_text(proxy_port, &listen, upstream, token)).unwrap();
    let server = serve(&config).await;
    Served {
        proxy: format!("127.0.0.1:{proxy_port}").parse().unwrap(),
        admin: format!("127.0.0.1:{admin_port}").parse().unwrap(),
        config,
        server,
        _dir: dir,
    }
}

/// Clicks the element matching `css` once it is there, inside the page (so that a table the
/// page redraws every second cannot swap the element between finding and clicking it).
async fn click(client: &Client, css: &str) {
    let script = format!(
        "const node = document.querySelector({}); if (node) node.click(); return !!node;",
        Value::from(css)
    );
    until(client, css, &script).await;
}

/// Clicks `orders-qps`'s shadow button; waits until the page and the server agree that the
/// rule is in shadow mode (`shadow`) or enforced.
async fn switch_shadow(client: &Client, admin: SocketAddr, shadow: bool) {
    const BUTTON: &str = r#"#rules-flow tr[data-id="orders-qps"] button.shadow"#;
    click(client, BUTTON).await;
    // The button offers the other mode.
    let label = if shadow { "enforce" } else { "shadow" };
    let script = format!(
        "const b = document.querySelector({}); return b && b.textContent === '{label}';",
        Value::from(BUTTON)
    );
    until(client, "the rule's mode", &script).await;
    let (_, rules) = admin_call(admin, http::Method::GET, "/api/rules", "").await;
    assert_eq!(rules["flow"][0]["shadow"], shadow);
}

/// The newest second the page has received.
async fn last_second(client: &Client) -> u64 {
    let second = client.execute("return lastSecond;", vec![]).await.unwrap();
    second.as_u64().unwrap()
}

/// The page's text of the first element matching `css`, found and read in one script: the
/// page re-renders each second, and an element found in one WebDriver call can be gone
/// (stale) by the next.
async fn text(client: &Client, css: &str) -> String {
    let text = client
        .execute(
            "const found = document.querySelector(arguments[0]);\
             return found === null ? null : found.innerText;",
            vec![serde_json::json!(css)],
        )
        .await
        .unwrap();
    text.as_str()
        .unwrap_or_else(|| panic!("nothing matches {css}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_live_traffic_and_steers_the_rules() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Served {
        proxy,
        admin,
        config,
        mut server,
        _dir,
    } = served("127.0.0.1", None).await;
    let browser = browser().await;
    let client = &browser.client;
    client.goto(&format!("http://{admin}/")).await.unwrap();
    loaded(client).await;

    // Live values within 2 s of the first request answered.
    assert_eq!(get(proxy, "/orders").await, StatusCode::OK);
    let started = tokio::time::Instant::now();
    let traffic = Traffic::start(proxy);
    until(
        client,
        "the orders row",
        r#"const row = document.querySelector('#resources tr[data-resource="orders"] td.pass');
           return row && Number(row.textContent) > 0;"#,
    )
    .await;
    let shown = started.elapsed();
    assert!(
        shown <= Duration::from_secs(2),
        "live values took {shown:?}"
    );
    let passed: f64 = text(client, ".card[data-key=pass] .value")
        .await
        .parse()
        .unwrap();
    assert!(passed > 0.0);

    // A resource's charts: requests, blocks by rule, response time, in flight.
    click(client, r#"#resources tr[data-resource="orders"]"#).await;
    let titles = until(
        client,
        "the charts",
        r#"const charts = [...document.querySelectorAll('#detail svg.chart')];
           const points = charts.length && charts[0].querySelector('polyline.pass').getAttribute('points');
           return charts.length === 4 && points.length > 0 && charts.map((c) => c.dataset.title);"#,
    )
    .await;
    assert_eq!(
        titles,
        json!([
            "requests / s",
            "blocked / s, by rule",
            "response time (ms)",
            "in flight"
        ])
    );
    let rules_of_orders = text(client, "#detail-rules tbody").await;
    assert!(rules_of_orders.contains("orders-qps"), "{rules_of_orders}");
    // The per-key rule among the rules, and with what it checked and the keys it holds.
    let listed = text(client, r#"#rules-keyed tr[data-id="orders-per-client"]"#).await;
    assert!(listed.contains("peer_ip"), "{listed}");
    // Every kind the admin API serves has its list and its form, cluster rules too (none
    // here: this server has no `[cluster]`).
    let cluster = text(client, "#rules-cluster_rule").await;
    assert!(
        cluster.contains("Cluster rules") && cluster.contains("none"),
        "{cluster}"
    );
    assert!(
        rules_of_orders.contains("orders-per-client")
            && rules_of_orders.contains("per key")
            && rules_of_orders.contains("keys exact"),
        "{rules_of_orders}"
    );

    // The breaker opens on the upstream's 500s: its state, timeline and why, and the story.
    until(
        client,
        "the breaker to open",
        r#"const row = document.querySelector('#breakers tr[data-rule="flaky-errors"]');
           return row && row.children[2].textContent === 'open';"#,
    )
    .await;
    let why = text(client, r#"#breakers tr[data-rule="flaky-errors"]"#).await;
    assert!(
        why.contains("error ratio") && why.contains("over the threshold 0.5"),
        "{why}"
    );
    until(
        client,
        "the story to tell it",
        r#"return [...document.querySelectorAll('#events li.breaker')]
                  .some((li) => li.textContent.includes('breaker flaky-errors opened on flaky'));"#,
    )
    .await;

    // An invalid edit names its field, and changes nothing.
    click(
        client,
        r#"#rules-flow tr[data-id="orders-qps"] button.edit"#,
    )
    .await;
    let count = client
        .find(Locator::Css("#rules-flow form.rule-form [name=count]"))
        .await
        .unwrap();
    count.clear().await.unwrap();
    count.send_keys("-5").await.unwrap();
    click(client, "#rules-flow form.rule-form button.save").await;
    let message = until(
        client,
        "the field's error",
        r#"const error = document.querySelector('#rules-flow .field-error[data-field="count"]');
           const input = document.querySelector('#rules-flow form.rule-form [name=count]');
           return error && error.textContent && input.classList.contains('invalid') && error.textContent;"#,
    )
    .await;
    assert_eq!(message, "count must be finite and at least 0, got -5");
    let (_, rules) = admin_call(admin, http::Method::GET, "/api/rules", "").await;
    assert_eq!(rules["flow"][0]["count"], 1000.0, "nothing changed");

    // A valid edit takes effect: the proxy starts refusing. It is written to the file too.
    click(client, "#persist").await;
    count.clear().await.unwrap();
    count.send_keys("1").await.unwrap();
    click(client, "#rules-flow form.rule-form button.save").await;
    until(
        client,
        "the form to close",
        "return !document.querySelector('#rules-flow form.rule-form');",
    )
    .await;
    tokio::time::timeout(DEADLINE, async {
        while get(proxy, "/orders").await != StatusCode::TOO_MANY_REQUESTS {}
    })
    .await
    .expect("the proxy refuses beyond the new limit");
    until(
        client,
        "the story to tell it",
        r#"return [...document.querySelectorAll('#events li.limit')]
                  .some((li) => li.textContent.includes('orders-qps started refusing orders'));"#,
    )
    .await;
    let file = std::fs::read_to_string(&config).unwrap();
    assert!(
        file.contains("count = 1.0\n") || file.contains("count = 1\n"),
        "{file}"
    );
    let audit = text(client, "#audit").await;
    assert!(
        audit.contains("dashboard from 127.0.0.1:")
            && audit
                .contains("flow: changed orders-qps (count 1000.0 -> 1.0); persisted to the file"),
        "{audit}"
    );

    // Shadow mode and back: in shadow the rule refuses nothing.
    switch_shadow(client, admin, true).await;
    for _ in 0..5 {
        assert_eq!(get(proxy, "/orders").await, StatusCode::OK);
    }
    switch_shadow(client, admin, false).await;

    // The stream survives a reload: seconds keep coming after it.
    let before = last_second(client).await;
    let (status, _) = admin_call(admin, http::Method::POST, "/api/reload", "").await;
    assert_eq!(status, StatusCode::OK);
    until(
        client,
        "seconds after the reload",
        &format!("return lastSecond > {before} + 1 && document.getElementById('state').textContent === 'live';"),
    )
    .await;

    // ... and reconnects after the server restarts.
    server.kill().await.unwrap();
    until(
        client,
        "the page to see it go",
        "return document.getElementById('state').textContent !== 'live';",
    )
    .await;
    let mut server = serve(&config).await;
    let before = last_second(client).await;
    until(
        client,
        "the stream back",
        &format!("return document.getElementById('state').textContent === 'live' && lastSecond > {before};"),
    )
    .await;
    drop(traffic);

    let errors = console_errors(client).await;
    // The only errors the page may log: the invalid edit's 422, and the restart's refused
    // connections and cut stream.
    let unexpected: Vec<&String> = errors
        .iter()
        .filter(|e| {
            let expected = (e.contains("/api/rules") && e.contains("422"))
                || [
                    "ERR_CONNECTION_REFUSED",
                    "ERR_INCOMPLETE_CHUNKED_ENCODING",
                    "ERR_EMPTY_RESPONSE",
                ]
                .iter()
                .any(|cause| e.contains(cause));
            !expected
        })
        .collect();
    assert!(unexpected.is_empty(), "console errors: {unexpected:?}");
    browser.client.close().await.unwrap();
    server.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_loads_with_no_console_errors() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Served {
        proxy,
        admin,
        config,
        mut server,
        _dir,
    } = served("127.0.0.1", None).await;
    // The flaky route's requests are sheddable: the criticality panel shows them.
    assert_eq!(
        get(proxy, "/flaky").await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    let browser = browser().await;
    let client = &browser.client;
    client.goto(&format!("http://{admin}/")).await.unwrap();
    loaded(client).await;
    let sheddable = until(
        client,
        "the criticality panel",
        "const row = document.querySelector('#classes tr[data-class=\"sheddable\"]'); \
         return !document.getElementById('classes-section').hidden && row && \
         [...row.cells].map((cell) => cell.textContent);",
    )
    .await;
    // Its class, admitted, shed, deadline drops, the share refused, (the mean wait,) waiting.
    let cells = sheddable.as_array().unwrap();
    assert_eq!(
        cells[..5],
        [
            json!("sheddable"),
            json!("1"),
            json!("0"),
            json!("0"),
            json!("0.0%")
        ]
    );
    assert_eq!(cells[6], json!("0"), "{sheddable}");
    until(
        client,
        "the status",
        "return document.getElementById('meta').textContent.startsWith('version ');",
    )
    .await;
    let meta = text(client, "#meta").await;
    assert!(
        meta.contains(&format!("config {}", config.display())),
        "{meta}"
    );
    // The proxy's listener: its connections, and what it turned away (none here; then as a
    // status with troubles tells them).
    let listener = until(
        client,
        "the listener line",
        "const line = document.getElementById('listener').textContent; \
         return line.startsWith('proxy: ') && line;",
    )
    .await;
    let listener = listener.as_str().unwrap();
    assert!(listener.contains(" connections"), "{listener}");
    let told = client
        .execute(
            r#"const proxy = status.connections.proxy;
               proxy.troubles.go_aways = 2;
               proxy.troubles.client_cap_refusals = 1;
               proxy.troubles.a_new_one = 5;
               renderListener();
               const line = document.getElementById("listener").textContent;
               status.adaptive.push({ rule: "a", resource: "R", limit: 9, in_flight: 1,
                 waiting: 0, newest_first: false, last_change: "sample", paced: 3 });
               return [line, rulesOf("R").map((row) => row.join(" ")).join(" | ")];"#,
            vec![],
        )
        .await
        .unwrap();
    let (line, rows) = (told[0].as_str().unwrap(), told[1].as_str().unwrap());
    assert!(
        line.contains("closed at a client's cap 1 · told to go away (resets) 2")
            && line.contains("a_new_one 5"),
        "{line}"
    );
    assert!(
        rows.contains("3 paced by their clients (no sample)"),
        "{rows}"
    );
    // A rule no route reaches is named at the top of the page.
    let rules = r#"{"flow": [
        {"id": "orders-qps", "resource": "orders", "count": 1000},
        {"id": "typo", "resource": "ordres", "count": 5}
    ]}"#;
    let (status, body) = admin_call(admin, http::Method::PUT, "/api/rules", rules).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let unused = until(
        client,
        "the unused rule",
        "const unused = document.getElementById('unused-rules'); return unused && unused.textContent;",
    )
    .await;
    assert_eq!(
        unused,
        json!("1 rule never applies, no route produces its resource: flow typo on ordres")
    );
    // Rule ids are any text (found by an attack): one with a `|` is told whole when it stops
    // refusing, and one named `__proto__` is a rule like any other in the charts (samples
    // come from JSON.parse, which makes it an own key).
    let story = client
        .execute(
            r#"eventsFromSecond({ second: 1000, resources: { R: { blocks: { "a|b": 2 } } } });
               eventsFromSecond({ second: 1004, resources: {} });
               return [...document.querySelectorAll('#events li.limit')].map((li) => li.textContent);"#,
            vec![],
        )
        .await
        .unwrap();
    let told: Vec<&str> = story
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        told.iter()
            .any(|line| line.ends_with("a|b stopped refusing R")),
        "{told:?}"
    );
    let drawn = client
        .execute(
            r#"series.set("P", [JSON.parse('{"second": 1, "pass": 1, "block": 2, "blocks": {"__proto__": 2}}'),
                                JSON.parse('{"second": 2, "pass": 1, "block": 0}')]);
               selected = "P";
               renderDetail();
               return document.getElementById("detail-charts").textContent;"#,
            vec![],
        )
        .await
        .unwrap();
    let drawn = drawn.as_str().unwrap();
    assert!(
        drawn.contains("__proto__") && !drawn.contains("NaN"),
        "{drawn}"
    );
    assert!(console_errors(client).await.is_empty(), "console errors");
    browser.client.close().await.unwrap();
    server.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_without_the_token_nothing_loads_and_nothing_is_written() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Served {
        admin,
        mut server,
        _dir,
        ..
    } = served("0.0.0.0", Some(TOKEN)).await;
    let browser = browser().await;
    let client = &browser.client;
    client.goto(&format!("http://{admin}/")).await.unwrap();
    until(
        client,
        "the token bar",
        "return !document.getElementById('token-bar').hidden;",
    )
    .await;
    // Nothing loaded: no statistics, no rules, no status.
    let shown: Value = client
        .execute(
            "return [document.querySelectorAll('#resources tbody tr').length,
                     document.querySelectorAll('#rules table').length,
                     document.getElementById('state').textContent === 'live',
                     status === null, rules === null];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(shown, json!([0, 0, false, true, true]));
    // Nothing written: the page's own write is refused.
    let written = client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             save('flow', [], null, -1).then(done);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(written, false);
    let (_, rules) = admin_call(admin, http::Method::GET, "/api/rules", "").await;
    assert_eq!(rules["flow"][0]["id"], "orders-qps", "nothing changed");
    let (_, status) = admin_call(admin, http::Method::GET, "/api/status", "").await;
    assert_eq!(status["audit"][0]["outcome"], "refused");
    // With the token, everything loads.
    let input = client.find(Locator::Css("#token-input")).await.unwrap();
    input.send_keys(TOKEN).await.unwrap();
    click(client, "#token-bar button").await;
    loaded(client).await;
    assert!(client
        .find(Locator::Css("#token-bar"))
        .await
        .unwrap()
        .attr("hidden")
        .await
        .unwrap()
        .is_some());
    browser.client.close().await.unwrap();
    server.kill().await.unwrap();
}

/// The demo, seen from the dashboard: its limits, warm-up, pacing and breaker told at a
/// glance. The screenshot is the README's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_tells_its_story() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut demo = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["demo", "--seconds", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = lines_of(demo.stdout.take().unwrap());
    let first = wait_for_line(&mut lines, "dashboard: ").await;
    let url = first
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap()
        .to_owned();
    tokio::spawn(async move { while lines.recv().await.is_some() {} });
    let browser = browser().await;
    let client = &browser.client;
    client.goto(&url).await.unwrap();
    for (what, story) in [
        ("a limit", "li.limit"),
        ("the warm-up", "li.warm_up"),
        ("the pacing", "li.pacing"),
        ("the breaker opening", "li.breaker"),
    ] {
        until(
            client,
            what,
            &format!("return document.querySelector('#events {story}');"),
        )
        .await;
    }
    // The breaker closes again once the upstream heals (from 7 s on).
    until(
        client,
        "the breaker closing",
        r#"return [...document.querySelectorAll('#events li.breaker')]
                  .some((li) => li.textContent.includes('closed on GET /api/flaky'));"#,
    )
    .await;
    click(client, r#"#resources tr[data-resource="GET /api/search"]"#).await;
    until(
        client,
        "the warm-up's charts",
        "return document.querySelectorAll('#detail svg.chart').length === 4;",
    )
    .await;
    // Nothing is wider than the window (a long rule or name wraps).
    let wide = client
        .execute(
            "return [...document.querySelectorAll('body *')]
                 .filter((n) => n.getBoundingClientRect().right > window.innerWidth)
                 .map((n) => `${n.tagName} ${n.id} ${n.className}`);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(wide, json!([]), "wider than the window");
    if std::env::var_os("SPILLWAY_UPDATE_SCREENSHOT").is_some() {
        // For the README: half a minute of history in the charts.
        until(
            client,
            "half a minute",
            "return status && status.uptime_seconds >= 30;",
        )
        .await;
    }
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    assert!(png.len() > 20_000, "{} bytes: a blank page?", png.len());
    if std::env::var_os("SPILLWAY_UPDATE_SCREENSHOT").is_some() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/dashboard.png");
        std::fs::write(path, &png).unwrap();
    }
    assert!(console_errors(client).await.is_empty(), "console errors");
    browser.client.close().await.unwrap();
    demo.kill().await.unwrap();
}
