//! spillway in front of an axum router: a QPS limit, a paced endpoint, a breaker on a flaky
//! route and system protection, with one layer.
//!
//! `cargo run -p spillway-tower --example axum --features axum` serves on an ephemeral port,
//! sends a burst of requests at it and prints what came back; add `-- --serve` to keep serving
//! on 127.0.0.1:3000 instead.

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use spillway::breaker::{BreakerRule, BreakerStrategy};
use spillway::flow::{Behavior, FlowRule};
use spillway::system::{CpuStrategy, SystemRule};
use spillway_tower::SpillwayLayer;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[path = "support/mod.rs"]
mod support;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let spillway = spillway::Spillway::new();
    spillway.load_flow_rules(vec![
        FlowRule::qps("hello-qps", "GET /hello", 5.0),
        FlowRule::qps("export-pace", "GET /export", 10.0)
            .with_behavior(Behavior::throttle(Duration::from_secs(2))),
    ])?;
    spillway.load_breaker_rules(vec![BreakerRule::new(
        "flaky-errors",
        "GET /flaky",
        BreakerStrategy::ErrorRatio { threshold: 0.5 },
        Duration::from_secs(5),
    )])?;
    spillway.load_system_rules(vec![SystemRule::new("service")
        .with_highest_cpu_usage(0.9)
        .with_cpu_strategy(CpuStrategy::Bbr)])?;

    let calls = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route("/hello", get(|| async { "hello\n" }))
        .route("/export", get(|| async { "exported\n" }))
        .route(
            "/flaky",
            get(move || {
                let calls = calls.clone();
                async move {
                    // Fails every other call.
                    if calls.fetch_add(1, Ordering::Relaxed) % 2 == 0 {
                        StatusCode::BAD_GATEWAY
                    } else {
                        StatusCode::OK
                    }
                }
            }),
        )
        .layer(
            SpillwayLayer::new(spillway.clone())
                .by_route()
                .origin_header("x-caller"),
        );

    let serve = std::env::args().any(|arg| arg == "--serve");
    let bind = if serve {
        "127.0.0.1:3000"
    } else {
        "127.0.0.1:0"
    };
    let listener = tokio::net::TcpListener::bind(bind).await?;
    let addr = listener.local_addr()?;
    if serve {
        println!("serving on http://{addr} (try /hello, /export, /flaky)");
        axum::serve(listener, app).await?;
        return Ok(());
    }
    tokio::spawn(async move { axum::serve(listener, app).await });

    println!("8 calls to /hello (5 per second allowed):");
    for _ in 0..8 {
        println!("  {}", support::get(addr, "/hello").await?);
    }
    println!("3 calls to /export at once (paced 100 ms apart):");
    let started = tokio::time::Instant::now();
    let exports: Vec<_> = (0..3)
        .map(|_| {
            tokio::spawn(async move {
                let answer = support::get(addr, "/export").await;
                (answer, started.elapsed())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for export in exports {
        let (answer, after) = export.await?;
        answers.push((after, answer?));
    }
    answers.sort();
    for (after, answer) in answers {
        println!("  {answer} after {} ms", after.as_millis());
    }
    println!("8 calls to /flaky (the breaker opens at 50% errors):");
    for _ in 0..8 {
        println!("  {}", support::get(addr, "/flaky").await?);
    }
    let hello = spillway.resource("GET /hello")?.stats();
    println!(
        "GET /hello: {} passed, {} blocked in the last minute",
        hello.total_pass, hello.total_block
    );
    Ok(())
}
