//! A client's pace is not the upstream's latency: a call whose client sent its body slowly, or
//! read its response slowly, or timed its bytes against the upstream's work, gives the adaptive
//! limit no sample and the slow-call breaker no verdict. Found by an attack: ten clients
//! sending 1 byte every 100 ms took an AIMD limit from 50 to 5, and eight slow 12 MB downloads
//! took it from 50 to 19. On tokio's paused clock.

mod support;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use support::server::Served;
use support::Channel;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Bytes of `/download`'s body: more than loopback's socket buffers hold, so that a slow
/// reader holds the proxy back.
const DOWNLOAD: usize = 24 << 20;

/// An upstream: `/upload` reads the whole body, then works 20 ms; `/ignore-body` works 100 ms
/// and answers without reading the body; `/download` sends
/// [`DOWNLOAD`] bytes at once; `/slow-body` sends its head and a first byte at once, and its
/// last byte 1.5 s later.
async fn upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            // Each write at once: with Nagle's algorithm a small write waits for the last
            // one's acknowledgement, which the peer delays by up to 40 ms of real time, through
            // which the paused clock would run on.
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let service = service_fn(|request: Request<Incoming>| async move {
                    let (tx, rx) = mpsc::channel(4);
                    match request.uri().path() {
                        "/upload" => {
                            let body = request.into_body().collect().await;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            let length = body.map_or(0, |body| body.to_bytes().len());
                            tx.send(Bytes::from(format!("got {length}"))).await.unwrap();
                        }
                        "/ignore-body" => {
                            // Works 100 ms without reading the body.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            tx.send(Bytes::from("done")).await.unwrap();
                        }
                        "/download" => {
                            tokio::spawn(async move {
                                for _ in 0..DOWNLOAD / (64 << 10) {
                                    let chunk = Bytes::from(vec![b'x'; 64 << 10]);
                                    if tx.send(chunk).await.is_err() {
                                        return;
                                    }
                                }
                            });
                        }
                        _ => {
                            tokio::spawn(async move {
                                tx.send(Bytes::from("a")).await.unwrap();
                                tokio::time::sleep(Duration::from_millis(1_500)).await;
                                let _ = tx.send(Bytes::from("b")).await;
                            });
                        }
                    }
                    Ok::<_, Infallible>(Response::new(Channel(rx)))
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// The proxy in front of [`upstream`], with an AIMD limit whose timeout is 1 s (a sample
/// longer than that is a backoff) and a breaker that opens when half the calls of the last
/// minute took more than 500 ms.
async fn start() -> Served {
    let upstream = upstream().await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"r\"\npath = \"/\"\nupstream = \"app\"\n\n\
         [[adaptive]]\nid = \"pace\"\nresource = \"r\"\n\
         algorithm = {{ type = \"aimd\", initial_limit = 10, min_limit = 2, max_limit = 20, timeout = \"1s\" }}\n\n\
         [[breaker]]\nid = \"slow\"\nresource = \"r\"\nretry_timeout = \"60s\"\nmin_request_amount = 3\nstat_interval = \"60s\"\n\
         strategy = {{ type = \"slow_call_ratio\", max_rt = \"500ms\", slow_ratio_threshold = 0.5 }}\n"
    );
    Served::start(&text).await
}

/// A connection to `proxy` that sends each write at once (see [`upstream`]).
async fn connect(proxy: SocketAddr) -> tokio::net::TcpStream {
    let stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A client that sends each write at once (see [`upstream`]).
fn client(http2: bool) -> Client<HttpConnector, Empty<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .http2_only(http2)
        .build(connector)
}

/// A POST to `/upload` of 12 bytes, one every 100 ms (1.2 s in all); what the client reads.
async fn drip_upload(proxy: SocketAddr) -> String {
    let mut stream = connect(proxy).await;
    let head =
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nConnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        stream.write_all(b"x").await.unwrap();
    }
    let mut read = Vec::new();
    stream.read_to_end(&mut read).await.unwrap();
    String::from_utf8_lossy(&read).into_owned()
}

/// A GET of `/download` over HTTP/1.1, read 256 KiB every 100 ms (about 10 s in all); the
/// bytes read.
async fn slow_download(proxy: SocketAddr) -> usize {
    let mut stream = connect(proxy).await;
    let head = "GET /download HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut buffer = vec![0; 256 << 10];
    let mut read = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match stream.read(&mut buffer).await.unwrap() {
            0 => return read,
            n => read += n,
        }
    }
}

/// What the limit learned: the limit, why it last changed, the latest sample, the samples,
/// the calls in flight.
fn learned(served: &Served) -> (u32, String, Option<Duration>, u64, u32) {
    let state = served.spillway.adaptive_state("pace").unwrap();
    (
        state.limit,
        state.last_change.as_str().to_owned(),
        state.estimates.latest,
        state.samples,
        state.in_flight,
    )
}

/// Nothing learned: no sample, the limit where it started, no call in flight.
fn learned_nothing(served: &Served) {
    let (limit, change, _, samples, in_flight) = learned(served);
    assert_eq!(
        (limit, change.as_str(), samples, in_flight),
        (10, "initial", 0, 0)
    );
    assert!(!breaker_open(served));
}

