//! An HTTP/2 client that resets its streams as soon as they are forwarded (or an HTTP/1.1 one
//! that closes its connection), whether their bodies have ended or not, cannot send the
//! upstream more than the limits allow: every forwarded request runs on, holding its places
//! (one whose body was still coming waits out the body timeout, as a stalled body does), and
//! a connection with many running on is asked to go away. Found by an attack: one
//! connection sending 10 requests and resetting them every 30 ms had the upstream work on 204
//! at once under a concurrency limit of 10, and on 990 under an adaptive limit of 20. On
//! tokio's paused clock.

mod support;

use support::h2_frames::{cancel, frame, get_slow, hello, post_slow, raw_h2};

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
    write.write_all(&hello()).await.unwrap();
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

/// The proxy in front of a holding upstream, `/slow` under a concurrency limit of 10, with a
/// body timeout of 5 s.
async fn limited(upstream: SocketAddr) -> Served {
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\nbody_timeout = \"5s\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"slow\"\npath = \"/\"\nupstream = \"app\"\n\n\
         [[flow]]\nid = \"ten\"\nresource = \"slow\"\ngrade = \"concurrency\"\ncount = 10\n"
    );
    Served::start(&text).await
}

/// Requests whose client leaves with their body still coming, against an upstream that works
/// before it reads its body: each holds its places until the body timeout, so that the
/// upstream never has more than the limit. Found by an attack: cancelled at once, they freed
/// their places while the upstream went on, 2,630 at once under a limit of 10 over HTTP/2 and
/// 400 over HTTP/1.1.
#[tokio::test(start_paused = true)]
async fn clients_that_leave_mid_body_never_send_the_upstream_past_the_limit() {
    use tokio::io::AsyncWriteExt;
    let (seen, release) = (Arc::new(Seen::default()), Arc::new(Notify::new()));
    let upstream = holding_upstream(Arc::clone(&seen), Arc::clone(&release)).await;
    let served = limited(upstream).await;
    let resource = served.spillway.resource("slow").unwrap();
    // HTTP/1.1: thirty POSTs that announce 1,000 bytes, send 10 and close their connection.
    for _ in 0..30 {
        let mut stream = tokio::net::TcpStream::connect(served.proxy).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let head = "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789";
        stream.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(stream);
    }
    // HTTP/2: three rounds of ten POSTs with no length, a first DATA frame each, then reset.
    let mut write = raw_h2(served.proxy).await;
    let mut next = 1;
    for _ in 0..3 {
        let streams: Vec<u32> = (0..10).map(|n| next + 2 * n).collect();
        next += 20;
        for &id in &streams {
            let mut bytes = post_slow(id);
            bytes.extend(frame(0x0, 0, id, b"0123456789"));
            write.write_all(&bytes).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        for &id in &streams {
            write.write_all(&cancel(id)).await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        seen.all.load(Ordering::SeqCst) >= 10,
        "the limit was reached"
    );
    assert!(
        seen.most.load(Ordering::SeqCst) <= 10,
        "the upstream had {} at once under a limit of 10",
        seen.most.load(Ordering::SeqCst)
    );
    assert_eq!(resource.stats().concurrency, 10, "their places are held");
    // The body timeout passes with the upstream still at work (this one never notices the
    // bodies failed): their places come back then, and a new request goes through.
    until("places back", || resource.stats().concurrency == 0).await;
    assert!(seen.most.load(Ordering::SeqCst) <= 10);
    let before = seen.all.load(Ordering::SeqCst);
    let uri = format!("http://{}/slow", served.proxy);
    let call = tokio::spawn(h2_client().request(Request::get(&uri).body(Empty::new()).unwrap()));
    until("forwarded", || seen.all.load(Ordering::SeqCst) > before).await;
    while !call.is_finished() {
        release.notify_waiters();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK);
    served.shutdown().await;
}

/// A burst of streams reset at once on a route with no limit runs on no further than its
/// client's places: found by an attack, 80 connections of 256 such streams each from one
/// address ran on 19,559 requests past `max_connections`, 800 MB and every upstream
/// descriptor.
#[tokio::test(start_paused = true)]
async fn a_burst_of_resets_runs_on_no_further_than_the_client_s_places() {
    use tokio::io::AsyncWriteExt;
    let (seen, release) = (Arc::new(Seen::default()), Arc::new(Notify::new()));
    let upstream = holding_upstream(Arc::clone(&seen), Arc::clone(&release)).await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\nmax_connections = 64\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"slow\"\npath = \"/\"\nupstream = \"app\"\n"
    );
    let served = Served::start(&text).await;
    let mut write = raw_h2(served.proxy).await;
    let streams: Vec<u32> = (0..100).map(|n| 1 + 2 * n).collect();
    let mut burst = Vec::new();
    for &id in &streams {
        burst.extend(get_slow(id));
    }
    write.write_all(&burst).await.unwrap();
    until("all forwarded", || seen.all.load(Ordering::SeqCst) == 100).await;
    let mut resets = Vec::new();
    for &id in &streams {
        resets.extend(cancel(id));
    }
    write.write_all(&resets).await.unwrap();
    drop(write);
    let running_on = || {
        let metrics = served.handle.render_metrics().unwrap();
        let line = metrics
            .lines()
            .find(|line| line.starts_with(r#"spillway_running_on{listener="proxy"}"#))
            .unwrap()
            .to_owned();
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
    };
    until("the client left", || {
        let metrics = served.handle.render_metrics().unwrap();
        metrics.contains(r#"spillway_clients_left_total{listener="proxy"} 100"#)
    })
    .await;
    // `max_connections_per_client` is half of 64: 32 places, and a run-on may take the one
    // its connection held.
    let now = running_on();
    assert!((1.0..=33.0).contains(&now), "{now} running on");
    // Released, those that ran on end (the cancelled ones' upstream requests were dropped).
    until("none running on", || {
        release.notify_waiters();
        running_on() == 0.0
    })
    .await;
    served.shutdown().await;
}

/// Set when the upstream's response body is dropped: its stream (or connection) was closed by
/// the proxy.
struct DroppedFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DroppedFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An upstream whose every response is a head and a first chunk, then nothing for good (an
/// event stream with rare events), setting `dropped` when the proxy lets go of it.
async fn silent_stream_upstream(dropped: Arc<std::sync::atomic::AtomicBool>) -> SocketAddr {
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let dropped = Arc::clone(&dropped);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_: Request<Incoming>| {
                    let guard = DroppedFlag(Arc::clone(&dropped));
                    async move {
                        let first =
                            futures_util::stream::iter([Ok::<_, std::convert::Infallible>(
                                Frame::data(Bytes::from("first")),
                            )]);
                        let silent = futures_util::StreamExt::map(
                            futures_util::stream::pending::<
                                Result<Frame<Bytes>, std::convert::Infallible>,
                            >(),
                            move |frame| {
                                let _held = &guard;
                                frame
                            },
                        );
                        let frames = futures_util::StreamExt::chain(first, silent);
                        Ok::<_, std::convert::Infallible>(Response::new(StreamBody::new(frames)))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

// A client that resets a stream whose response the upstream has stopped sending (after its
// head and first bytes) frees it at once: its places, and the upstream's request. The proxy's
// task that sent the response on waited for the upstream's next bytes for good, and an attack
// pinned 1,000 streams (and every place of a route's `executes`) that way with one connection,
// then, past 100 streams on each, every upstream connection the proxy could open.
#[tokio::test(start_paused = true)]
async fn a_stream_reset_while_its_upstream_sends_nothing_is_given_up_at_once() {
    use tokio::io::AsyncWriteExt;
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let upstream = silent_stream_upstream(Arc::clone(&dropped)).await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"events\"\npath = \"/\"\nupstream = \"app\"\n"
    );
    let served = Served::start(&text).await;
    let events = served.spillway.resource("events").unwrap();
    let mut write = raw_h2(served.proxy).await;
    write.write_all(&get_slow(1)).await.unwrap();
    // Forwarded and answered: its entry is held while its response runs.
    until("the response under way", || events.stats().concurrency == 1).await;
    // Its first bytes sent on, and the proxy waiting for more.
    tokio::time::sleep(Duration::from_millis(100)).await;
    write.write_all(&cancel(1)).await.unwrap();
    until("its places given back", || events.stats().concurrency == 0).await;
    until("the upstream's request let go", || {
        dropped.load(Ordering::SeqCst)
    })
    .await;
    served.shutdown().await;
}
