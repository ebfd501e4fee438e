//! The streams of a worker's HTTP/2 connections to an upstream: past 100 open on each, a
//! request goes on a new connection, so that streams that never end (long polls, event
//! streams, downloads nobody reads) cannot make the others queue for a stream the upstream
//! does not give; and a connection past the first closes once it has carried no stream for
//! 90 s.

mod support;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use support::server::Harness;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The tests of this file run one at a time: the cap on upstream connections, which one of
/// them reads, counts the process's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Longest a wait on an event may take before the test fails (never reached when it passes).
const STEP: Duration = Duration::from_secs(60);

/// The streams the upstream takes at once on a connection (its SETTINGS say so), as many as
/// the proxy opens on one.
const UPSTREAM_STREAMS: u32 = 100;

/// What the upstream saw: connections opened and closed, and `/hang` requests.
#[derive(Debug, Default, Clone, PartialEq)]
struct Seen {
    opened: usize,
    closed: usize,
    hanging: usize,
}

/// An HTTP/2 (prior knowledge) upstream taking 100 streams at once on a connection: `/hang`
/// answers a head and a first chunk, and never ends; anything else answers `ok`.
async fn hanging_upstream() -> (SocketAddr, watch::Receiver<Seen>) {
    draining_upstream(Arc::new(tokio::sync::Notify::new())).await
}

/// [`hanging_upstream`], whose open connections each send a GOAWAY when `go_away` is told,
/// and then carry their streams under way to their ends.
async fn draining_upstream(
    go_away: Arc<tokio::sync::Notify>,
) -> (SocketAddr, watch::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen_tx, seen) = watch::channel(Seen::default());
    let seen_tx = Arc::new(seen_tx);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            seen_tx.send_modify(|seen| seen.opened += 1);
            let seen_tx = seen_tx.clone();
            let go_away = go_away.clone();
            tokio::spawn(async move {
                let counting = seen_tx.clone();
                let service = service_fn(move |request: Request<Incoming>| {
                    let seen_tx = counting.clone();
                    async move {
                        if request.uri().path() != "/hang" {
                            let small = BoxBody::new(Full::new(Bytes::from("ok")));
                            return Ok::<_, Infallible>(Response::new(small));
                        }
                        seen_tx.send_modify(|seen| seen.hanging += 1);
                        let first = Ok::<_, Infallible>(Frame::data(Bytes::from("first")));
                        let frames = futures_util::StreamExt::chain(
                            futures_util::stream::iter([first]),
                            futures_util::stream::pending(),
                        );
                        Ok(Response::new(BoxBody::new(StreamBody::new(frames))))
                    }
                });
                let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .max_concurrent_streams(UPSTREAM_STREAMS)
                    .clone();
                let serving = builder.serve_connection(TokioIo::new(stream), service);
                tokio::pin!(serving);
                tokio::select! {
                    _ = serving.as_mut() => {}
                    () = go_away.notified() => {
                        serving.as_mut().graceful_shutdown();
                        let _ = serving.await;
                    }
                }
                seen_tx.send_modify(|seen| seen.closed += 1);
            });
        }
    });
    (addr, seen)
}

/// The proxy, sending every request to `upstream` over HTTP/2 with prior knowledge.
async fn proxy(upstream: SocketAddr) -> Harness {
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \
         \"http://{upstream}\"\nprotocol = \"http2\"\n\n[default]\nupstream = \"app\"\n"
    );
    Harness::start(&text).await
}

/// A client that asks for `/hang` over HTTP/1.1 and waits.
async fn hanging_request(proxy: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream
        .write_all(b"GET /hang HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    stream
}

/// `count` clients that ask for `/hang` through `server`, once the upstream has every one.
async fn hanging_at_upstream(
    server: &Harness,
    seen: &mut watch::Receiver<Seen>,
    count: usize,
) -> Vec<TcpStream> {
    let mut hanging = Vec::new();
    for _ in 0..count {
        hanging.push(hanging_request(server.proxy).await);
    }
    let reached = seen.wait_for(|seen| seen.hanging == count);
    tokio::time::timeout(STEP, reached)
        .await
        .expect("every stream at the upstream")
        .unwrap();
    hanging
}

/// `/small` through the proxy, answered within [`STEP`].
async fn small(proxy: SocketAddr) {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let uri = format!("http://{proxy}/small").parse().unwrap();
    let answered = tokio::time::timeout(STEP, async {
        let response = client.get(uri).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    });
    let (status, body) = answered.await.expect("the small response");
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"ok"[..]));
}

