//! An HTTP/2 upstream connection, shared by a worker's requests, against clients that stop
//! reading their downloads: each such stream holds its own flow-control window (64 KiB), not
//! the connection's (256 of them), so that the other responses on the connection go on. Real time: the waits are on events, each with a timeout.

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
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::server::Harness;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

/// Longest a wait on an event may take before the test fails (never reached when it passes).
const STEP: Duration = Duration::from_secs(60);

/// Downloads whose clients stop reading: with hyper's default windows (2 MiB a stream, 5 MiB
/// the connection), three filled the connection's window.
const STALLED: usize = 8;

/// A chunk of a download.
const CHUNK: usize = 16 * 1024;

/// The proxy's configuration, sending every request to `upstream` over HTTP/2 with prior
/// knowledge, with a send timeout far beyond any wait of the tests.
fn config(upstream: SocketAddr) -> String {
    format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\nsend_timeout = \"300s\"\n\n[[upstream]]\nname = \
         \"app\"\nurl = \"http://{upstream}\"\nprotocol = \"http2\"\n\n[default]\nupstream = \
         \"app\"\n"
    )
}

/// The chunks each `/big` download has produced, in the order they were asked for.
type Produced = watch::Receiver<Vec<usize>>;

/// An HTTP/2 (prior knowledge) upstream: `/big` answers an endless body, a chunk whenever the
/// stream has room for one, and `/small` answers `ok`.
async fn downloading_upstream() -> (SocketAddr, Produced) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (produced_tx, produced) = watch::channel(Vec::new());
    let produced_tx = Arc::new(produced_tx);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let produced_tx = produced_tx.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let produced_tx = produced_tx.clone();
                    async move {
                        if request.uri().path() != "/big" {
                            let small = BoxBody::new(Full::new(Bytes::from("ok")));
                            return Ok::<_, Infallible>(Response::new(small));
                        }
                        let mut index = 0;
                        produced_tx.send_modify(|counts| {
                            index = counts.len();
                            counts.push(0);
                        });
                        let chunk = Bytes::from(vec![b'x'; CHUNK]);
                        let frames = futures_util::stream::repeat_with(move || {
                            produced_tx.send_modify(|counts| counts[index] += 1);
                            Ok::<_, Infallible>(Frame::data(chunk.clone()))
                        });
                        Ok(Response::new(BoxBody::new(StreamBody::new(frames))))
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, produced)
}

/// A client that asks for `/big` and never reads a byte of it, with a small receive buffer
/// so that its kernel takes little of the download.
async fn stalled_download(proxy: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(proxy).await.unwrap();
    stream
        .write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    stream
}

// An attack had 6 to 8 clients hold unread 20 MB downloads from an HTTP/2 upstream: every other
// request to it waited 3 to 5 s (20 s at worst), and an unrelated slow-call breaker opened.
// With the send timeout far off, a small response must come while the downloads stall, each
// having filled more than its stream's window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_nobody_reads_leave_the_shared_http2_connection_to_the_others() {
    let (upstream, mut produced) = downloading_upstream().await;
    let server = Harness::start(&config(upstream)).await;
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(stalled_download(server.proxy).await);
    }
    // Past its 64 KiB window on each: the proxy reads each on, until its client's buffers
    // are full.
    let past_windows = produced.wait_for(|counts| {
        counts.len() == STALLED && counts.iter().all(|&chunks| chunks * CHUNK > 128 * 1024)
    });
    tokio::time::timeout(STEP, past_windows)
        .await
        .expect("each download past its window")
        .unwrap();

    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    for _ in 0..3 {
        let uri = format!("http://{}/small", server.proxy).parse().unwrap();
        let small = async {
            let response = client.get(uri).await.unwrap();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, body)
        };
        let answered = tokio::time::timeout(STEP, small).await;
        let (status, body) = answered.expect("the small response, while the downloads stall");
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"ok"[..]));
    }
    drop(stalled);
}

/// What an upstream read of the proxy's HTTP/2 connection before any answer: the value of
/// each SETTINGS parameter, and the increments of the connection's window.
#[derive(Debug, Default, Clone)]
struct Opening {
    settings: Vec<(u16, u32)>,
    connection_window_increments: Vec<u32>,
}

/// An upstream that reads the proxy's connection preface and its frames, and answers nothing.
async fn silent_h2_upstream() -> (SocketAddr, watch::Receiver<Opening>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen_tx, seen) = watch::channel(Opening::default());
    let seen_tx = Arc::new(Mutex::new(Some(seen_tx)));
    tokio::spawn(async move {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let seen_tx = seen_tx.lock().unwrap().take().unwrap();
        let mut preface = [0u8; 24];
        stream.read_exact(&mut preface).await.unwrap();
        assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        loop {
            let mut head = [0u8; 9];
            if stream.read_exact(&mut head).await.is_err() {
                return;
            }
            let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let stream_id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & !(1 << 31);
            let mut payload = vec![0u8; length];
            if stream.read_exact(&mut payload).await.is_err() {
                return;
            }
            match kind {
                // SETTINGS, not an ACK: six bytes a parameter.
                0x4 if flags & 0x1 == 0 => seen_tx.send_modify(|seen| {
                    for parameter in payload.chunks_exact(6) {
                        let id = u16::from_be_bytes([parameter[0], parameter[1]]);
                        let value = u32::from_be_bytes([
                            parameter[2],
                            parameter[3],
                            parameter[4],
                            parameter[5],
                        ]);
                        seen.settings.push((id, value));
                    }
                }),
                // WINDOW_UPDATE of the connection.
                0x8 if stream_id == 0 => seen_tx.send_modify(|seen| {
                    let increment =
                        u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                    seen.connection_window_increments
                        .push(increment & !(1 << 31));
                }),
                _ => {}
            }
        }
    });
    (addr, seen)
}

// What the proxy tells an HTTP/2 upstream as it opens a connection: 64 KiB a stream
// (SETTINGS_INITIAL_WINDOW_SIZE, 0x4), and a connection window raised from HTTP/2's initial
// 65,535 bytes to 256 streams' windows, 16 MiB. hyper's defaults were 2 MiB and 5 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_gives_an_http2_upstream_small_stream_windows_and_a_connection_window_of_256() {
    let (upstream, mut seen) = silent_h2_upstream().await;
    let server = Harness::start(&config(upstream)).await;
    // Its answer never comes; the request only makes the proxy connect.
    let proxy = server.proxy;
    let request = tokio::spawn(async move {
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let uri = format!("http://{proxy}/x").parse().unwrap();
        let _ = client.get(uri).await;
    });
    let opened = seen.wait_for(|seen| {
        !seen.settings.is_empty() && !seen.connection_window_increments.is_empty()
    });
    let opening = tokio::time::timeout(STEP, opened)
        .await
        .expect("the proxy's SETTINGS and window update")
        .unwrap()
        .clone();
    let stream_window = opening.settings.iter().find(|(id, _)| *id == 0x4);
    assert_eq!(stream_window, Some(&(0x4, 64 * 1024)), "{opening:?}");
    let raised: u64 = opening
        .connection_window_increments
        .iter()
        .map(|&increment| u64::from(increment))
        .sum();
    assert_eq!(65_535 + raised, 256 * 64 * 1024, "{opening:?}");
    request.abort();
}
