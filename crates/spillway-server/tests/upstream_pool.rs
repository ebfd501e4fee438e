//! The proxy's connections to an upstream, seen from the upstream: reused one request after
//! another, one HTTP/2 connection for a burst, a new one when the upstream closed an idle one,
//! and idle ones closed after the idle timeout. Waits are on events, with a timeout; time is
//! tokio's, paused.

mod support;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::server::Harness;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest any one wait may take before the test fails (never reached when it passes).
const STEP: Duration = Duration::from_secs(600);

/// The connections an upstream saw: opened, and closed by the proxy.
#[derive(Default)]
struct Seen {
    opened: AtomicUsize,
    closed: AtomicUsize,
    /// Told each time the proxy closes one.
    closing: tokio::sync::Notify,
}

impl Seen {
    fn opened(&self) -> usize {
        self.opened.load(Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Counts a connection the proxy closed.
    fn close(&self) {
        self.closed.fetch_add(1, Ordering::SeqCst);
        self.closing.notify_waiters();
    }

    /// Returns once the proxy has closed `count` connections.
    async fn until_closed(&self, count: usize) {
        let waited = tokio::time::timeout(STEP, async {
            loop {
                // Registered before the count is read, so that no close is missed between.
                let closing = self.closing.notified();
                if self.closed() >= count {
                    return;
                }
                closing.await;
            }
        });
        waited.await.unwrap_or_else(|_| {
            panic!(
                "the proxy closed {} connections, not {count}",
                self.closed()
            )
        });
    }
}

/// An upstream answering `ok`, over HTTP/1.1 or (`http2`) HTTP/2 with prior knowledge.
async fn upstream(http2: bool) -> (SocketAddr, Arc<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let counting = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counting.opened.fetch_add(1, Ordering::SeqCst);
            let counting = counting.clone();
            tokio::spawn(async move {
                let service = service_fn(|_: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok"))))
                });
                let io = TokioIo::new(stream);
                let _ = if http2 {
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await
                } else {
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await
                };
                counting.close();
            });
        }
    });
    (addr, seen)
}

/// An upstream that answers one request per connection, keeping it alive by the protocol,
/// then closes its side at once (as one whose keep-alive timeout is shorter than the proxy's
/// would), and counts the connection closed when the proxy closes its side too.
async fn closing_upstream() -> (SocketAddr, Arc<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let counting = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counting.opened.fetch_add(1, Ordering::SeqCst);
            let counting = counting.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if stream.write_all(answer).await.is_err() || stream.shutdown().await.is_err() {
                    return;
                }
                // Until the proxy closes its side.
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                counting.close();
            });
        }
    });
    (addr, seen)
}

struct Proxy {
    addr: SocketAddr,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    _server: Harness,
}

/// The proxy, sending every request to `upstream` over `protocol`.
async fn proxy(upstream: SocketAddr, protocol: &str) -> Proxy {
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\nprotocol = \"{protocol}\"\n\n[default]\nupstream = \"app\"\n"
    );
    let server = Harness::start(&text).await;
    Proxy {
        addr: server.proxy,
        client: Client::builder(TokioExecutor::new()).build_http(),
        _server: server,
    }
}

impl Proxy {
    async fn get(&self) -> (StatusCode, String) {
        let uri = format!("http://{}/x", self.addr).parse().unwrap();
        let answered = tokio::time::timeout(STEP, async {
            let response = self.client.get(uri).await.unwrap();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        });
        answered.await.expect("the proxy answers")
    }
}

#[tokio::test(start_paused = true)]
async fn requests_one_after_another_share_one_upstream_connection() {
    let (upstream, seen) = upstream(false).await;
    let proxy = proxy(upstream, "http1").await;
    for _ in 0..5 {
        assert_eq!(proxy.get().await, (StatusCode::OK, "ok".to_owned()));
    }
    assert_eq!((seen.opened(), seen.closed()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_burst_over_http2_shares_one_upstream_connection() {
    let (upstream, seen) = upstream(true).await;
    let proxy = Arc::new(proxy(upstream, "http2").await);
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let proxy = proxy.clone();
        burst.spawn(async move { proxy.get().await });
    }
    while let Some(answer) = burst.join_next().await {
        assert_eq!(answer.unwrap(), (StatusCode::OK, "ok".to_owned()));
    }
    assert_eq!(seen.opened(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_connection_the_upstream_closed_while_idle_is_not_used_again() {
    let (upstream, seen) = closing_upstream().await;
    let proxy = proxy(upstream, "auto").await;
    assert_eq!(proxy.get().await, (StatusCode::OK, "ok".to_owned()));
    // The proxy saw the upstream's side close, and closed its own.
    seen.until_closed(1).await;
    assert_eq!(proxy.get().await, (StatusCode::OK, "ok".to_owned()));
    assert_eq!(seen.opened(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_idle_upstream_connection_is_kept_90_seconds_then_closed() {
    let (upstream, seen) = upstream(false).await;
    let proxy = proxy(upstream, "auto").await;
    assert_eq!(proxy.get().await, (StatusCode::OK, "ok".to_owned()));
    tokio::time::sleep(Duration::from_secs(80)).await;
    // Still open after 80 s idle: reused.
    assert_eq!(proxy.get().await, (StatusCode::OK, "ok".to_owned()));
    assert_eq!((seen.opened(), seen.closed()), (1, 0));
    let idle_from = tokio::time::Instant::now();
    seen.until_closed(1).await;
    let idle = idle_from.elapsed();
    assert!(
        (Duration::from_secs(90)..=Duration::from_secs(121)).contains(&idle),
        "closed after {idle:?} idle"
    );
    // And the next request opens another.
    assert_eq!(proxy.get().await, (StatusCode::OK, "ok".to_owned()));
    assert_eq!(seen.opened(), 2);
}
