//! The proxy's refusals carry the rate-limit fields `[blocked] ratelimit_fields` asks for: by
//! default `RateLimit-Policy` and `RateLimit`, parsed here as the RFC 9651 Structured Field
//! Lists draft-ietf-httpapi-ratelimit-headers-10 makes them, for a QPS, a concurrency and a
//! per-key refusal; `"legacy"` the older `X-RateLimit-*` fields; `"none"` only `Retry-After`;
//! and with `ratelimit_on_admitted`, admitted responses carry what is left of each quota.

mod support;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use support::server::Served;
use tokio::sync::Notify;

/// A member of a field's List: the policy's name and its parameters.
struct Member {
    name: String,
    params: sfv::Parameters,
}

impl Member {
    fn integer(&self, key: &str) -> Option<i64> {
        let value = self.params.get(key)?;
        Some(i64::from(value.as_integer().expect("an Integer")))
    }

    fn string(&self, key: &str) -> Option<String> {
        let value = self.params.get(key)?;
        Some(value.as_string().expect("a String").as_str().to_owned())
    }
}

/// The field `name` as a one-member List of an Item named by a String.
fn member(headers: &HeaderMap, name: &str) -> Member {
    let mut members = members(headers, name);
    assert_eq!(members.len(), 1, "{name}: one policy");
    members.remove(0)
}

/// The field `name` as a List of Items named by Strings.
fn members(headers: &HeaderMap, name: &str) -> Vec<Member> {
    let value = headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {headers:?}"));
    let list: sfv::List = sfv::Parser::new(value.as_bytes())
        .parse()
        .unwrap_or_else(|err| panic!("{name}: {value:?} is not a Structured List: {err}"));
    list.into_iter()
        .map(|entry| match entry {
            sfv::ListEntry::Item(item) => Member {
                name: item
                    .bare_item
                    .as_string()
                    .expect("a policy's name is a String")
                    .as_str()
                    .to_owned(),
                params: item.params,
            },
            sfv::ListEntry::InnerList(_) => panic!("{name}: not an Item"),
        })
        .collect()
}

struct Proxy {
    served: Served,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    release: Arc<Notify>,
}

impl Proxy {
    /// The proxy in front of an upstream whose `/hold` waits for `release`, with `rules`.
    async fn start(rules: &str) -> Proxy {
        let release = Arc::new(Notify::new());
        let upstream = support::upstream({
            let release = release.clone();
            move |request: Request<Incoming>| {
                let release = release.clone();
                async move {
                    if request.uri().path() == "/hold" {
                        release.notified().await;
                    }
                    Response::new(Full::new(Bytes::from("ok")))
                }
            }
        })
        .await;
        let text = format!(
            "[listener]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n[[route]]\nresource = \"search\"\npath = \"/search\"\nupstream = \"app\"\n\n[[route]]\nresource = \"hold\"\npath = \"/hold\"\nupstream = \"app\"\n\n{rules}"
        );
        Proxy {
            served: Served::start(&text).await,
            client: Client::builder(TokioExecutor::new()).build_http(),
            release,
        }
    }

    async fn get(&self, path: &str, user: &str) -> (StatusCode, HeaderMap) {
        let request = Request::get(format!("http://{}{path}", self.served.proxy))
            .header("x-user", user)
            .body(Empty::new())
            .unwrap();
        let response = self.client.request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let _ = body.collect().await;
        (parts.status, parts.headers)
    }

    /// Sends `/hold` and returns once it is in flight; the task ends with its status.
    async fn hold(&self) -> tokio::task::JoinHandle<StatusCode> {
        let uri = format!("http://{}/hold", self.served.proxy);
        let client = self.client.clone();
        let held =
            tokio::spawn(async move { client.get(uri.parse().unwrap()).await.unwrap().status() });
        let resource = self.served.spillway.resource("hold").unwrap();
        while resource.stats().concurrency == 0 {
            tokio::task::yield_now().await;
        }
        held
    }
}

const RULES: &str = r#"
[[flow]]
id = "search-qps"
resource = "search"
count = 2

[[flow]]
id = "one-hold"
resource = "hold"
grade = "concurrency"
count = 1

[[keyed]]
id = "per-user"
resource = "search"
key = "header:x-user"
count = 1
"#;

/// Checks a refusal of requests per second by `rule`, with quota `q`.
fn assert_qps_refusal(headers: &HeaderMap, rule: &str, q: i64) {
    let policy = member(headers, "ratelimit-policy");
    let state = member(headers, "ratelimit");
    assert_eq!((policy.name.as_str(), state.name.as_str()), (rule, rule));
    assert_eq!(policy.integer("q"), Some(q));
    assert_eq!(policy.integer("w"), Some(1));
    assert_eq!(policy.string("qu"), None, "requests are the default unit");
    assert_eq!(state.integer("r"), Some(0));
    let retry: i64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert_eq!(state.integer("t"), Some(retry), "t is Retry-After's");
}

