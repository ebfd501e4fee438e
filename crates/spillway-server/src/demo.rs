//! `spillway demo`: an upstream with a fixed capacity, the proxy in front of it with example
//! rules, and a load generator that ramps past the capacity, with a live table.

use crate::config::{self, Config};
use crate::server::Server;
use crate::upstream::{Upstream, UpstreamShape};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::time::Duration;

/// The upstream's capacity: requests it works on at once, and how long each takes.
const WORKERS: usize = 4;
const WORK: Duration = Duration::from_millis(10);

/// The demo's configuration; `{upstream}` is replaced by the upstream's address.
pub const DEMO_CONFIG: &str = include_str!("demo.toml");

/// The demo's upstream: 4 workers x 10 ms a request (400 requests a second at most; more wait for
/// a worker), `/api/flaky` failing from its third second to its seventh.
pub const UPSTREAM: UpstreamShape = UpstreamShape {
    workers: WORKERS,
    work: WORK,
    flaky: true,
};

/// The demo's configuration for an upstream at `upstream`, listening on an ephemeral port.
///
/// # Errors
///
/// Never for the bundled file; a [`config::ConfigError`] if it were broken.
pub fn demo_config(upstream: SocketAddr) -> Result<Config, config::ConfigError> {
    let text = DEMO_CONFIG.replace("{upstream}", &upstream.to_string());
    config::parse(&text, "demo.toml")
}

/// Runs the demo for `seconds`, printing a table every second.
///
/// # Errors
///
/// If a listener cannot be bound.
pub async fn run(seconds: u64) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let upstream = Upstream::start(UPSTREAM).await?;
    let config = demo_config(upstream.addr())?;
    let spillway = spillway::Spillway::new();
    let server = Server::bind(&config, spillway.clone()).await?;
    let proxy = server.local_addr()?;
    let admin_listener = crate::admin::bind("127.0.0.1:0".parse()?).await?;
    let admin_addr = admin_listener.local_addr()?;
    let admin = crate::admin::Admin::new(server.proxy().clone(), None, None);
    tokio::spawn(admin.run(admin_listener, std::future::pending()));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stop_rx.await;
    }));

    println!("upstream: {WORKERS} workers x {WORK:?} a request (at most 400 req/s)");
    println!("proxy on {proxy}, dashboard on http://{admin_addr}/ (while the demo runs)");
    println!("rules from the bundled demo.toml:");
    println!("  GET /api/orders  QPS 150, reject beyond");
    println!("  GET /api/search  QPS 150, warming up from 50 over 5 s");
    println!("  GET /api/report  paced at 40/s, queueing up to 500 ms");
    println!("  GET /api/flaky   a breaker: opens at 50% errors, probes after 3 s");
    println!("                   (the upstream fails it from 3 s to 7 s)");
    println!("  every request    system rule: at most 40 in flight through the proxy");
    println!("load: each path's offered rate ramps from 50 to 300 req/s\n");

    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let paths = ["/api/orders", "/api/search", "/api/report", "/api/flaky"];
    let generators: Vec<_> = paths
        .iter()
        .map(|path| {
            let (client, uri) = (client.clone(), format!("http://{proxy}{path}"));
            tokio::spawn(async move { generate(client, uri, seconds).await })
        })
        .collect();

    let resources = [
        "GET /api/orders",
        "GET /api/search",
        "GET /api/report",
        "GET /api/flaky",
    ];
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    for second in 1..=seconds {
        tick.tick().await;
        println!(
            "{:>3}s  {:<16} {:>7} {:>7} {:>10} {:>6}",
            second, "resource", "pass/s", "block/s", "avg RT ms", "in fl."
        );
        for name in resources {
            // The second that just ended, as the minute window counted it.
            let resource = spillway.resource(name)?;
            let last = resource.last_second();
            println!(
                "      {:<16} {:>7} {:>7} {:>10.1} {:>6}",
                name.trim_start_matches("GET "),
                last.pass,
                last.block,
                last.avg_rt_micros() / 1_000.0,
                resource.node().concurrency()
            );
        }
    }
    for generator in generators {
        let _ = generator.await;
    }
    let _ = stop_tx.send(());
    serving.await??;
    Ok(())
}

/// Offers requests at a rate ramping from 50 to 300 a second over `seconds`, not waiting for
/// answers (each request runs on its own task).
async fn generate(
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    uri: String,
    seconds: u64,
) {
    let start = tokio::time::Instant::now();
    let total = Duration::from_secs(seconds);
    let mut next = start;
    while next.duration_since(start) < total {
        let progress = next.duration_since(start).as_secs_f64() / total.as_secs_f64();
        let rate = 50.0 + 250.0 * progress;
        next += Duration::from_secs_f64(1.0 / rate);
        tokio::time::sleep_until(next).await;
        let (client, uri) = (client.clone(), uri.clone());
        tokio::spawn(async move {
            let Ok(uri) = uri.parse::<http::Uri>() else {
                return;
            };
            if let Ok(response) = client.get(uri).await {
                let _ = response.into_body().collect().await;
            }
        });
    }
}
