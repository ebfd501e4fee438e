//! spillway in front of a plain hyper service, with a cap on open connections (Dubbo's
//! `accepts`) from [`LimitedListener`].
//!
//! `cargo run -p spillway-tower --example hyper` serves on an ephemeral port, sends requests
//! at it and prints what came back.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use spillway::flow::FlowRule;
use spillway_tower::{AtCapacity, LimitedListener, SpillwayLayer};
use std::convert::Infallible;
use tower::{service_fn, ServiceBuilder};

#[path = "support/mod.rs"]
mod support;

async fn handle(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from(format!(
        "you asked for {}\n",
        request.uri().path()
    )))))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let spillway = spillway::Spillway::new();
    spillway.load_flow_rules(vec![FlowRule::qps("api-qps", "api", 3.0)])?;
    let service = ServiceBuilder::new()
        .layer(SpillwayLayer::new(spillway.clone()).fixed_resource("api"))
        .service(service_fn(handle));

    // At most 64 connections open; past that, accepting pauses until one closes.
    let listener = LimitedListener::new(tokio::net::TcpListener::bind("127.0.0.1:0").await?, 64)
        .at_capacity(AtCapacity::Pause);
    let addr = listener.local_addr()?;
    let connections = listener.limit();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _peer)) = listener.accept().await else {
                continue;
            };
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(err) = connection.await {
                    eprintln!("connection error: {err}");
                }
            });
        }
    });

    println!("5 calls (3 per second allowed):");
    for i in 0..5 {
        println!("  {}", support::get(addr, &format!("/item/{i}")).await?);
    }
    let state = connections.state();
    println!(
        "connections: {} open, {} refused",
        state.open, state.refused
    );
    Ok(())
}
