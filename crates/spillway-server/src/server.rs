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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{watch, Notify};

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
        let (stop_tx, stop_rx) = watch::channel(false);
        let open = Arc::new((AtomicUsize::new(0), Notify::new()));
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
            let (proxy, counts, builder) = (self.proxy.clone(), counts.clone(), builder.clone());
            let mut stop = stop_rx.clone();
            let open = open.clone();
            open.0.fetch_add(1, Ordering::AcqRel);
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let proxy = proxy.clone();
                    async move { Ok::<_, Infallible>(proxy.handle(request, peer).await) }
                });
                let connection = builder.serve_connection(TokioIo::new(stream), service);
                let mut connection = std::pin::pin!(connection);
                tokio::select! {
                    result = connection.as_mut() => conn::ended(&counts, peer, result),
                    () = stopped(&mut stop) => {
                        // Finish the request in flight, then close.
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.as_mut().await;
                    }
                }
                if open.0.fetch_sub(1, Ordering::AcqRel) == 1 {
                    open.1.notify_waiters();
                }
            });
        }
        // New connections are refused at once while the ones open drain.
        drop(self.listener);
        let _ = stop_tx.send(true);
        loop {
            let mut drained = std::pin::pin!(open.1.notified());
            // Registered before the check, so the last connection's notice is not missed.
            drained.as_mut().enable();
            if open.0.load(Ordering::Acquire) == 0 {
                break;
            }
            drained.await;
        }
        Ok(())
    }
}

/// Completes when the server is told to stop.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error means the server is gone: stop too.
    let _ = stop.wait_for(|stop| *stop).await;
}
