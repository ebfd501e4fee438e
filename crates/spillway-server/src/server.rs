//! `spillway serve`: the proxy's listener and connections, with graceful shutdown.

use crate::config::Config;
use crate::conn;
use crate::proxy::Proxy;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use spillway_tower::LimitedListener;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;

/// Loads the rules of `config` into `spillway`.
///
/// # Errors
///
/// A rule the spillway refuses (a checked configuration has none).
pub fn apply_rules(
    spillway: &spillway::Spillway,
    config: &Config,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    spillway.load_flow_rules(config.flow.iter().map(|r| r.get_ref().clone()).collect())?;
    spillway.load_system_rules(config.system.iter().map(|r| r.get_ref().clone()).collect())?;
    spillway.load_breaker_rules(
        config
            .breakers
            .iter()
            .map(|r| r.get_ref().clone())
            .collect(),
    )?;
    // An adaptive rule that stays the same keeps its limiter (its limit and estimates).
    spillway.load_adaptive_rules(
        config
            .adaptive
            .iter()
            .map(|r| r.get_ref().clone())
            .collect(),
    )?;
    Ok(())
}

/// A bound proxy, ready to run.
#[derive(Debug)]
pub struct Server {
    listener: LimitedListener,
    proxy: Proxy,
    header_timeout: std::time::Duration,
}

impl Server {
    /// Binds the proxy's listener for `config` (already checked) and loads its rules into
    /// `spillway`.
    ///
    /// # Errors
    ///
    /// If the address cannot be bound.
    pub async fn bind(config: &Config, spillway: spillway::Spillway) -> io::Result<Self> {
        apply_rules(&spillway, config)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
        let listener = tokio::net::TcpListener::bind(config.listener.listen).await?;
        let listener = LimitedListener::new(listener, config.listener.max_connections)
            .at_capacity(config.listener.at_capacity);
        Ok(Self {
            listener,
            proxy: Proxy::new(config, spillway),
            header_timeout: config.listener.header_timeout,
        })
    }

    /// The address the proxy listens on.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpListener::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The proxy (for reloading its routes).
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// Serves until `shutdown` completes, then stops accepting and waits for the requests in
    /// flight to finish (graceful shutdown).
    ///
    /// Accept errors (out of file descriptors) do not stop it: it pauses, logs and counts
    /// them, and goes on accepting once it can.
    ///
    /// # Errors
    ///
    /// None today; the `Result` is kept for errors a future listener may not recover from.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        // hyper-util's: each connection is watched; at shutdown, each finishes the request in
        // flight and closes, and `shutdown` completes once all have.
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut shutdown = std::pin::pin!(shutdown);
        let counts = self.proxy.listener_counts().clone();
        let builder = conn::http1_builder(self.header_timeout);
        loop {
            let accept = conn::accept_with_backoff("proxy", &counts, || self.listener.accept());
            let (stream, peer) = tokio::select! {
                accepted = accept => accepted,
                () = &mut shutdown => break,
            };
            conn::prepare(stream.get_ref(), peer);
            let (proxy, counts) = (self.proxy.clone(), counts.clone());
            let service = service_fn(move |request| {
                let proxy = proxy.clone();
                async move { Ok::<_, Infallible>(proxy.handle(request, peer).await) }
            });
            let connection =
                graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move { conn::ended(&counts, peer, connection.await) });
        }
        // New connections are refused at once while the ones open drain.
        drop(self.listener);
        graceful.shutdown().await;
        Ok(())
    }
}
