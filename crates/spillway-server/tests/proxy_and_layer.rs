//! The binary and the tower layer decide alike: the same rules (loaded from one file), the same
//! requests at the same moments of one `ManualClock`, through `spillway serve` (in this process,
//! on loopback) and through `SpillwayLayer` over a service answering `ok`, give the same
//! statuses, the same refusal headers and bodies, and the same statistics.

mod support;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spillway::ManualClock;
use spillway_server::{checked, Proxy};
use std::convert::Infallible;
use support::server::Served;
use tower::ServiceExt;

/// What a client sees of an answer: status, the refusal headers and the body.
#[derive(Debug, PartialEq)]
struct Seen {
    status: StatusCode,
    headers: Vec<(&'static str, Option<String>)>,
    body: String,
}

/// The headers a refusal carries that a client acts on.
const HEADERS: [&str; 4] = [
    "retry-after",
    "ratelimit-policy",
    "ratelimit",
    "content-type",
];

async fn seen<B>(response: http::Response<B>) -> Seen
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let status = response.status();
    let headers = HEADERS
        .iter()
        .map(|name| {
            let value = response.headers().get(*name);
            (*name, value.map(|v| v.to_str().unwrap().to_owned()))
        })
        .collect();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Seen {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_and_the_layer_decide_alike() {
    let upstream = support::upstream(|_| async {
        http::Response::builder()
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from("ok")))
            .unwrap()
    })
    .await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"orders\"\npath = \"/orders\"\nupstream = \"app\"\n\n\
         [[flow]]\nid = \"orders-qps\"\nresource = \"orders\"\ncount = 4\n\n\
         [[keyed]]\nid = \"per-user\"\nresource = \"orders\"\nkey = \"header:x-user\"\ncount = 2\n"
    );
    let config = checked::parse(&text, "test.toml").unwrap();
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);

    // The binary, on the clock.
    let served = spillway::Spillway::new_with_clock(clock.clone());
    let server = Served::with(&config, served.clone(), None).await;
    let addr = server.proxy;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();

    // The layer, on the same clock, with the same rules loaded as the binary loads them.
    let layered = spillway::Spillway::new_with_clock(clock.clone());
    let loader = Proxy::new(&config, layered.clone()).unwrap();
    spillway_server::apply_rules(&loader, &config).unwrap();
    // A proxy made without `Server::bind` has every kind's metrics all the same.
    let metrics = loader.render_metrics().unwrap();
    for kind in ["flow", "system", "breaker", "adaptive", "cluster", "keyed"] {
        assert!(
            metrics.contains(&format!("spillway_rules{{kind=\"{kind}\"}}")),
            "{kind}"
        );
    }
    assert!(
        metrics.contains("spillway_rules{kind=\"keyed\"} 1"),
        "{metrics}"
    );
    let layer = spillway_tower::SpillwayLayer::new(layered.clone())
        .fixed_resource("orders")
        .key_header(0, "x-user");
    let service =
        tower::ServiceBuilder::new()
            .layer(layer)
            .service_fn(|_: Request<Empty<Bytes>>| async {
                let response = http::Response::builder()
                    .header("content-type", "text/plain")
                    .body(Full::new(Bytes::from("ok")))
                    .unwrap();
                Ok::<_, Infallible>(response)
            });

    // Users and pauses: alice past her per-key limit, then everyone past the QPS limit, then
    // a new second.
    let steps: [(&str, u64); 9] = [
        ("alice", 0),
        ("alice", 10),
        ("alice", 10),
        ("bob", 10),
        ("carol", 10),
        ("dave", 10),
        ("erin", 10),
        ("alice", 1_000),
        ("bob", 10),
    ];
    let mut statuses = Vec::new();
    for (n, (user, pause)) in steps.into_iter().enumerate() {
        clock.advance_millis(pause);
        let request = || {
            Request::get(format!("http://{addr}/orders"))
                .header("x-user", user)
                .body(Empty::<Bytes>::new())
                .unwrap()
        };
        let through_binary = seen(client.request(request()).await.unwrap()).await;
        let through_layer = seen(service.clone().oneshot(request()).await.unwrap()).await;
        assert_eq!(through_binary, through_layer, "request {n} ({user})");
        statuses.push(through_binary.status.as_u16());
    }
    // The steps did reach both kinds of refusal, and passes after them.
    assert_eq!(statuses, [200, 200, 429, 200, 200, 429, 429, 200, 200]);

    let (a, b) = (
        served.resource("orders").unwrap().stats(),
        layered.resource("orders").unwrap().stats(),
    );
    assert_eq!(
        (a.total_pass, a.total_block, a.total_success, a.concurrency),
        (b.total_pass, b.total_block, b.total_success, b.concurrency)
    );
    assert_eq!(a.total_pass, 6);
    assert_eq!(
        served.flow_rule_stats("orders-qps"),
        layered.flow_rule_stats("orders-qps")
    );
    assert_eq!(
        served.keyed_stats("per-user"),
        layered.keyed_stats("per-user")
    );
}
