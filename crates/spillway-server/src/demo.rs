//! `spillway demo`: an upstream with a fixed capacity, the proxy in front of it with example
//! rules, and a load generator that ramps past the capacity, with a live table.

use crate::config::{self, Config};
use crate::server::Server;
use crate::upstream::{Upstream, UpstreamShape};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spillway_lab::ServiceTime;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
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
    service: ServiceTime::Fixed { time: WORK },
    seed: 0,
    flaky: true,
};

/// The demo's configuration for an upstream at `upstream`, listening on an ephemeral port.
///
/// # Errors
///
/// Never for the bundled file; a [`config::ConfigError`] if it were broken.
pub fn demo_config(upstream: SocketAddr) -> Result<Config, config::ConfigError> {
    let text = DEMO_CONFIG.replace("{upstream}", &upstream.to_string());
    crate::checked::parse(&text, "demo.toml")
}

/// Writes a line to stdout, or returns the error (a reader that went away ends the demo).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the demo for `seconds`, printing a table every second. A reader that goes away
/// (`spillway demo | head`) ends it early, and is not an error.
///
/// # Errors
///
/// If a listener cannot be bound, or stdout fails otherwise.
pub async fn run(seconds: u64) -> Result<(), BoxError> {
    match show(seconds).await {
        Err(err)
            if err
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        result => result,
    }
}

/// [`run`], up to the first failed write.
async fn show(seconds: u64) -> Result<(), BoxError> {
    let upstream = Upstream::start(UPSTREAM).await?;
    let config = demo_config(upstream.addr())?;
    // On Unix time, as Sentinel's windows are: the access log's times and a replay of it cut
    // the same windows.
    let spillway = spillway::Spillway::new_with_clock(spillway::SystemClock::unix());
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

    say!("dashboard: http://{admin_addr}/ (open it while the demo runs)");
    say!(
        "upstream: {WORKERS} workers x {WORK:?} a request (400 req/s at most; about 350 measured, \
         as tokio's timer rounds each sleep up)"
    );
    say!("proxy on {proxy}");
    say!("rules from the bundled demo.toml:");
    say!("  GET /api/orders  QPS 150, reject beyond");
    say!("  GET /api/search  QPS 150, warming up from 50 over 5 s");
    say!("  GET /api/report  paced at 40/s, queueing up to 50 ms");
    say!("  GET /api/flaky   a breaker: opens at 50% errors, probes after 3 s");
    say!("                   (the upstream fails it from 3 s to 7 s)");
    say!("  every request    adaptive rule: Envoy's gradient controller, no capacity number");
    say!("                   (as the overload lab recommends when the capacity is unknown),");
    say!("                   starting open: up to 50 in flight while it measures the upstream");
    say!("load: each path's offered rate ramps from 50 to 300 req/s\n");

    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let paths = ["/api/orders", "/api/search", "/api/report", "/api/flaky"];
    let latencies: Vec<Arc<Latencies>> = paths.iter().map(|_| Arc::default()).collect();
    let generators: Vec<_> = paths
        .iter()
        .zip(&latencies)
        .map(|(path, latencies)| {
            let (client, uri) = (client.clone(), format!("http://{proxy}{path}"));
            let latencies = latencies.clone();
            tokio::spawn(async move { generate(client, uri, seconds, latencies).await })
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
        say!(
            "{:>3}s  {:<16} {:>7} {:>7} {:>10} {:>8} {:>6}",
            second,
            "resource",
            "pass/s",
            "block/s",
            "avg RT ms",
            "p99 ms",
            "in fl."
        );
        for (name, latencies) in resources.iter().zip(&latencies) {
            // The second that just ended, as the minute window counted it.
            let resource = spillway.resource(name)?;
            let last = resource.last_second();
            let p99 = latencies.take_p99().map_or("-".to_string(), |p99| {
                format!("{:.1}", p99.as_secs_f64() * 1e3)
            });
            say!(
                "      {:<16} {:>7} {:>7} {:>10.1} {:>8} {:>6}",
                name.trim_start_matches("GET "),
                last.pass,
                last.block,
                last.avg_rt_micros() / 1_000.0,
                p99,
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

/// The latencies of one path's admitted requests (any answer but a 429) since the table last
/// read them, measured from each request's planned send time.
#[derive(Debug, Default)]
struct Latencies(Mutex<Vec<Duration>>);

impl Latencies {
    fn record(&self, latency: Duration) {
        if let Ok(mut all) = self.0.lock() {
            all.push(latency);
        }
    }

    /// The p99 of the latencies recorded since the last call (nearest rank), and forgets them.
    fn take_p99(&self) -> Option<Duration> {
        let mut all = std::mem::take(&mut *self.0.lock().ok()?);
        all.sort_unstable();
        let rank = (all.len() as f64 * 0.99).ceil() as usize;
        all.get(rank.checked_sub(1)?).copied()
    }
}

/// Offers requests at a rate ramping from 50 to 300 a second over `seconds`, not waiting for
/// answers (each request runs on its own task).
async fn generate(
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    uri: String,
    seconds: u64,
    latencies: Arc<Latencies>,
) {
    let start = tokio::time::Instant::now();
    let total = Duration::from_secs(seconds);
    let mut next = start;
    while next.duration_since(start) < total {
        let progress = next.duration_since(start).as_secs_f64() / total.as_secs_f64();
        let rate = 50.0 + 250.0 * progress;
        next += Duration::from_secs_f64(1.0 / rate);
        tokio::time::sleep_until(next).await;
        let (client, uri, latencies) = (client.clone(), uri.clone(), latencies.clone());
        let planned = next;
        tokio::spawn(async move {
            let Ok(uri) = uri.parse::<http::Uri>() else {
                return;
            };
            if let Ok(response) = client.get(uri).await {
                let refused = response.status() == http::StatusCode::TOO_MANY_REQUESTS;
                let _ = response.into_body().collect().await;
                if !refused {
                    latencies.record(planned.elapsed());
                }
            }
        });
    }
}
