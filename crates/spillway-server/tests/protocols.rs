//! The protocols a gateway must speak, end to end on loopback through the proxy: HTTP/2 with
//! prior knowledge, TLS with ALPN (and a certificate swapped by a reload, or renewed on disk), a real gRPC client
//! and server (tonic), a WebSocket echo, and HTTPS upstreams. Every wait is on an event with
//! a timeout; no test depends on the machine's speed.

mod support;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use spillway_server::checked::parse;
use spillway_server::{Prepared, Server};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use support::server::Served;

/// Longest any one step may take before the test fails (never reached when it passes).
const STEP: Duration = Duration::from_secs(20);

async fn step<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in {STEP:?}"))
}

/// An upstream answering every request with its HTTP version and `Host`
/// (`HTTP/1.1 host`), over `tls` if given, with HTTP/1.1 and HTTP/2 (by ALPN, or by the
/// first bytes in cleartext).
async fn version_upstream(tls: Option<tokio_rustls::TlsAcceptor>) -> SocketAddr {
    serve_each(move |stream| {
        let tls = tls.clone();
        async move {
            let service = service_fn(|request: Request<Incoming>| async move {
                let host = request
                    .headers()
                    .get("host")
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or("-")
                    .to_owned();
                let text = format!("{:?} {host}", request.version());
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let _ = match tls {
                Some(tls) => match tls.accept(stream).await {
                    Ok(stream) => {
                        builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                    }
                    Err(_) => return,
                },
                None => {
                    builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                }
            };
        }
    })
    .await
}

/// A loopback listener whose every accepted connection is handed to `serve` on a task of
/// its own; its address.
async fn serve_each<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            if let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream));
            }
        }
    });
    addr
}

/// A certificate authority and a `localhost` certificate it signed, as PEM files in `dir`
/// under `prefix`: `{prefix}ca.pem`, `{prefix}cert.pem`, `{prefix}key.pem`.
fn certificates(dir: &Path, prefix: &str) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let write = |name: &str, text: String| {
        let path = dir.join(format!("{prefix}{name}"));
        std::fs::write(&path, text).unwrap();
        path
    };
    (
        write("ca.pem", ca.pem()),
        write("cert.pem", leaf.pem()),
        write("key.pem", leaf_key.serialize_pem()),
    )
}

fn tls_client_config(ca: &Path) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// An HTTPS client trusting `ca`, offering HTTP/2 and HTTP/1.1 (`h2`), or HTTP/1.1 only.
fn https_client(ca: &Path, h2: bool) -> HttpsClient {
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_client_config(ca))
        .https_only();
    let connector = if h2 {
        builder.enable_all_versions().build()
    } else {
        builder.enable_http1().build()
    };
    Client::builder(TokioExecutor::new()).build(connector)
}

/// The proxy in-process, serving `config` until dropped (its spillway on the system clock).
async fn proxy(config: &str) -> Served {
    let config = parse(config, "test.toml").unwrap();
    Served::with(&config, spillway::Spillway::new(), None).await
}

fn routed(listener: &str, upstream: &str, extra: &str) -> String {
    format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\n{listener}\n\n[[upstream]]\nname = \"app\"\n{upstream}\n\n\
         [[route]]\nresource = \"app\"\npath = \"/\"\nupstream = \"app\"\n{extra}"
    )
}

async fn body_text(response: Response<Incoming>) -> String {
    let body = step("body", response.into_body().collect()).await.unwrap();
    String::from_utf8_lossy(&body.to_bytes()).into_owned()
}

#[tokio::test]
async fn http2_with_prior_knowledge_and_http1_share_the_cleartext_port() {
    let upstream = version_upstream(None).await;
    let p = proxy(&routed("", &format!("url = \"http://{upstream}\""), "")).await;
    let uri: http::Uri = format!("http://{}/x", p.proxy).parse().unwrap();

    let h2c: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let response = step("h2c", h2c.get(uri.clone())).await.unwrap();
    assert_eq!(response.version(), Version::HTTP_2);
    assert_eq!(response.status(), StatusCode::OK);
    // The upstream got HTTP/1.1 with the client's authority as `Host`.
    assert_eq!(body_text(response).await, format!("HTTP/1.1 {}", p.proxy));

    let h1: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let response = step("http/1.1", h1.get(uri)).await.unwrap();
    assert_eq!(response.version(), Version::HTTP_11);
    assert_eq!(body_text(response).await, format!("HTTP/1.1 {}", p.proxy));
    assert_eq!(p.spillway.resource("app").unwrap().stats().total_pass, 2);
}

