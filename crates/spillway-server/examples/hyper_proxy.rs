//! The floor of a proxy built on spillway's stack, for load tests: hyper's HTTP/1.1 server and
//! pooled client, one single-threaded tokio runtime per worker thread sharing the listening
//! socket (as spillway's workers do), mimalloc, `TCP_NODELAY` both ways, and nothing else: no
//! rules, no statistics, no timeouts, no header rewriting, no HTTP/2. `bench/load` runs it
//! beside nginx and spillway, to tell what the stack costs from what spillway adds to it.
//!
//! `cargo run --release -p spillway-server --example hyper_proxy -- LISTEN UPSTREAM [/PREFIX=UPSTREAM]... [--workers N]`
//!
//! Requests whose path starts with a `/PREFIX` go to its upstream, the others to `UPSTREAM`:
//!
//! `cargo run --release -p spillway-server --example hyper_proxy -- 127.0.0.1:18085 127.0.0.1:18081 /split=127.0.0.1:18083`

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::error::Error;
use std::sync::Arc;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Where requests go: the upstream of the first prefix the path starts with, or the default.
#[derive(Debug)]
struct Routes {
    prefixed: Vec<(String, String)>,
    default: String,
}

impl Routes {
    fn upstream(&self, path: &str) -> &str {
        self.prefixed
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
            .map_or(&self.default, |(_, upstream)| upstream)
    }
}

type Body = Either<Incoming, Empty<Bytes>>;

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: hyper_proxy LISTEN UPSTREAM [/PREFIX=UPSTREAM]... [--workers N]";
    let listen = args.next().ok_or(usage)?;
    let default = args.next().ok_or(usage)?;
    let mut prefixed = Vec::new();
    let mut workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    while let Some(arg) = args.next() {
        if arg == "--workers" {
            workers = args.next().ok_or(usage)?.parse()?;
        } else {
            let (prefix, upstream) = arg.split_once('=').ok_or(usage)?;
            prefixed.push((prefix.to_owned(), upstream.to_owned()));
        }
    }
    let routes = Arc::new(Routes { prefixed, default });
    let listener = std::net::TcpListener::bind(&listen)?;
    listener.set_nonblocking(true)?;
    let threads = (0..workers.max(1))
        .map(|_| {
            let (listener, routes) = (listener.try_clone()?, routes.clone());
            Ok(std::thread::spawn(move || work(listener, routes)))
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    for thread in threads {
        thread.join().map_err(|_| "a worker panicked")??;
    }
    Ok(())
}

/// One worker: its runtime, its pool of upstream connections, and the connections it accepts.
fn work(listener: std::net::TcpListener, routes: Arc<Routes>) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<HttpConnector, Incoming> =
            Client::builder(TokioExecutor::new()).build(connector);
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(err) => {
                    eprintln!("accept: {err}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            stream.set_nodelay(true)?;
            let (client, routes) = (client.clone(), routes.clone());
            tokio::spawn(async move {
                let service =
                    service_fn(move |request| forward(request, client.clone(), routes.clone()));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

/// Sends `request` to its upstream and answers with the upstream's response, or 502.
async fn forward(
    mut request: Request<Incoming>,
    client: Client<HttpConnector, Incoming>,
    routes: Arc<Routes>,
) -> Result<Response<Body>, Infallible> {
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str());
    let uri = format!("http://{}{path}", routes.upstream(path)).parse::<Uri>();
    let Ok(uri) = uri else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    *request.uri_mut() = uri;
    Ok(match client.request(request).await {
        Ok(response) => response.map(Either::Left),
        Err(_) => status(StatusCode::BAD_GATEWAY),
    })
}

fn status(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Either::Right(Empty::new()));
    *response.status_mut() = status;
    response
}