// 110 streams that never end, on an upstream that takes 100 at once on a connection: all 110
// reach it, and a request beside them is answered. On one connection the last 10, and every
// request after them, waited for a stream until one of the 100 ended (a client's send timeout,
// 60 s, for a download nobody reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_never_end_leave_the_others_a_connection() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (upstream, mut seen) = hanging_upstream().await;
    let server = proxy(upstream).await;
    let hanging = hanging_at_upstream(&server, &mut seen, 110).await;
    small(server.proxy).await;
    assert_eq!(seen.borrow().opened, 2, "{:?}", *seen.borrow());
    drop(hanging);
}

// The second connection, made for the 101st stream, closes 90 s after its last stream ended;
// the first stays. Tokio's clock is paused: it moves on when nothing else can.
#[tokio::test(start_paused = true)]
async fn a_connection_past_the_first_closes_once_idle_for_90_seconds() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (upstream, mut seen) = hanging_upstream().await;
    let server = proxy(upstream).await;
    let hanging = hanging_at_upstream(&server, &mut seen, 101).await;
    assert_eq!(seen.borrow().opened, 2);
    // Every client leaves: their streams end.
    drop(hanging);
    let idle_from = tokio::time::Instant::now();
    let closed = seen.wait_for(|seen| seen.closed == 1);
    tokio::time::timeout(Duration::from_secs(600), closed)
        .await
        .expect("the second connection closed")
        .unwrap();
    let idle = idle_from.elapsed();
    assert!(
        idle >= Duration::from_secs(90),
        "closed after {idle:?} idle"
    );
    // The first is kept: the next request goes on it.
    small(server.proxy).await;
    assert_eq!(
        (seen.borrow().opened, seen.borrow().closed),
        (2, 1),
        "{:?}",
        *seen.borrow()
    );
}

/// The proxy's count of its upstream connections (`spillway_upstream_connections`).
fn upstream_connections(server: &Harness) -> f64 {
    let metrics = server.handle.render_metrics().unwrap();
    let line = metrics
        .lines()
        .find(|line| line.starts_with("spillway_upstream_connections "))
        .unwrap_or_else(|| panic!("no spillway_upstream_connections in\n{metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

// An upstream that sends a GOAWAY while a stream is under way (a rolling restart) keeps that
// connection open until the stream ends: it holds its place under the cap on upstream
// connections until then. The place went back with hyper's task for the connection, which ends
// at the GOAWAY: an attack had the upstream hold 40 connections while the proxy counted 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_upstream_drains_holds_its_place_until_its_last_stream_ends() {
    let _one = ONE_AT_A_TIME.lock().await;
    let go_away = Arc::new(tokio::sync::Notify::new());
    let (upstream, mut seen) = draining_upstream(go_away.clone()).await;
    let server = proxy(upstream).await;
    let hanging = hanging_request(server.proxy).await;
    let reached = seen.wait_for(|seen| seen.hanging == 1);
    tokio::time::timeout(STEP, reached).await.unwrap().unwrap();
    assert_eq!(upstream_connections(&server), 1.0, "{:?}", *seen.borrow());
    go_away.notify_waiters();
    // Once the proxy has the GOAWAY, a request finds the connection going away and opens
    // another.
    let another = async {
        while seen.borrow().opened < 2 {
            small(server.proxy).await;
        }
    };
    tokio::time::timeout(STEP, another)
        .await
        .expect("another connection");
    assert_eq!((seen.borrow().opened, seen.borrow().closed), (2, 0));
    assert_eq!(
        upstream_connections(&server),
        2.0,
        "the draining one counted"
    );
    // The stream ends with its client: the draining connection closes, and its place goes.
    drop(hanging);
    let closed = seen.wait_for(|seen| seen.closed == 1);
    tokio::time::timeout(STEP, closed).await.unwrap().unwrap();
    let freed = async {
        while upstream_connections(&server) != 1.0 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(STEP, freed)
        .await
        .expect("its place given back");
}