#[tokio::test]
async fn tls_offers_http2_and_http1_by_alpn_and_a_reload_swaps_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path(), "");
    let upstream = version_upstream(None).await;
    let text = routed(
        &format!(
            "tls = {{ cert = \"{}\", key = \"{}\" }}",
            cert.display(),
            key.display()
        ),
        &format!("url = \"http://{upstream}\""),
        "",
    );
    let p = proxy(&text).await;
    let uri: http::Uri = format!("https://localhost:{}/x", p.proxy.port())
        .parse()
        .unwrap();

    let response = step("h2", https_client(&ca, true).get(uri.clone()))
        .await
        .unwrap();
    assert_eq!(response.version(), Version::HTTP_2);
    assert!(body_text(response).await.starts_with("HTTP/1.1"));
    let response = step("http/1.1", https_client(&ca, false).get(uri.clone()))
        .await
        .unwrap();
    assert_eq!(response.version(), Version::HTTP_11);

    // A new certificate from another authority, at the same paths: applied by a reload.
    let (new_ca, new_cert, new_key) = certificates(dir.path(), "new-");
    std::fs::rename(new_cert, &cert).unwrap();
    std::fs::rename(new_key, &key).unwrap();
    let config = parse(&text, "test.toml").unwrap();
    p.handle.install(Prepared::new(&config).unwrap());
    serves_only(&uri, &new_ca, &ca).await;
}

