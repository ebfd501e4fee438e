//! An HTTP/2 client that resets its streams as soon as they are forwarded cannot send the
//! upstream more than the limits allow: every forwarded request runs on, holding its places,
//! and a connection with many running on is asked to go away. Found by an attack: one
//! connection sending 10 requests and resetting them every 30 ms had the upstream work on 204
//! at once under a concurrency limit of 10, and on 990 under an adaptive limit of 20. On
//! tokio's paused clock.

mod support;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::server::Served;
use tokio::sync::Notify;

/// What the upstream saw: requests at work now, the most at once, and all it got.
#[derive(Default)]
struct Seen {
    now: AtomicUsize,
    most: AtomicUsize,
    all: AtomicUsize,
}

/// An upstream that holds every request until `release`, counting them; it does not notice
/// a request the proxy cancels (most upstreams do not).
async fn holding_upstream(seen: Arc<Seen>, release: Arc<Notify>) -> SocketAddr {
    support::upstream(move |_request: Request<Incoming>| {
        let (seen, release) = (Arc::clone(&seen), Arc::clone(&release));
        async move {
            let now = seen.now.fetch_add(1, Ordering::SeqCst) + 1;
            seen.most.fetch_max(now, Ordering::SeqCst);
            seen.all.fetch_add(1, Ordering::SeqCst);
            release.notified().await;
            seen.now.fetch_sub(1, Ordering::SeqCst);
            Response::new(Full::new(Bytes::from("done")))
        }
    })
    .await
}

fn h2_client() -> Client<HttpConnector, Empty<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(connector)
}

/// Waits (on the paused clock, which runs on while nothing happens) until `done` says so.
async fn until(what: &str, done: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(600), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"));
}

#[tokio::test(start_paused = true)]
async fn streams_reset_once_forwarded_never_send_the_upstream_past_the_limit() {
    let (seen, release) = (Arc::new(Seen::default()), Arc::new(Notify::new()));
    let upstream = holding_upstream(Arc::clone(&seen), Arc::clone(&release)).await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"slow\"\npath = \"/\"\nupstream = \"app\"\n\n\
         [[flow]]\nid = \"ten\"\nresource = \"slow\"\ngrade = \"concurrency\"\ncount = 10\n"
    );
    let served = Served::start(&text).await;
    let client = h2_client();
    let uri = format!("http://{}/slow", served.proxy);
    let send = || {
        let request = Request::get(&uri).body(Empty::new()).unwrap();
        client.request(request)
    };
    // Ten rounds on one client: ten requests sent at once, reset (dropped) as soon as the
    // upstream has them, or as soon as they are refused.
    for round in 0..10 {
        let mut calls: Vec<_> = (0..10).map(|_| tokio::spawn(send())).collect();
        let before = seen.all.load(Ordering::SeqCst);
        // Each is forwarded, or refused (its answer comes back); then all are reset.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let mut refused = 0;
        for call in calls.drain(..) {
            if call.is_finished() {
                match call.await.unwrap() {
                    // Refused by the limit, or by a connection asked to go away.
                    Ok(response) => {
                        let status = response.status();
                        assert!(
                            [
                                StatusCode::TOO_MANY_REQUESTS,
                                StatusCode::SERVICE_UNAVAILABLE
                            ]
                            .contains(&status),
                            "{status}"
                        );
                        refused += 1;
                    }
                    // A connection asked to go away refuses what it did not take.
                    Err(err) => assert!(err.to_string().contains("connection"), "{err}"),
                }
            } else {
                call.abort();
            }
        }
        let forwarded = seen.all.load(Ordering::SeqCst) - before;
        assert!(forwarded + refused <= 10, "round {round}");
        assert!(
            seen.most.load(Ordering::SeqCst) <= 10,
            "round {round}: the upstream had {} at once under a limit of 10",
            seen.most.load(Ordering::SeqCst)
        );
    }
    assert_eq!(seen.all.load(Ordering::SeqCst), 10, "the limit held them");
    // Released: the requests that ran on end, and their places come back.
    while seen.now.load(Ordering::SeqCst) > 0 {
        release.notify_waiters();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let resource = served.spillway.resource("slow").unwrap();
    until("places back", || resource.stats().concurrency == 0).await;
    // A new request goes through (the client opens a new connection if it must).
    let call = tokio::spawn(send());
    until("forwarded", || seen.now.load(Ordering::SeqCst) == 1).await;
    release.notify_waiters();
    assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK);
    served.shutdown().await;
}

