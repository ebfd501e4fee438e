//! The proxy on worker threads of its own (`Server::run_on_workers`, what `spillway serve`
//! runs): every connection served, one cap on connections for all workers, a drain that ends
//! the requests in flight while refusing new connections, and a stop that cuts them.
//!
//! The workers have runtimes of their own, on the real clock: these tests wait on events (a
//! request reaching the upstream, a response, a refused connection), each under a timeout.

mod support;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spillway_server::checked::parse;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use support::server::Served;
use tokio::sync::{mpsc, Notify};
use tokio::time::timeout;

/// Long enough for a loaded machine; a test that waits this long has failed.
const PATIENCE: Duration = Duration::from_secs(20);

/// An upstream: `/hold` says it arrived on `arrived`, then waits for `release`; anything else
/// answers "ok".
async fn upstream(release: Arc<Notify>, arrived: mpsc::UnboundedSender<()>) -> SocketAddr {
    support::upstream(move |request: Request<Incoming>| {
        let (release, arrived) = (release.clone(), arrived.clone());
        async move {
            if request.uri().path() == "/hold" {
                // Waiting for `release` from before it says it arrived: a release sent once
                // the test knows it arrived is never missed.
                let released = release.notified();
                let _ = arrived.send(());
                released.await;
                return Response::new(Full::new(Bytes::from_static(b"released")));
            }
            Response::new(Full::new(Bytes::from_static(b"ok")))
        }
    })
    .await
}

struct Harness {
    proxy: SocketAddr,
    /// The proxy's handle, for its metrics.
    handle: spillway_server::Proxy,
    release: Arc<Notify>,
    arrived: mpsc::UnboundedReceiver<()>,
    served: Served,
}

/// The proxy on `workers` threads in front of [`upstream`], with more `[listener]` fields.
async fn start(workers: usize, listener: &str) -> Harness {
    let release = Arc::new(Notify::new());
    let (arrived_tx, arrived) = mpsc::unbounded_channel();
    let upstream = upstream(release.clone(), arrived_tx).await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n{listener}\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n[default]\nresource = \"all\"\nupstream = \"app\"\n"
    );
    let config = parse(&text, "test.toml").unwrap();
    let workers = NonZeroUsize::new(workers);
    let served = Served::with(&config, spillway::Spillway::new(), workers).await;
    Harness {
        proxy: served.proxy,
        handle: served.handle.clone(),
        release,
        arrived,
        served,
    }
}

fn client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// GET `path` on a connection of its own; the status and body.
async fn get(proxy: SocketAddr, path: &str) -> Result<(StatusCode, String), String> {
    let response = timeout(
        PATIENCE,
        client().get(format!("http://{proxy}{path}").parse().unwrap()),
    )
    .await
    .map_err(|_| "no answer in time".to_owned())?
    .map_err(|err| err.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok((
        status,
        String::from_utf8_lossy(&body.to_bytes()).into_owned(),
    ))
}

/// Waits until connecting to `proxy` is refused: every worker closed its clone of the socket.
/// (A connection that races the close may be accepted or reset; a later one is refused.)
async fn until_refused(proxy: SocketAddr) {
    timeout(PATIENCE, async {
        loop {
            match tokio::net::TcpStream::connect(proxy).await {
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => return,
                _ => tokio::task::yield_now().await,
            }
        }
    })
    .await
    .expect("the socket closes");
}

/// An HTTP/1.1 connection of its own to `proxy`, kept open, that has been answered once.
async fn open_connection(
    proxy: SocketAddr,
) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = timeout(PATIENCE, tokio::net::TcpStream::connect(proxy))
        .await
        .expect("connects in time")
        .unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = Request::get("/x")
        .header(http::header::HOST, proxy.to_string())
        .body(Empty::new())
        .unwrap();
    let response = timeout(PATIENCE, sender.send_request(request))
        .await
        .expect("answered in time")
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body().collect().await.unwrap();
    sender
}