/// Asserts that `uri` is served with a certificate `ca` signed, and not `old`'s any more.
async fn serves_only(uri: &http::Uri, ca: &Path, old: &Path) {
    let response = step("new certificate", https_client(ca, true).get(uri.clone()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let refused = step("old authority", https_client(old, true).get(uri.clone())).await;
    assert!(refused.is_err(), "the old certificate is still served");
}

// Real time: the file notifications come from another thread. Without the watch on the
// certificate's directory, a renewed certificate waited for the configuration to change.
#[cfg(unix)]
#[tokio::test]
async fn a_certificate_renewed_in_a_kubernetes_secret_is_served_without_a_reload_asked_for() {
    use spillway_server::reload::Reloader;
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    // A Secret's volume, as cert-manager renews it: `tls.crt` -> `..data/tls.crt`, `..data`
    // -> the current version's directory, swapped in one rename.
    let secret = dir.path().join("secret");
    let version = |name: &str| {
        let files = secret.join(name);
        std::fs::create_dir_all(&files).unwrap();
        let (ca, cert, key) = certificates(&files, "");
        std::fs::rename(cert, files.join("tls.crt")).unwrap();
        std::fs::rename(key, files.join("tls.key")).unwrap();
        ca
    };
    let ca = version("..v1");
    symlink("..v1", secret.join("..data")).unwrap();
    for file in ["tls.crt", "tls.key"] {
        symlink(format!("..data/{file}"), secret.join(file)).unwrap();
    }
    let upstream = version_upstream(None).await;
    let text = routed(
        &format!(
            "tls = {{ cert = \"{}\", key = \"{}\" }}",
            secret.join("tls.crt").display(),
            secret.join("tls.key").display()
        ),
        &format!("url = \"http://{upstream}\""),
        "",
    );
    // The file in a directory of its own: only the Secret's is watched for the certificate.
    std::fs::create_dir(dir.path().join("config")).unwrap();
    let file = dir.path().join("config").join("spillway.toml");
    std::fs::write(&file, &text).unwrap();
    let p = proxy(&text).await;
    let reloader = Reloader::new(file, parse(&text, "test.toml").unwrap(), p.handle.clone());
    tokio::spawn(reloader.clone().watch());
    let uri: http::Uri = format!("https://localhost:{}/x", p.proxy.port())
        .parse()
        .unwrap();
    let response = step(
        "first certificate",
        https_client(&ca, true).get(uri.clone()),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // Renewed: a new version from another authority, swapped in.
    let new_ca = version("..v2");
    symlink("..v2", secret.join("..data_tmp")).unwrap();
    std::fs::rename(secret.join("..data_tmp"), secret.join("..data")).unwrap();
    // Waits until the reloader has made `count` attempts, good or bad.
    let attempts = |count: u64| {
        let reloader = reloader.clone();
        step("the reload", async move {
            let made = |r: &Reloader| r.state().reloads + r.state().failures;
            while made(&reloader) < count {
                let attempted = reloader.attempted();
                tokio::pin!(attempted);
                attempted.as_mut().enable();
                if made(&reloader) >= count {
                    break;
                }
                attempted.await;
            }
        })
    };
    attempts(1).await;
    assert_eq!(reloader.state().reloads, 1);
    serves_only(&uri, &new_ca, &ca).await;

    // The key gone: the reload it starts fails, naming it, and the certificate in use stays.
    std::fs::rename(secret.join("tls.key"), secret.join("tls.key.away")).unwrap();
    attempts(2).await;
    let state = reloader.state();
    assert_eq!((state.reloads, state.failures), (1, 1));
    let error = state.last_error.unwrap();
    assert!(error.contains("tls.key: cannot read"), "{error}");
    let response = step(
        "while the key is gone",
        https_client(&new_ca, true).get(uri.clone()),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // Back: reloaded.
    std::fs::rename(secret.join("tls.key.away"), secret.join("tls.key")).unwrap();
    attempts(3).await;
    let state = reloader.state();
    assert_eq!((state.reloads, state.last_error), (2, None));

    // The whole volume gone (unmounted), then back with a new version: a new directory, watched
    // again (before, its old watch was dead, and the next look was the minute's).
    std::fs::rename(&secret, dir.path().join("secret.gone")).unwrap();
    attempts(4).await;
    assert_eq!(reloader.state().failures, 2);
    let newest_ca = version("..v3");
    symlink("..v3", secret.join("..data")).unwrap();
    for file in ["tls.crt", "tls.key"] {
        symlink(format!("..data/{file}"), secret.join(file)).unwrap();
    }
    attempts(5).await;
    let state = reloader.state();
    assert_eq!((state.reloads, state.last_error), (3, None));
    let response = step(
        "newest certificate",
        https_client(&newest_ca, true).get(uri),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_certificate_or_key_that_cannot_be_read_stops_the_start_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert, _) = certificates(dir.path(), "");
    let text = routed(
        &format!(
            "tls = {{ cert = \"{}\", key = \"{}\" }}",
            cert.display(),
            dir.path().join("missing-key.pem").display()
        ),
        "url = \"http://127.0.0.1:1\"",
        "",
    );
    let config = parse(&text, "test.toml").unwrap();
    let err = Server::bind(&config, spillway::Spillway::new())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("missing-key.pem: cannot read"),
        "{err}"
    );
}

/// Connects and sends nothing (or, over TLS, no handshake): what the proxy does.
async fn silent(addr: SocketAddr) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut read = Vec::new();
    tokio::time::timeout(Duration::from_secs(3600), stream.read_to_end(&mut read))
        .await
        .expect("the silent connection stayed open")
        .unwrap();
    read
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert, key) = certificates(dir.path(), "");
    for tls in [
        String::new(),
        format!(
            "tls = {{ cert = \"{}\", key = \"{}\" }}",
            cert.display(),
            key.display()
        ),
    ] {
        let p = proxy(&routed(
            &format!("header_timeout = \"5s\"\n{tls}"),
            "url = \"http://127.0.0.1:1\"",
            "",
        ))
        .await;
        let start = tokio::time::Instant::now();
        assert!(silent(p.proxy).await.is_empty());
        assert!(start.elapsed() >= Duration::from_secs(5));
        let metrics = p.handle.render_metrics().unwrap();
        assert!(
            metrics.contains(r#"spillway_header_timeouts_total{listener="proxy"} 1"#),
            "{metrics}"
        );
    }
}

/// The proxy in front of the gRPC server at `upstream` (cleartext HTTP/2), and a gRPC health
/// client connected to the proxy.
async fn grpc_proxy(
    upstream: SocketAddr,
) -> (
    Served,
    tonic_health::pb::health_client::HealthClient<tonic::transport::Channel>,
) {
    let p = proxy(&routed(
        "",
        &format!("url = \"http://{upstream}\"\nprotocol = \"http2\""),
        "",
    ))
    .await;
    let endpoint = tonic::transport::Channel::from_shared(format!("http://{}", p.proxy)).unwrap();
    let channel = step("connect", endpoint.connect()).await.unwrap();
    (
        p,
        tonic_health::pb::health_client::HealthClient::new(channel),
    )
}

/// A gRPC server (tonic's health service) in cleartext HTTP/2, as gRPC servers are run.
async fn grpc_upstream() -> SocketAddr {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let incoming =
        tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    tokio::spawn(async move {
        let _keep = reporter;
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
    });
    addr
}

#[tokio::test]
async fn a_grpc_call_passes_through_and_a_limit_answers_resource_exhausted() {
    use tonic_health::pb::HealthCheckRequest;
    let (p, mut client) = grpc_proxy(grpc_upstream().await).await;
    let check = |service: &str| {
        tonic::Request::new(HealthCheckRequest {
            service: service.to_owned(),
        })
    };

    let answer = step("check", client.check(check(""))).await.unwrap();
    assert_eq!(answer.into_inner().status, 1, "SERVING");
    let resource = p.spillway.resource("app").unwrap();
    assert_eq!(resource.stats().total_error, 0);

    // A status of the caller's fault (NOT_FOUND, trailers-only under HTTP 200) is no error,
    // as a 4xx is none: a client earning many opens no breaker for the others.
    for _ in 0..12 {
        let status = step("unknown", client.check(check("no.Such")))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::NotFound);
    }
    assert_eq!(resource.stats().total_error, 0);
    assert_eq!(resource.stats().total_success, 13);

    // A limit: the gRPC client gets RESOURCE_EXHAUSTED with the rule's words.
    p.spillway
        .load_flow_rules(vec![spillway::flow::FlowRule::qps("none", "app", 0.0)])
        .unwrap();
    let status = step("limited", client.check(check(""))).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("none"), "{status:?}");
}