/// An HTTP/2 frame: its 9-byte head and `payload`.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut bytes = vec![length[1], length[2], length[3], kind, flags];
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// A GET of `/slow` on `stream`, its head whole and its end: HPACK's static `:method GET` and
/// `:scheme http`, and `:path` and `:authority` as literals of indexed names.
fn get_slow(stream: u32) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x04, 5];
    block.extend_from_slice(b"/slow");
    block.extend_from_slice(&[0x01, 1, b'x']);
    frame(0x1, 0x1 | 0x4, stream, &block)
}

/// A client that does not heed the GOAWAY: it never answers the proxy's PING (so that the
/// GOAWAY stays the first, graceful one), and goes on sending requests. Those are refused:
/// none reaches the upstream, each is answered, and the connection is cut after the header
/// timeout.
#[tokio::test(start_paused = true)]
async fn a_client_that_ignores_the_go_away_gets_nothing_more_forwarded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (seen, release) = (Arc::new(Seen::default()), Arc::new(Notify::new()));
    let upstream = holding_upstream(Arc::clone(&seen), Arc::clone(&release)).await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\nheader_timeout = \"5s\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"slow\"\npath = \"/\"\nupstream = \"app\"\n"
    );
    let served = Served::start(&text).await;
    let stream = tokio::net::TcpStream::connect(served.proxy).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut read, mut write) = stream.into_split();
    // What the proxy sends: each frame's type and stream, until it closes.
    let (frames_tx, mut frames) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut head = [0u8; 9];
        while read.read_exact(&mut head).await.is_ok() {
            let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0; length];
            if read.read_exact(&mut payload).await.is_err() {
                break;
            }
            let _ = frames_tx.send((head[3], stream));
        }
    });
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(0x4, 0, 0, &[]));
    write.write_all(&hello).await.unwrap();
    // Eight requests forwarded, then reset: each runs on, and the eighth has the connection
    // asked to go away.
    for n in 0..8 {
        write.write_all(&get_slow(1 + 2 * n)).await.unwrap();
    }
    until("eight forwarded", || seen.all.load(Ordering::SeqCst) == 8).await;
    for n in 0..8 {
        let cancel = 0x8u32.to_be_bytes();
        write
            .write_all(&frame(0x3, 0, 1 + 2 * n, &cancel))
            .await
            .unwrap();
    }
    let go_away = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some((kind, _)) = frames.recv().await {
            if kind == 0x7 {
                return;
            }
        }
    });
    go_away.await.expect("a GOAWAY");
    // Five more, on a connection that was asked to go away: each answered, none forwarded.
    for n in 8..13 {
        write.write_all(&get_slow(1 + 2 * n)).await.unwrap();
    }
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        let mut answered = std::collections::BTreeSet::new();
        while answered.len() < 5 {
            match frames.recv().await {
                Some((0x1, stream)) if stream >= 17 => {
                    answered.insert(stream);
                }
                Some(_) => {}
                None => break,
            }
        }
        answered.len()
    });
    assert_eq!(answered.await.expect("answered"), 5);
    assert_eq!(seen.all.load(Ordering::SeqCst), 8, "nothing more forwarded");
    // It never answers the PING: the proxy cuts the connection after the header timeout.
    tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("closed by the proxy")
        .unwrap();
    let metrics = served.handle.render_metrics().unwrap();
    let line = r#"spillway_go_aways_total{listener="proxy"} 1"#;
    assert!(metrics.contains(line), "{line} not in\n{metrics}");
    // The eight that ran on end when the upstream answers.
    while seen.now.load(Ordering::SeqCst) > 0 {
        release.notify_waiters();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    served.shutdown().await;
}
