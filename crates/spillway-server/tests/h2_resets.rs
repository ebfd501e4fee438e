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
                    Ok(response) => {
                        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
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