/// An HTTP/2 upstream is sent the client's host as `:authority`, and no `Host` beside it
/// (RFC 9113 section 8.3.1), as an HTTP/1.1 upstream is sent it as `Host`.
#[tokio::test]
async fn an_http2_upstream_is_sent_the_client_s_host_as_its_authority() {
    let upstream = serve_each(|stream| async move {
        let service = service_fn(|request: Request<Incoming>| async move {
            let authority = request.uri().authority().map(|a| a.to_string());
            let hosts = request.headers().get_all("host").iter().count();
            let text = format!("{} {hosts}", authority.unwrap_or_default());
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), service)
            .await;
    })
    .await;
    let p = proxy(&routed(
        "",
        &format!("url = \"http://{upstream}\"\nprotocol = \"http2\""),
        "",
    ))
    .await;
    // From an HTTP/1.1 client and an HTTP/2 one.
    let http1: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let request = Request::get(format!("http://{}/x", p.proxy))
        .header("host", "api.example:8080")
        .body(Empty::new())
        .unwrap();
    let response = step("http1", http1.request(request)).await.unwrap();
    assert_eq!(body_text(response).await, "api.example:8080 0");
    let http2: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    // An HTTP/2 client's `:authority` (the proxy's address here) is the upstream's too.
    let request = Request::get(format!("http://{}/x", p.proxy))
        .body(Empty::new())
        .unwrap();
    let response = step("http2", http2.request(request)).await.unwrap();
    let text = body_text(response).await;
    assert_eq!(text, format!("{} 0", p.proxy));
}

/// A gRPC upstream whose every call answers one empty message and then the status its
/// request's `x-status` header names (13, INTERNAL, without one) in the trailers, or no status
/// at all for `x-status: none`: what a unary call that fails after its head looks like.
async fn trailers_status_upstream() -> SocketAddr {
    serve_each(|stream| async move {
        let service = service_fn(|request: Request<Incoming>| async move {
            let status = request
                .headers()
                .get("x-status")
                .and_then(|value| value.to_str().ok())
                .unwrap_or("13")
                .to_owned();
            let mut trailers = http::HeaderMap::new();
            if status != "none" {
                trailers.insert("grpc-status", status.parse().unwrap());
            }
            let frames = vec![
                Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))),
                Ok(http_body::Frame::trailers(trailers)),
            ];
            let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
            let response = Response::builder()
                .header("content-type", "application/grpc")
                .body(body)
                .unwrap();
            Ok::<_, Infallible>(response)
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), service)
            .await;
    })
    .await
}