#[tokio::test(start_paused = true)]
async fn each_refusal_s_fields_are_structured_field_lists() {
    let proxy = Proxy::start(RULES).await;

    // Alice's second call in a second: her per-key quota of 1.
    assert_eq!(proxy.get("/search", "alice").await.0, StatusCode::OK);
    let (status, headers) = proxy.get("/search", "alice").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_qps_refusal(&headers, "per-user", 1);

    // A third caller in the same second: the route's quota of 2.
    assert_eq!(proxy.get("/search", "bob").await.0, StatusCode::OK);
    let (status, headers) = proxy.get("/search", "carol").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_qps_refusal(&headers, "search-qps", 2);

    // A concurrency refusal: no Retry-After, no t, qu names the unit.
    let held = proxy.hold().await;
    let (status, headers) = proxy.get("/hold", "dave").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let policy = member(&headers, "ratelimit-policy");
    let state = member(&headers, "ratelimit");
    assert_eq!(
        (policy.name.as_str(), state.name.as_str()),
        ("one-hold", "one-hold")
    );
    assert_eq!(policy.integer("q"), Some(1));
    assert_eq!(policy.string("qu").as_deref(), Some("concurrent-requests"));
    assert_eq!(policy.integer("w"), None);
    assert_eq!(state.integer("r"), Some(0));
    assert_eq!(state.integer("t"), None);
    assert!(headers.get("retry-after").is_none());
    proxy.release.notify_one();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    proxy.served.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn legacy_fields_and_none_are_chosen_in_the_file() {
    let proxy = Proxy::start(&format!(
        "{RULES}\n[blocked]\nratelimit_fields = \"legacy\"\n"
    ))
    .await;
    for user in ["alice", "bob"] {
        assert_eq!(proxy.get("/search", user).await.0, StatusCode::OK);
    }
    let (status, headers) = proxy.get("/search", "carol").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["x-ratelimit-limit"], "2");
    assert_eq!(headers["x-ratelimit-remaining"], "0");
    assert_eq!(headers["x-ratelimit-reset"], headers["retry-after"]);
    assert!(headers.get("ratelimit-policy").is_none());
    assert!(headers.get("ratelimit").is_none());
    // A limit of calls in flight: the legacy fields cannot say so, and are left out.
    let held = proxy.hold().await;
    let (status, headers) = proxy.get("/hold", "dave").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(headers.get("x-ratelimit-limit").is_none(), "{headers:?}");
    proxy.release.notify_one();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    proxy.served.shutdown().await;

    let proxy = Proxy::start(&format!(
        "{RULES}\n[blocked]\nratelimit_fields = \"none\"\n"
    ))
    .await;
    for user in ["alice", "bob"] {
        assert_eq!(proxy.get("/search", user).await.0, StatusCode::OK);
    }
    let (status, headers) = proxy.get("/search", "carol").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(headers.contains_key("retry-after"));
    for name in ["ratelimit-policy", "ratelimit", "x-ratelimit-limit"] {
        assert!(headers.get(name).is_none(), "{name} in {headers:?}");
    }
    proxy.served.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn admitted_responses_say_what_is_left_when_asked() {
    let proxy = Proxy::start(RULES).await;
    let (status, headers) = proxy.get("/search", "alice").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("ratelimit").is_none(), "off by default");
    proxy.served.shutdown().await;

    let proxy = Proxy::start(&format!(
        "{RULES}\n[blocked]\nratelimit_on_admitted = true\n"
    ))
    .await;
    let (status, headers) = proxy.get("/search", "alice").await;
    assert_eq!(status, StatusCode::OK);
    let policies = members(&headers, "ratelimit-policy");
    let states = members(&headers, "ratelimit");
    let read: Vec<_> = policies
        .iter()
        .zip(&states)
        .map(|(policy, state)| {
            assert_eq!(policy.name, state.name, "the same policies, in order");
            assert_eq!(state.integer("t"), None, "no reset time");
            (
                policy.name.as_str(),
                policy.integer("q"),
                policy.integer("w"),
                state.integer("r"),
            )
        })
        .collect();
    assert_eq!(
        read,
        [
            ("search-qps", Some(2), Some(1), Some(1)),
            ("per-user", Some(1), Some(1), Some(0)),
        ]
    );
    // Bob has his own per-key quota; the route's is shared.
    let (_, headers) = proxy.get("/search", "bob").await;
    let left: Vec<_> = members(&headers, "ratelimit")
        .iter()
        .map(|state| state.integer("r"))
        .collect();
    assert_eq!(left, [Some(0), Some(0)]);
    // The concurrency rule counts this call, in flight as the fields are read.
    proxy.release.notify_one();
    let (status, headers) = proxy.get("/hold", "carol").await;
    assert_eq!(status, StatusCode::OK);
    let policy = member(&headers, "ratelimit-policy");
    assert_eq!(policy.name, "one-hold");
    assert_eq!(policy.string("qu").as_deref(), Some("concurrent-requests"));
    assert_eq!(member(&headers, "ratelimit").integer("r"), Some(0));
    proxy.served.shutdown().await;
}
