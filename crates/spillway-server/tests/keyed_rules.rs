//! Per-key rules through the proxy: keys from the client's address (through trusted proxies),
//! a header, a query parameter and a path segment; what a request without its key gets; what
//! a refusal says; a reload that keeps each key's state; and the file's checks. On tokio's
//! paused clock: no window rolls over in the middle of a test.

mod support;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spillway_server::checked;
use std::net::SocketAddr;
use support::server::Harness;

const ROUTES: &str = "[listener]\nlisten = \"127.0.0.1:0\"\ntrusted_proxies = [\"127.0.0.0/8\"]\n\n[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:9\"\n\n[[route]]\nresource = \"users\"\npath = \"/users/{id}/orders\"\nupstream = \"app\"\n\n[[route]]\nresource = \"search\"\npath = \"/search\"\nupstream = \"app\"\n";

/// The proxy over [`ROUTES`] with `rules` (and its admin API, and its file).
async fn start(rules: &str) -> Harness {
    Harness::start(&format!("{ROUTES}\n{rules}")).await
}

/// The status and body of `GET path` with `headers`.
async fn get(proxy: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::get(format!("http://{proxy}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Of `n` requests, how many were admitted (nothing listens upstream: 502) and how many
/// refused (429).
async fn admitted(proxy: SocketAddr, path: &str, headers: &[(&str, &str)], n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        match get(proxy, path, headers).await.0 {
            StatusCode::BAD_GATEWAY => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("{other}"),
        }
    }
    admitted
}

/// The spellings of one call that most servers route to the same handler meet the same
/// limit: a trailing `/`, segment parameters (`;jsessionid=...`), and HEAD for GET; `..;`,
/// which they resolve differently, is refused.
#[tokio::test(start_paused = true)]
async fn other_spellings_of_a_call_meet_its_route_s_limit() {
    let routes = ROUTES.replace(
        "path = \"/users/{id}/orders\"",
        "path = \"/users/{id}/orders\"\nmethods = [\"GET\"]",
    );
    let rules = "[[keyed]]\nid = \"per-id\"\nresource = \"users\"\nkey = \"path:id\"\ncount = 1\n";
    let h = Harness::start(&format!("{routes}\n{rules}")).await;
    let proxy = h.proxy;
    assert_eq!(admitted(proxy, "/users/7/orders", &[], 1).await, 1);
    for spelling in [
        "/users/7/orders/",
        "/users/7;jsessionid=1/orders",
        "/users/7/orders;x=1",
    ] {
        assert_eq!(admitted(proxy, spelling, &[], 1).await, 0, "{spelling}");
    }
    // A dotted segment with parameters, which servers resolve differently, is refused.
    let (status, body) = get(proxy, "/users/x/..;/7/orders", &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("segment with parameters"), "{body}");
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let head = Request::head(format!("http://{proxy}/users/7/orders"))
        .body(Empty::new())
        .unwrap();
    let response = client.request(head).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another id has its own place, whatever its spelling.
    assert_eq!(admitted(proxy, "/users/8;a/orders/", &[], 2).await, 1);
}

/// An HTTP/2 client names its host in `:authority` only: a rule keyed on `header:host` reads
/// it there, as for an HTTP/1.1 client's `Host` (before, the key was missing, and the rule
/// let every such request through).
#[tokio::test(start_paused = true)]
async fn an_http2_request_s_authority_is_its_host_key() {
    // Over an hour: the paused clock jumps to the proxy's HTTP/2 pings while the client waits.
    let rules = "[[keyed]]\nid = \"per-host\"\nresource = \"search\"\nkey = \"header:host\"\n\
                 count = 1\nduration = \"1h\"\n";
    let proxy = start(rules).await.proxy;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let mut statuses = Vec::new();
    for _ in 0..2 {
        let request = Request::get(format!("http://{proxy}/search"))
            .body(Empty::new())
            .unwrap();
        statuses.push(client.request(request).await.unwrap().status());
    }
    assert_eq!(
        statuses,
        [StatusCode::BAD_GATEWAY, StatusCode::TOO_MANY_REQUESTS]
    );
}

/// An HTTP/2 field value that starts or ends with whitespace is malformed (RFC 9113 section
/// 8.2.1) and refused with 400: an HTTP/1.1 upstream's parser trims it, so that ` v`, `v `
/// and `\tv` would each be a new key for the same user.
#[tokio::test(start_paused = true)]
async fn an_http2_value_padded_with_whitespace_is_refused() {
    let rules = "[[keyed]]\nid = \"per-user\"\nresource = \"search\"\nkey = \"header:x-user\"\n\
                 count = 1\nduration = \"1h\"\n";
    let h = start(rules).await;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let mut answers = Vec::new();
    for user in ["v", " v", "v ", "\tv", "v\t"] {
        let request = Request::get(format!("http://{}/search", h.proxy))
            .header("x-user", user)
            .body(Empty::new())
            .unwrap();
        let response = client.request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        answers.push((status, String::from_utf8_lossy(&body).into_owned()));
    }
    assert_eq!(answers[0].0, StatusCode::BAD_GATEWAY);
    for (status, body) in &answers[1..] {
        assert_eq!(*status, StatusCode::BAD_REQUEST);
        assert_eq!(
            body,
            "the value of `x-user` starts or ends with whitespace\n"
        );
    }
    let metrics = h.handle.render_metrics().unwrap();
    assert!(
        metrics.contains("outcome=\"bad_header\",reason=\"\"} 4"),
        "{metrics}"
    );
}

/// A route for an upstream that routes paths in any case (`case_sensitive = false`): every
/// spelling of its letters takes the route and meets its limits, and a key read from its path
/// is read in lower case. A route matched case by case leaves other spellings to the default
/// route, as its upstream would not serve them.
#[tokio::test(start_paused = true)]
async fn a_route_in_any_case_limits_every_spelling_of_its_path() {
    let routes = ROUTES.replace(
        "path = \"/users/{id}/orders\"",
        "path = \"/users/{id}/orders\"\ncase_sensitive = false",
    );
    let rules =
        "[[keyed]]\nid = \"per-id\"\nresource = \"users\"\nkey = \"path:id\"\ncount = 2\n\n\
                 [[flow]]\nid = \"search\"\nresource = \"search\"\ncount = 1\n";
    let h = Harness::start(&format!("{routes}\n{rules}")).await;
    let proxy = h.proxy;
    let mut admitted_total = 0;
    for spelling in [
        "/users/Alice/orders",
        "/USERS/alice/ORDERS",
        "/Users/ALICE/Orders/",
        "/users/aLiCe/orders",
    ] {
        admitted_total += admitted(proxy, spelling, &[], 1).await;
    }
    assert_eq!(admitted_total, 2, "one key, `alice`, whatever the spelling");
    // Letters that Java's case folding takes for ASCII ones: `ſ` for `s`, the Kelvin sign
    // for `k`.
    assert_eq!(admitted(proxy, "/users/kate/orders", &[], 1).await, 1);
    assert_eq!(
        admitted(proxy, "/u%C5%BFers/%E2%84%AAate/orders", &[], 1).await,
        1
    );
    assert_eq!(admitted(proxy, "/USERS/KATE/orders", &[], 1).await, 0);
    assert_eq!(admitted(proxy, "/users/bob/orders", &[], 3).await, 2);
    // `/search` is matched case by case: `/SEARCH` is not its route (the default route,
    // which has no upstream here, answers 404).
    assert_eq!(admitted(proxy, "/search", &[], 2).await, 1);
    assert_eq!(get(proxy, "/SEARCH", &[]).await.0, StatusCode::NOT_FOUND);
}

/// An HTTP/2 request may have as many header fields as an HTTP/1.1 one (100 with `Host`,
/// hyper's cap there): past it, 431. Its cookie fields reach the upstream as one `Cookie`
/// line (RFC 9113 section 8.2.3), and count as one.
#[tokio::test(start_paused = true)]
async fn an_http2_request_has_the_header_fields_an_http1_request_may_have() {
    // An upstream that answers with the number of `Cookie` lines and header lines it got, and
    // the first `Cookie`.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service =
                hyper::service::service_fn(|request: Request<hyper::body::Incoming>| async move {
                    let headers = request.headers();
                    let cookies = headers.get_all("cookie").iter().count();
                    let first = headers
                        .get("cookie")
                        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                        .unwrap_or_default();
                    let body = format!("{cookies} {} {first}", headers.len());
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        http_body_util::Full::new(Bytes::from(body)),
                    ))
                });
            let io = hyper_util::rt::TokioIo::new(stream);
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .max_headers(1_000)
                    .serve_connection(io, service),
            );
        }
    });
    let routes = ROUTES.replace("http://127.0.0.1:9", &format!("http://{upstream}"));
    let h = Harness::start(&routes).await;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let send = |fields: usize, cookies: usize| {
        let mut request = Request::get(format!("http://{}/search", h.proxy));
        for n in 0..fields {
            request = request.header(format!("x-field-{n}"), "v");
        }
        for n in 0..cookies {
            request = request.header("cookie", format!("c{n}=v"));
        }
        let request = request.body(Empty::new()).unwrap();
        let client = client.clone();
        async move {
            let response = client.request(request).await.unwrap();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    // `:authority` becomes `Host`, one of the 100, as an HTTP/1.1 request's `Host` is.
    assert_eq!(send(99, 0).await.0, StatusCode::OK);
    // 98 fields and 400 cookies: 99 fields and `Host`, and one `Cookie` line upstream.
    let (status, body) = send(98, 400).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (lines, rest) = body.split_once(' ').unwrap();
    assert_eq!(lines, "1", "one Cookie line: {body}");
    assert!(rest.contains("c0=v; c1=v; c2=v"), "{body}");
    assert!(rest.ends_with("c399=v"), "{body}");
    let (status, body) = send(100, 0).await;
    assert_eq!(status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(body, "more than 100 header fields\n");
    let (status, _) = send(99, 1).await;
    assert_eq!(status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    let metrics = h.handle.render_metrics().unwrap();
    assert!(
        metrics.contains("outcome=\"bad_header\",reason=\"\"} 2"),
        "{metrics}"
    );
}

/// Spellings of one host are one `header:host` key: case, a trailing dot, a port.
#[tokio::test(start_paused = true)]
async fn spellings_of_a_host_are_one_host_key() {
    let rules = "[[keyed]]\nid = \"per-host\"\nresource = \"search\"\nkey = \"header:host\"\n\
                 count = 1\nexceptions = [{ key = \"Big.Example.:8080\", count = 3 }]\n";
    let proxy = start(rules).await.proxy;
    assert_eq!(
        admitted(proxy, "/search", &[("host", "v.example")], 1).await,
        1
    );
    for spelling in [
        "V.EXAMPLE",
        "v.example.",
        "v.example:80",
        "v.example:080",
        "v.example:",
    ] {
        let refused = admitted(proxy, "/search", &[("host", spelling)], 1).await;
        assert_eq!(refused, 0, "{spelling}");
    }
    assert_eq!(
        admitted(proxy, "/search", &[("host", "w.example")], 1).await,
        1
    );
    // An exception names its host as requests' hosts are read.
    assert_eq!(
        admitted(proxy, "/search", &[("host", "big.example")], 4).await,
        3
    );
}

/// A key stated twice (a header on two lines, a query parameter twice) is refused with 400:
/// the upstream may read another line than the limits would, so that a forged first line
/// would give each request a new key.
#[tokio::test(start_paused = true)]
async fn a_key_stated_twice_is_refused() {
    let rules = "[[keyed]]\nid = \"per-user\"\nresource = \"search\"\nkey = \"header:x-user\"\ncount = 1\n\n\
                 [[keyed]]\nid = \"per-query\"\nresource = \"users\"\nkey = \"query:tenant\"\ncount = 1\n";
    let h = start(rules).await;
    let proxy = h.proxy;
    assert_eq!(
        admitted(proxy, "/search", &[("x-user", "victim")], 1).await,
        1
    );
    let (status, body) = get(
        proxy,
        "/search",
        &[("x-user", "fresh"), ("x-user", "victim")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body, "the key `header:x-user` is given more than once\n");
    let (status, body) = get(proxy, "/users/1/orders?tenant=fresh&tenant=victim", &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body, "the key `query:tenant` is given more than once\n");
    // Once, it is a key like any other; an empty one names no one: the request has none.
    assert_eq!(admitted(proxy, "/users/1/orders?tenant=a", &[], 2).await, 1);
    assert_eq!(admitted(proxy, "/search", &[("x-user", "")], 3).await, 3);
    let metrics = h.handle.render_metrics().unwrap();
    assert!(
        metrics.contains(
            "spillway_requests_total{resource=\"search\",outcome=\"repeated_key\",reason=\"\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test(start_paused = true)]
async fn each_client_each_user_and_each_id_has_its_own_limit() {
    let rules = "[[keyed]]\nid = \"per-client\"\nresource = \"search\"\nkey = \"peer_ip\"\ncount = 3\n\n\
                 [[keyed]]\nid = \"per-user\"\nresource = \"search\"\nkey = \"header:x-user\"\ncount = 2\nexceptions = [{ key = \"batch\", count = 5 }]\n\n\
                 [[keyed]]\nid = \"per-id\"\nresource = \"users\"\nkey = \"path:id\"\ncount = 1\n\n\
                 [[keyed]]\nid = \"per-query\"\nresource = \"users\"\nkey = \"query:tenant\"\ncount = 2\n";
    let proxy = start(rules).await.proxy;
    // The peer is a trusted proxy: each client named in X-Forwarded-For has its own 3.
    let client = |ip: &'static str| [("x-forwarded-for", ip)];
    assert_eq!(admitted(proxy, "/search", &client("1.1.1.1"), 5).await, 3);
    assert_eq!(admitted(proxy, "/search", &client("2.2.2.2"), 5).await, 3);
    // Per user, within each client's limit; `batch` has 5.
    let both = |ip: &'static str, user: &'static str| [("x-forwarded-for", ip), ("x-user", user)];
    assert_eq!(
        admitted(proxy, "/search", &both("3.3.3.3", "alice"), 3).await,
        2
    );
    assert_eq!(
        admitted(proxy, "/search", &both("4.4.4.4", "batch"), 3).await,
        3
    );
    // Per path segment and per query parameter.
    assert_eq!(admitted(proxy, "/users/7/orders", &[], 3).await, 1);
    assert_eq!(admitted(proxy, "/users/8/orders", &[], 3).await, 1);
    assert_eq!(admitted(proxy, "/users/9/orders?tenant=a", &[], 1).await, 1);
    assert_eq!(
        admitted(proxy, "/users/10/orders?tenant=a", &[], 1).await,
        1
    );
    assert_eq!(
        admitted(proxy, "/users/11/orders?tenant=a", &[], 1).await,
        0
    );
    // A refusal names the rule and says it was per key, without the key.
    let (status, body) = get(proxy, "/search", &both("5.5.5.5", "alice")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(body.contains("blocked by per-key rule per-user"), "{body}");
    assert!(
        !body.contains("alice") && !body.contains("5.5.5.5"),
        "{body}"
    );
    // Spoofed hops before the nearest untrusted one change nothing.
    let spoofed = [("x-forwarded-for", "9.9.9.9, 1.1.1.1")];
    assert_eq!(admitted(proxy, "/search", &spoofed, 2).await, 0);
    // Past the second, every key has its limit again.
    tokio::time::advance(std::time::Duration::from_millis(1_001)).await;
    assert_eq!(admitted(proxy, "/search", &client("1.1.1.1"), 5).await, 3);
}

#[tokio::test(start_paused = true)]
async fn a_request_without_its_key_passes_is_refused_or_shares_one_limit() {
    let rules = "[[keyed]]\nid = \"needs-user\"\nresource = \"search\"\nkey = \"header:x-user\"\non_missing = \"refuse\"\ncount = 5\n\n\
                 [[keyed]]\nid = \"tenants\"\nresource = \"users\"\nkey = \"query:tenant\"\non_missing = \"shared\"\ncount = 2\n";
    let proxy = start(rules).await.proxy;
    let (status, body) = get(proxy, "/search", &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        "this route limits requests per `header:x-user`, and this request has none\n"
    );
    assert_eq!(admitted(proxy, "/search", &[("x-user", "u")], 1).await, 1);
    // Without a tenant, all share one limit of 2.
    assert_eq!(admitted(proxy, "/users/1/orders", &[], 2).await, 2);
    assert_eq!(admitted(proxy, "/users/2/orders", &[], 2).await, 0);
    assert_eq!(admitted(proxy, "/users/3/orders?tenant=t", &[], 2).await, 2);
}

#[tokio::test(start_paused = true)]
async fn a_reload_of_the_file_keeps_each_key_s_state_and_applies_a_change() {
    let rule = |count: u32| {
        format!("[[keyed]]\nid = \"per-user\"\nresource = \"search\"\nkey = \"header:x-user\"\ncount = {count}\n")
    };
    let h = start(&rule(2)).await;
    let (proxy, file, reloader) = (h.proxy, &h.file, &h.reloader);
    let alice = [("x-user", "alice")];
    assert_eq!(admitted(proxy, "/search", &alice, 1).await, 1);
    // The file again, with a comment more: alice still has one left, not two.
    std::fs::write(file, format!("# touched\n{ROUTES}\n{}", rule(2))).unwrap();
    reloader.reload().unwrap();
    assert_eq!(admitted(proxy, "/search", &alice, 3).await, 1);
    // A changed rule starts again, at its new count.
    std::fs::write(file, format!("{ROUTES}\n{}", rule(4))).unwrap();
    reloader.reload().unwrap();
    assert_eq!(admitted(proxy, "/search", &alice, 5).await, 4);
    // A bad rule changes nothing.
    std::fs::write(
        file,
        format!("{ROUTES}\n{}", rule(4).replace("header:x-user", "cookie:x")),
    )
    .unwrap();
    assert!(reloader.reload().is_err());
    assert_eq!(admitted(proxy, "/search", &alice, 1).await, 0);
}

#[test]
fn the_file_names_every_keyed_rule_at_fault() {
    let bad = "[[keyed]]\nid = \"a\"\nresource = \"search\"\nkey = \"cookie:sid\"\ncount = 1\n\n\
               [[keyed]]\nid = \"b\"\nresource = \"search\"\nkey = \"path:id\"\ncount = 1\n\n\
               [[keyed]]\nid = \"c\"\nresource = \"users\"\nkey = \"path:user\"\ncount = 1\n\n\
               [[keyed]]\nid = \"d\"\nresource = \"users\"\nkey = \"header:x-a\"\ncount = -1\n\n\
               [[keyed]]\nid = \"e\"\nresource = \"users\"\nkey = \"header:x-a\"\non_missing = \"refuse\"\ncount = 1\n";
    let text = format!("{ROUTES}\n{bad}").replace(
        "trusted_proxies = [\"127.0.0.0/8\"]",
        "trusted_proxies = [\"10.0.0.0/99\"]",
    );
    let err = checked::parse(&text, "test.toml").unwrap_err().to_string();
    for expected in [
        "`listener.trusted_proxies`: `10.0.0.0/99` is not an address or a CIDR block",
        "`keyed[0].key`: `cookie:sid` is not a key source",
        "`keyed[1].key`: reads `{id}` from the path, and the route `/search` to `search` has no such segment",
        "`keyed[2].key`: reads `{user}` from the path, and the route `/users/{id}/orders` to `users` has no such segment",
        "`keyed[3].count`: must be finite, from 0 to 4294967295, got -1",
        "`keyed[4].on_missing`: must be the same for every rule keyed by `header:x-a` on `users`",
    ] {
        assert!(err.contains(expected), "no `{expected}` in:\n{err}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_forged_forwarded_header_does_not_beat_a_per_ip_limit() {
    // The front proxy (loopback, trusted) appends the client to X-Forwarded-For and passes on
    // whatever `Forwarded` the client made up: a new address on every request.
    let rules = "[[keyed]]\nid = \"per-ip\"\nresource = \"search\"\nkey = \"peer_ip\"\ncount = 5\n";
    let proxy = start(rules).await.proxy;
    let mut passed = 0;
    for n in 0..20 {
        let forged = format!("for=10.0.{}.{}", n / 250, n % 250 + 1);
        let headers = [
            ("forwarded", forged.as_str()),
            ("x-forwarded-for", "203.0.113.9"),
        ];
        if get(proxy, "/search", &headers).await.0 == StatusCode::BAD_GATEWAY {
            passed += 1;
        }
    }
    assert_eq!(
        passed, 5,
        "only X-Forwarded-For, the header the proxy writes, is read"
    );
    // Nor does a forged X-Forwarded-For when the proxies write `Forwarded`.
    let text = ROUTES.replace(
        "trusted_proxies = [\"127.0.0.0/8\"]",
        "trusted_proxies = [\"127.0.0.0/8\"]\nforwarded_header = \"forwarded\"",
    );
    let proxy = Harness::start(&format!("{text}\n{rules}")).await.proxy;
    let mut passed = 0;
    for n in 0..20 {
        let forged = format!("10.1.0.{}", n + 1);
        let headers = [
            ("x-forwarded-for", forged.as_str()),
            ("forwarded", "for=203.0.113.9;proto=https"),
        ];
        if get(proxy, "/search", &headers).await.0 == StatusCode::BAD_GATEWAY {
            passed += 1;
        }
    }
    assert_eq!(passed, 5);
}

#[tokio::test(start_paused = true)]
async fn an_ipv6_client_is_one_key_whatever_address_of_its_64_it_uses() {
    // A client given a /64 sends each request from a new address of it.
    let rules = "[[keyed]]\nid = \"per-ip\"\nresource = \"search\"\nkey = \"peer_ip\"\ncount = 3\n\
                 exceptions = [{ key = \"2001:db8:0:9::/64\", count = 6 }]\n";
    let h = start(rules).await;
    let proxy = h.proxy;
    let mut passed = 0;
    for n in 1..=20 {
        let hop = format!("2001:db8:0:1:{n:x}::{n:x}");
        let headers = [("x-forwarded-for", hop.as_str())];
        if get(proxy, "/search", &headers).await.0 == StatusCode::BAD_GATEWAY {
            passed += 1;
        }
    }
    assert_eq!(passed, 3, "twenty addresses of one /64 share its limit");
    // The next /64 is another client; an IPv4 client is keyed by its address.
    let next = [("x-forwarded-for", "2001:db8:0:2::1")];
    assert_eq!(admitted(proxy, "/search", &next, 4).await, 3);
    let v4 = [("x-forwarded-for", "192.0.2.1")];
    assert_eq!(admitted(proxy, "/search", &v4, 4).await, 3);
    // An exception names a /64 as keys are written.
    let excepted = [("x-forwarded-for", "2001:db8:0:9:1:2:3:4")];
    assert_eq!(admitted(proxy, "/search", &excepted, 8).await, 6);
    // A reload to keys per address applies at once.
    let text = std::fs::read_to_string(&h.file).unwrap().replace(
        "trusted_proxies = [\"127.0.0.0/8\"]",
        "trusted_proxies = [\"127.0.0.0/8\"]\npeer_ip_prefix_v6 = 128",
    );
    let text = text.replace("2001:db8:0:9::/64", "2001:db8:0:9::1");
    std::fs::write(&h.file, text).unwrap();
    h.reloader.reload().unwrap();
    for hop in ["2001:db8:0:3::1", "2001:db8:0:3::2"] {
        assert_eq!(
            admitted(proxy, "/search", &[("x-forwarded-for", hop)], 4).await,
            3
        );
    }

    // With `peer_ip_prefix_v6 = 128` each address is a key; with a v4 prefix of 24, each /24.
    let text = ROUTES.replace(
        "trusted_proxies = [\"127.0.0.0/8\"]",
        "trusted_proxies = [\"127.0.0.0/8\"]\npeer_ip_prefix_v4 = 24\npeer_ip_prefix_v6 = 128",
    );
    let rule = "[[keyed]]\nid = \"per-ip\"\nresource = \"search\"\nkey = \"peer_ip\"\ncount = 1\n";
    let proxy = Harness::start(&format!("{text}\n{rule}")).await.proxy;
    for n in 1..=3 {
        let hop = format!("2001:db8:0:1::{n}");
        assert_eq!(
            admitted(proxy, "/search", &[("x-forwarded-for", &hop)], 2).await,
            1
        );
    }
    let mut passed = 0;
    for n in 1..=3 {
        let hop = format!("198.51.100.{n}");
        passed += admitted(proxy, "/search", &[("x-forwarded-for", &hop)], 1).await;
    }
    assert_eq!(passed, 1, "three addresses of one /24 share its limit");
}

#[test]
fn keys_written_by_hand_for_peer_ip_are_checked_against_the_prefixes() {
    let rules = "[[keyed]]\nid = \"a\"\nresource = \"search\"\nkey = \"peer_ip\"\ncount = 1\n\
                 exceptions = [{ key = \"192.0.2.7\", count = 2 }, { key = \"2001:db8::1\", count = 2 }]\n\n\
                 [[keyed]]\nid = \"b\"\nresource = \"search\"\nkey = \"header:x-user\"\ncount = 1\n\
                 exceptions = [{ key = \"2001:db8::1\", count = 2 }]\n\n\
                 [criticality]\n[[criticality.rule]]\nclass = \"sheddable\"\nkey = \"peer_ip\"\n\
                 values = [\"2001:db8::/64\", \"vip\"]\n";
    let err = checked::parse(&format!("{ROUTES}\n{rules}"), "test.toml")
        .unwrap_err()
        .to_string();
    for expected in [
        "`keyed[0].exceptions[1].key`: `2001:db8::1` is never a client's key (IPv6 clients are keyed by their /64 network); write `2001:db8::/64`",
        "`criticality.rule[0].values`: value 1: `vip` is not an address or a network",
    ] {
        assert!(err.contains(expected), "no `{expected}` in:\n{err}");
    }
    assert!(
        !err.contains("keyed[1]"),
        "a header's keys are any text:\n{err}"
    );
    for (setting, expected) in [
        (
            "peer_ip_prefix_v4 = 0",
            "`listener.peer_ip_prefix_v4`: an IPv4 prefix is from 1 to 32 bits long, not 0",
        ),
        (
            "peer_ip_prefix_v6 = 129",
            "`listener.peer_ip_prefix_v6`: an IPv6 prefix is from 1 to 128 bits long, not 129",
        ),
    ] {
        let text = ROUTES.replace("listen = ", &format!("{setting}\nlisten = "));
        let err = checked::parse(&text, "test.toml").unwrap_err().to_string();
        assert!(err.contains(expected), "no `{expected}` in:\n{err}");
    }
    // At /128, an address is a key.
    let exact = ROUTES.replace("listen = ", "peer_ip_prefix_v6 = 128\nlisten = ");
    let rule = "[[keyed]]\nid = \"a\"\nresource = \"search\"\nkey = \"peer_ip\"\ncount = 1\n\
                exceptions = [{ key = \"2001:db8::1\", count = 2 }]\n";
    checked::parse(&format!("{exact}\n{rule}"), "test.toml").unwrap();
}

#[tokio::test(start_paused = true)]
async fn each_keyed_rule_shows_in_the_metrics_and_the_status() {
    let rules =
        "[[keyed]]\nid = \"per-client\"\nresource = \"search\"\nkey = \"peer_ip\"\ncount = 3\n";
    let h = start(rules).await;
    let (proxy, handle) = (h.proxy, h.handle.clone());
    let client = |ip: &'static str| [("x-forwarded-for", ip)];
    assert_eq!(admitted(proxy, "/search", &client("1.1.1.1"), 5).await, 3);
    assert_eq!(admitted(proxy, "/search", &client("2.2.2.2"), 5).await, 3);

    // Ten checks, four refused, two keys held exactly.
    let metrics = handle.render_metrics().unwrap();
    let labels = r#"{rule="per-client",resource="search"}"#;
    for line in [
        format!("spillway_keyed_checks_total{labels} 10"),
        format!("spillway_keyed_refusals_total{labels} 4"),
        format!("spillway_keyed_sketched_total{labels} 0"),
        format!("spillway_keyed_evictions_total{labels} 0"),
        format!("spillway_keyed_exact_keys{labels} 2"),
        r#"spillway_rules{kind="keyed"} 1"#.to_owned(),
    ] {
        assert!(metrics.contains(&line), "no `{line}` in:\n{metrics}");
    }
    let (stats, bytes) = handle.spillway().keyed_stats("per-client").unwrap();
    let memory = format!("spillway_keyed_memory_bytes{labels} {bytes}");
    assert!(metrics.contains(&memory), "no `{memory}` in:\n{metrics}");
    let sketch = format!("spillway_keyed_sketch_bytes{labels} {}", stats.sketch_bytes);
    assert!(metrics.contains(&sketch), "no `{sketch}` in:\n{metrics}");

    // The admin API's status lists it with the same figures.
    let (status, body) = support::server::get(h.admin, "/api/status").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let keyed = &status["keyed"][0];
    assert_eq!(keyed["rule"], "per-client");
    assert_eq!(keyed["resource"], "search");
    assert_eq!(
        (keyed["checks"].as_u64(), keyed["refused"].as_u64()),
        (Some(10), Some(4))
    );
    assert_eq!(keyed["exact_keys"], 2);
    assert_eq!(keyed["capacity"], spillway::keyed::DEFAULT_CAPACITY);
    assert_eq!(keyed["memory_bytes"].as_u64(), Some(bytes as u64));
}