#[tokio::test]
async fn a_grpc_status_in_the_trailers_decides_the_calls_outcome_in_the_metrics_too() {
    use tonic_health::pb::HealthCheckRequest;
    let (p, mut client) = grpc_proxy(trailers_status_upstream().await).await;
    let call = |status: &str| {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        request
            .metadata_mut()
            .insert("x-status", status.parse().unwrap());
        request
    };
    let outcomes = |p: &Served| {
        let text = p.handle.render_metrics().unwrap();
        let value = |outcome: &str| {
            let series = format!(
                "spillway_requests_total{{resource=\"app\",outcome=\"{outcome}\",reason=\"\"}} "
            );
            text.lines()
                .find_map(|line| line.strip_prefix(series.as_str()))
                .map_or(0, |value| value.parse::<u64>().unwrap())
        };
        (value("success"), value("error"))
    };

    let answer = step("ok", client.check(call("0"))).await.unwrap();
    assert_eq!(answer.into_inner().status, 0);
    assert_eq!(outcomes(&p), (1, 0));

    // The caller's fault (INVALID_ARGUMENT) in the trailers: no error, as a 4xx.
    let status = step("invalid", client.check(call("3"))).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(outcomes(&p), (2, 0));

    let status = step("internal", client.check(call("13")))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert_eq!(
        outcomes(&p),
        (2, 1),
        "a trailers error is an error, not a success"
    );

    // No status at all: gRPC clients see a failed call, and so do the metrics and the entry.
    let status = step("none", client.check(call("none"))).await.unwrap_err();
    assert_ne!(status.code(), tonic::Code::Ok);
    assert_eq!(outcomes(&p), (2, 2));
    let resource = p.spillway.resource("app").unwrap();
    assert_eq!(resource.stats().total_error, 2);
}