impl Harness {
    /// Each worker's open connections, from the metrics.
    fn worker_connections(&self) -> Vec<u64> {
        let text = self.handle.render_metrics().unwrap();
        (0..)
            .map_while(|worker| {
                let series = format!("spillway_worker_connections{{worker=\"{worker}\"}} ");
                let line = text.lines().find(|line| line.starts_with(&series))?;
                line[series.len()..]
                    .parse::<f64>()
                    .ok()
                    .map(|open| open as u64)
            })
            .collect()
    }

    /// Sends GET /hold and waits until it reached the upstream: a request in flight.
    async fn hold(&mut self) -> tokio::task::JoinHandle<Result<(StatusCode, String), String>> {
        let proxy = self.proxy;
        let held = tokio::spawn(async move { get(proxy, "/hold").await });
        timeout(PATIENCE, self.arrived.recv())
            .await
            .expect("the held request reaches the upstream")
            .unwrap();
        held
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_at_once_are_all_served() {
    let h = start(2, "").await;
    let mut clients = Vec::new();
    for _ in 0..32 {
        let proxy = h.proxy;
        clients.push(tokio::spawn(async move {
            // One connection each (a client of its own), ten requests on it.
            let client = client();
            for _ in 0..10 {
                let uri = format!("http://{proxy}/x").parse().unwrap();
                let response = timeout(PATIENCE, client.get(uri)).await.unwrap().unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                let body = response.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(&body[..], b"ok");
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cap_counts_the_connections_of_every_worker() {
    // Two workers, two places: a worker with a cap of its own would take a third.
    let mut h = start(2, "max_connections = 2\nat_capacity = \"close\"").await;
    let first = h.hold().await;
    let second = h.hold().await;
    for _ in 0..4 {
        // Closed at once, whichever worker accepts it.
        let refused = get(h.proxy, "/x").await;
        assert!(refused.is_err(), "past the cap: {refused:?}");
    }
    h.release.notify_waiters();
    for held in [first, second] {
        assert_eq!(
            held.await.unwrap().unwrap(),
            (StatusCode::OK, "released".to_owned())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_ends_the_requests_in_flight_and_refuses_new_connections() {
    let mut h = start(2, "").await;
    let held = h.hold().await;
    h.served.stop();
    // Every worker closes its clone of the socket: connecting is refused, not left waiting.
    until_refused(h.proxy).await;
    assert!(!h.served.is_finished(), "a request is still in flight");
    h.release.notify_waiters();
    assert_eq!(
        held.await.unwrap().unwrap(),
        (StatusCode::OK, "released".to_owned())
    );
    timeout(PATIENCE, h.served.finished())
        .await
        .expect("the drain ends with its last request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_server_stops_the_workers_and_cuts_requests_in_flight() {
    let mut h = start(2, "").await;
    let held = h.hold().await;
    h.served.abort();
    let cut = held.await.unwrap();
    assert!(cut.is_err(), "the request in flight is cut: {cut:?}");
    until_refused(h.proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_spread_evenly_over_the_workers() {
    let h = start(2, "").await;
    // One after another, as a client fills its pool: the worker awake to accept each one is
    // not the one with the fewest connections every time.
    let mut open = Vec::new();
    for _ in 0..8 {
        open.push(open_connection(h.proxy).await);
    }
    assert_eq!(h.worker_connections(), [4, 4]);
    // Requests on them are still answered, on the worker each was handed to.
    for sender in &mut open {
        let request = Request::get("/x")
            .header(http::header::HOST, h.proxy.to_string())
            .body(Empty::new())
            .unwrap();
        let response = timeout(PATIENCE, sender.send_request(request))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    // Closed, they no longer count.
    drop(open);
    timeout(PATIENCE, async {
        while h.worker_connections() != [0, 0] {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("closed connections leave their worker's load");
}
