//! A half-open breaker's probe through the proxy is decided by its response head: a stream of
//! events that lasts past `probe_timeout` closes the breaker when its head comes. Before, such
//! a probe always outlasted its lease and counted as failed, so a breaker on a streaming route
//! reopened after every probe. On tokio's paused clock.

mod support;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use support::server::Served;
use support::Channel;
use tokio::sync::{mpsc, watch};

/// An upstream: `/fail` answers 500; `/events` sends its head and a first event at once, and
/// ends when `ended` is set; anything else answers `ok`.
async fn upstream(ended: watch::Receiver<bool>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            // Each write at once: no Nagle's delay, through which the paused clock runs on.
            stream.set_nodelay(true).unwrap();
            let ended = ended.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let mut ended = ended.clone();
                    async move {
                        let (tx, rx) = mpsc::channel(4);
                        let mut status = StatusCode::OK;
                        match request.uri().path() {
                            "/fail" => status = StatusCode::INTERNAL_SERVER_ERROR,
                            "/events" => {
                                tokio::spawn(async move {
                                    tx.send(Bytes::from("data: 1\n\n")).await.unwrap();
                                    let _ = ended.wait_for(|ended| *ended).await;
                                });
                            }
                            _ => tx.send(Bytes::from("ok")).await.unwrap(),
                        }
                        let mut response = Response::new(Channel(rx));
                        *response.status_mut() = status;
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_outlasts_the_probe_timeout_closes_the_breaker_when_its_head_comes() {
    let (end, ended) = watch::channel(false);
    let upstream = upstream(ended).await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"r\"\npath = \"/\"\nupstream = \"app\"\n\n\
         [[breaker]]\nid = \"errors\"\nresource = \"r\"\nretry_timeout = \"10s\"\n\
         min_request_amount = 1\nstrategy = {{ type = \"error_count\", threshold = 0 }}\n"
    );
    let served = Served::start(&text).await;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let get = |path: &str| {
        let request = Request::get(format!("http://{}{path}", served.proxy));
        client.request(request.body(Empty::new()).unwrap())
    };
    let state = || served.spillway.breaker_state("errors").unwrap();
    use spillway::breaker::BreakerState::{Closed, Open};
    let failed = get("/fail").await.unwrap();
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(failed.into_body().collect().await.is_ok());
    assert_eq!(state(), Open);
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The probe: a stream of events, well from its head on.
    let events = get("/events").await.unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    assert_eq!(state(), Closed);
    let mut events = events.into_body();
    let first = events.frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "data: 1\n\n");
    // A minute of it, six times the probe timeout: the others pass all along.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let other = get("/ok").await.unwrap();
        assert_eq!(other.status(), StatusCode::OK, "{:?}", state());
        assert!(other.into_body().collect().await.is_ok());
    }
    end.send_replace(true);
    assert!(events.collect().await.is_ok());
    assert_eq!(state(), Closed);
    served.shutdown().await;
}