/// A WebSocket server that echoes every message back.
async fn websocket_echo() -> SocketAddr {
    serve_each(|stream| async move {
        let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
            return;
        };
        while let Some(Ok(message)) = socket.next().await {
            if message.is_close() || socket.send(message).await.is_err() {
                break;
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_websocket_is_tunnelled_and_holds_its_place_until_it_closes() {
    use tokio_tungstenite::tungstenite::Message;
    let upstream = websocket_echo().await;
    let p = proxy(&routed(
        "",
        &format!("url = \"http://{upstream}\""),
        "executes = 1\n",
    ))
    .await;
    let stream = tokio::net::TcpStream::connect(p.proxy).await.unwrap();
    let (mut socket, response) = step(
        "handshake",
        tokio_tungstenite::client_async(format!("ws://{}/chat", p.proxy), stream),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    step("send", socket.send(Message::text("hello")))
        .await
        .unwrap();
    let echoed = step("echo", socket.next()).await.unwrap().unwrap();
    assert_eq!(echoed, Message::text("hello"));

    // The open socket is one request in flight: `executes = 1` refuses a second one.
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let uri: http::Uri = format!("http://{}/plain", p.proxy).parse().unwrap();
    let refused = step("second", client.get(uri.clone())).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let resource = p.spillway.resource("app").unwrap();
    assert_eq!(resource.stats().concurrency, 1);

    // Closed: its place is free again.
    step("close", socket.close(None)).await.unwrap();
    drop(socket);
    step("place freed", async {
        while resource.stats().concurrency != 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let again = step("after close", client.get(uri)).await.unwrap();
    assert_ne!(again.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// An upstream that switches to any protocol a request asks for (as Go's `h2c` handler does
/// for `h2c`) and otherwise answers with the `Upgrade` and `HTTP2-Settings` it received
/// (`upgrade=- settings=-` when none).
async fn switching_upstream() -> SocketAddr {
    serve_each(|stream| async move {
        let service = service_fn(|request: Request<Incoming>| async move {
            let header = |name: &str| {
                let value = request.headers().get(name);
                value
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned()
            };
            let (upgrade, settings) = (header("upgrade"), header("http2-settings"));
            // `/as-h2c`: whatever was asked, switch to HTTP/2.
            let switched = match request.uri().path() {
                "/as-h2c" => "h2c".to_owned(),
                _ => upgrade.clone(),
            };
            let mut response = Response::new(Full::new(Bytes::from(format!(
                "upgrade={upgrade} settings={settings}"
            ))));
            if upgrade != "-" {
                *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                let headers = response.headers_mut();
                headers.insert("connection", "upgrade".parse().unwrap());
                headers.insert("upgrade", switched.parse().unwrap());
            }
            Ok::<_, Infallible>(response)
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades()
            .await;
    })
    .await
}

/// Sends `head` (a whole request without a body) on a new connection to `proxy` and reads the
/// answer until the connection closes.
async fn raw_exchange(proxy: SocketAddr, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    step("answer", stream.read_to_end(&mut answer))
        .await
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends `head` on a new connection to `proxy` and returns what the first read brings (a
/// response head, on a connection that may stay open as a tunnel).
async fn first_read(proxy: SocketAddr, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0; 1024];
    let read = step("first read", stream.read(&mut answer)).await.unwrap();
    String::from_utf8_lossy(&answer[..read]).into_owned()
}

/// A request asking to switch to HTTP/2 (`Upgrade: h2c`), or naming it beside WebSocket, is
/// forwarded as a plain request: the upstream never sees the `Upgrade`, no tunnel opens, and
/// so no request can reach the upstream past the proxy's routes and rules.
#[tokio::test]
async fn a_request_to_switch_to_http2_is_forwarded_without_its_upgrade() {
    let upstream = switching_upstream().await;
    let p = proxy(&routed("", &format!("url = \"http://{upstream}\""), "")).await;
    for protocol in ["h2c", "websocket, h2c", "TLS/1.0"] {
        let head = format!(
            "GET /public HTTP/1.1\r\nHost: app\r\nConnection: Upgrade, close\r\n\
             Upgrade: {protocol}\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
        );
        let answer = raw_exchange(p.proxy, &head).await;
        assert!(
            answer.starts_with("HTTP/1.1 200 OK\r\n"),
            "{protocol}: {answer}"
        );
        assert!(
            answer.ends_with("upgrade=- settings=-"),
            "{protocol}: {answer}"
        );
    }
    // WebSocket still switches; an upstream that answers it by switching to HTTP/2 gets no
    // tunnel: 502.
    let websocket = |path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: app\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
        )
    };
    let answer = first_read(p.proxy, &websocket("/chat")).await;
    assert!(
        answer.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{answer}"
    );
    let answer = first_read(p.proxy, &websocket("/as-h2c")).await;
    assert!(
        answer.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
        "{answer}"
    );
}

#[tokio::test]
async fn an_https_upstream_speaks_the_version_alpn_picks_and_needs_a_trusted_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path(), "");
    let server_tls =
        spillway_server::tls::ServerTls::load(&spillway_server::config::TlsFiles { cert, key })
            .unwrap();
    let upstream = version_upstream(Some(server_tls.acceptor().clone())).await;
    let url = format!("url = \"https://localhost:{}\"", upstream.port());
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    for (protocol, expected) in [
        ("auto", "HTTP/2.0"),
        ("http1", "HTTP/1.1"),
        ("http2", "HTTP/2.0"),
    ] {
        let p = proxy(&routed(
            "",
            &format!(
                "{url}\nprotocol = \"{protocol}\"\nca = \"{}\"",
                ca.display()
            ),
            "",
        ))
        .await;
        let uri: http::Uri = format!("http://{}/x", p.proxy).parse().unwrap();
        let response = step(protocol, client.get(uri)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{protocol}");
        let text = body_text(response).await;
        assert!(text.starts_with(expected), "{protocol}: {text}");
    }
    // Without the CA, the bundled public roots do not trust it: 502.
    let p = proxy(&routed("", &url, "")).await;
    let uri: http::Uri = format!("http://{}/x", p.proxy).parse().unwrap();
    let response = step("untrusted", client.get(uri)).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
}

#[tokio::test(start_paused = true)]
async fn an_idle_http2_connection_is_closed_after_the_header_timeout() {
    let upstream = version_upstream(None).await;
    let p = proxy(&routed(
        "header_timeout = \"5s\"",
        &format!("url = \"http://{upstream}\""),
        "",
    ))
    .await;
    let stream = tokio::net::TcpStream::connect(p.proxy).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    let request = Request::get(format!("http://{}/x", p.proxy))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.version(), Version::HTTP_2);
    assert!(body_text(response).await.starts_with("HTTP/1.1"));
    let answered = tokio::time::Instant::now();
    // Nothing more is asked: the proxy closes the connection once idle for 5 s.
    tokio::time::timeout(Duration::from_secs(3600), connection)
        .await
        .expect("the idle connection stayed open")
        .unwrap()
        .ok();
    assert!(answered.elapsed() >= Duration::from_secs(5));
    let metrics = p.handle.render_metrics().unwrap();
    assert!(
        metrics.contains(r#"spillway_header_timeouts_total{listener="proxy"} 1"#),
        "{metrics}"
    );
}
