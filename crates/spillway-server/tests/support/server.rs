//! The server in this process, as the admin tests drive it: `spillway serve` on a file of its
//! own, its admin API with a token, and requests to either.

#![allow(dead_code)] // each test file uses what it needs

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use spillway_server::admin::{self, Admin};
use spillway_server::reload::Reloader;
use spillway_server::Server;
use spillway_server::{checked, config};
use std::net::SocketAddr;
use std::path::PathBuf;

pub(crate) const TOKEN: &str = "s3cret";

/// `spillway serve` in this process (no admin API), serving until [`shutdown`](Self::shutdown)
/// or until dropped.
pub(crate) struct Served {
    pub(crate) proxy: SocketAddr,
    pub(crate) handle: spillway_server::Proxy,
    pub(crate) spillway: spillway::Spillway,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serving: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Served {
    /// For the configuration `text`, its spillway on tokio's clock (in a paused test, no
    /// window rolls over between two requests).
    pub(crate) async fn start(text: &str) -> Served {
        let config = checked::parse(text, "test.toml").unwrap();
        Self::with(&config, tokio_clocked(), None).await
    }

    /// For `config` with `spillway`, on `workers` worker threads of their own (`None`: on the
    /// test's runtime).
    pub(crate) async fn with(
        config: &config::Config,
        spillway: spillway::Spillway,
        workers: Option<std::num::NonZeroUsize>,
    ) -> Served {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = async {
            let _ = stopped.await;
        };
        let mut served = Self::until(config, spillway, workers, stopped).await;
        served.stop = Some(stop);
        served
    }

    /// For `config` on tokio's clock, serving until the test's runtime ends (dropped, too).
    pub(crate) async fn for_ever(config: &config::Config) -> Served {
        Self::until(config, tokio_clocked(), None, std::future::pending()).await
    }

    async fn until(
        config: &config::Config,
        spillway: spillway::Spillway,
        workers: Option<std::num::NonZeroUsize>,
        stopped: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Served {
        let server = Server::bind(config, spillway.clone()).await.unwrap();
        let proxy = server.local_addr().unwrap();
        let handle = server.proxy().clone();
        let serving = match workers {
            None => tokio::spawn(server.run(stopped)),
            Some(workers) => tokio::spawn(server.run_on_workers(workers, stopped)),
        };
        Served {
            proxy,
            handle,
            spillway,
            stop: None,
            serving: Some(serving),
        }
    }

    /// Stops it as SIGTERM does (draining what is in flight) and waits until it has.
    pub(crate) async fn shutdown(mut self) {
        self.stop();
        self.finished().await;
    }

    /// Tells it to stop as SIGTERM does: it drains what is in flight.
    pub(crate) fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Whether it has stopped serving.
    pub(crate) fn is_finished(&self) -> bool {
        self.serving
            .as_ref()
            .is_none_or(|serving| serving.is_finished())
    }

    /// Waits until it has stopped, and says it stopped cleanly.
    pub(crate) async fn finished(&mut self) {
        if let Some(serving) = self.serving.take() {
            serving.await.unwrap().unwrap();
        }
    }

    /// Drops it at once, as a crash would: whatever is in flight is cut.
    pub(crate) fn abort(&self) {
        if let Some(serving) = &self.serving {
            serving.abort();
        }
    }
}

/// A spillway on tokio's clock.
pub(crate) fn tokio_clocked() -> spillway::Spillway {
    spillway::Spillway::new_with_clock(spillway_tower::TokioClock::new())
}

pub(crate) struct Harness {
    pub(crate) proxy: SocketAddr,
    pub(crate) admin: SocketAddr,
    pub(crate) file: PathBuf,
    pub(crate) reloader: std::sync::Arc<Reloader>,
    pub(crate) handle: spillway_server::Proxy,
    /// Serving until the test's runtime ends.
    _served: Served,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// `spillway serve` in this process for the configuration `text` (written to a file the
    /// reloader and `?persist=true` use), with its admin API (token [`TOKEN`]) on a loopback
    /// port of its own. Its spillway is on tokio's clock: in a paused test, no window rolls
    /// over in the middle of it.
    pub(crate) async fn start(text: &str) -> Harness {
        Self::start_with(text, |admin| admin).await
    }

    /// As [`start`](Self::start), with the admin API as `admin` makes it (a history, say).
    pub(crate) async fn start_with(text: &str, admin: impl FnOnce(Admin) -> Admin) -> Harness {
        Self::start_as(text, Some(TOKEN), admin).await
    }

    /// As [`start_with`](Self::start_with), the admin API's token `token` (`None`: none).
    pub(crate) async fn start_as(
        text: &str,
        token: Option<&str>,
        admin: impl FnOnce(Admin) -> Admin,
    ) -> Harness {
        let adjust = admin;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("spillway.toml");
        std::fs::write(&file, text).unwrap();
        let config = checked::load(&file).unwrap();
        let served = Served::for_ever(&config).await;
        let handle = served.handle.clone();
        let reloader = Reloader::new(file.clone(), config, handle.clone());
        let admin_listener = admin::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let admin = admin_listener.local_addr().unwrap();
        let api = adjust(Admin::new(
            handle.clone(),
            Some(reloader.clone()),
            token.map(str::to_owned),
        ));
        tokio::spawn(api.run(admin_listener, std::future::pending()));
        Harness {
            proxy: served.proxy,
            admin,
            file,
            reloader,
            handle,
            _served: served,
            _dir: dir,
        }
    }
}

/// A request as a script would send it: a write declares its JSON body.
pub(crate) async fn call(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Bytes,
) -> (StatusCode, String) {
    let json: &[(&str, &str)] = if method == Method::GET || method == Method::HEAD {
        &[]
    } else {
        &[("content-type", "application/json")]
    };
    call_with(addr, method, path, token, json, body).await
}

/// A request with exactly the headers given (and the token, if any).
pub(crate) async fn call_with(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Bytes,
) -> (StatusCode, String) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Full::new(body)).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A read, with the token (every admin request needs it when one is configured).
pub(crate) async fn get(addr: SocketAddr, path: &str) -> (StatusCode, String) {
    call(addr, Method::GET, path, Some(TOKEN), Bytes::new()).await
}

pub(crate) async fn put_rules(
    h: &Harness,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, String) {
    call(
        h.admin,
        Method::PUT,
        "/api/rules",
        token,
        Bytes::from(body.to_owned()),
    )
    .await
}

pub(crate) fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}