/// The count of calls the limit took as paced by their clients, from `/metrics`.
fn paced_in_metrics(served: &Served) -> String {
    let metrics = served.handle.render_metrics().unwrap();
    let line = metrics
        .lines()
        .find(|line| line.starts_with("spillway_adaptive_paced_total{"));
    let line = line.unwrap_or_else(|| panic!("no paced count in\n{metrics}"));
    assert!(line.contains(r#"rule="pace""#), "{line}");
    line.rsplit(' ').next().unwrap().to_owned()
}

fn breaker_open(served: &Served) -> bool {
    served.spillway.breaker_state("slow") != Some(spillway::breaker::BreakerState::Closed)
}

#[tokio::test(start_paused = true)]
async fn a_slow_upload_is_not_the_upstream_s_latency() {
    let served = start().await;
    let uploads: Vec<_> = (0..4)
        .map(|_| tokio::spawn(drip_upload(served.proxy)))
        .collect();
    for upload in uploads {
        let read = upload.await.unwrap();
        assert!(
            read.starts_with("HTTP/1.1 200") && read.contains("got 12"),
            "{read}"
        );
    }
    // 1.2 s each, past AIMD's 1 s timeout and the breaker's 500 ms: paced by their clients.
    learned_nothing(&served);
    assert_eq!(paced_in_metrics(&served), "4");
    served.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_reader_is_not_the_upstream_s_latency_on_either_protocol() {
    let served = start().await;
    let downloads: Vec<_> = (0..3)
        .map(|_| tokio::spawn(slow_download(served.proxy)))
        .collect();
    // And over HTTP/2, where a task of the proxy's sends the body on.
    let client = client(true);
    let request = Request::get(format!("http://{}/download", served.proxy))
        .body(Empty::new())
        .unwrap();
    let mut body = client.request(request).await.unwrap().into_body();
    let mut read = 0;
    while let Some(frame) = body.frame().await {
        read += frame.unwrap().into_data().map_or(0, |data| data.len());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(read, DOWNLOAD);
    for download in downloads {
        assert!(download.await.unwrap() > DOWNLOAD);
    }
    learned_nothing(&served);
    assert_eq!(paced_in_metrics(&served), "4");
    served.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_upstream_slow_to_send_its_body_is_slow_to_the_limit_and_the_breaker() {
    let served = start().await;
    let client = client(false);
    for _ in 0..3 {
        let request = Request::get(format!("http://{}/slow-body", served.proxy))
            .body(Empty::new())
            .unwrap();
        let response = client.request(request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "ab");
    }
    let (limit, change, latest, _, _) = learned(&served);
    assert_eq!((limit, change.as_str()), (7, "dropped"), "three backoffs");
    assert!(latest.unwrap() >= Duration::from_millis(1_500));
    assert!(breaker_open(&served));
    served.shutdown().await;
}

/// A POST to `/ignore-body` of one byte, sent after `after`; what the client reads.
async fn timed_byte(proxy: SocketAddr, after: Duration) -> String {
    let mut stream = connect(proxy).await;
    let head =
        "POST /ignore-body HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(after).await;
    stream.write_all(b"x").await.unwrap();
    let mut read = Vec::new();
    stream.read_to_end(&mut read).await.unwrap();
    String::from_utf8_lossy(&read).into_owned()
}

#[tokio::test(start_paused = true)]
async fn a_client_that_times_its_body_against_the_upstream_s_work_makes_it_look_no_faster() {
    let served = start().await;
    // The upstream works 100 ms without reading; the client's byte comes at 99 ms. Counted
    // as the client's time, the wait would have made a 1 ms sample, dragging the limit's
    // baseline down for every honest call (found by a review).
    for _ in 0..3 {
        let read = timed_byte(served.proxy, Duration::from_millis(99)).await;
        assert!(read.starts_with("HTTP/1.1 200"), "{read}");
    }
    learned_nothing(&served);
    // A client that sends its byte at once: a sample of the upstream's 100 ms.
    let read = timed_byte(served.proxy, Duration::ZERO).await;
    assert!(read.starts_with("HTTP/1.1 200"), "{read}");
    let (_, _, latest, samples, _) = learned(&served);
    assert_eq!((samples, latest), (1, Some(Duration::from_millis(100))));
    served.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_websocket_session_s_length_is_no_latency() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let upstream = support::websocket_echo().await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"r\"\npath = \"/\"\nupstream = \"app\"\n\n\
         [[adaptive]]\nid = \"pace\"\nresource = \"r\"\n\
         algorithm = {{ type = \"aimd\", initial_limit = 10, min_limit = 2, max_limit = 20, timeout = \"1s\" }}\n"
    );
    let served = Served::start(&text).await;
    let stream = connect(served.proxy).await;
    let (mut socket, _) =
        tokio_tungstenite::client_async(format!("ws://{}/chat", served.proxy), stream)
            .await
            .unwrap();
    // A session of 10 s: one message every second.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        socket.send(Message::text("hello")).await.unwrap();
        assert_eq!(
            socket.next().await.unwrap().unwrap(),
            Message::text("hello")
        );
    }
    socket.close(None).await.unwrap();
    drop(socket);
    let state = || served.spillway.adaptive_state("pace").unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        while state().in_flight != 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the tunnel gave its place back");
    // Before, the session was one 10 s sample, past the 1 s timeout: a backoff.
    assert_eq!((state().samples, state().limit), (0, 10));
    served.shutdown().await;
}
