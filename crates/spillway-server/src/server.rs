//! `spillway serve`: the proxy's listener and connections (HTTP/1.1 and HTTP/2, in cleartext
//! or over TLS), with graceful shutdown.

use crate::config::{Config, MaxConnections};
use crate::conn;
use crate::descriptors::Descriptors;
use crate::proxy::Proxy;
use spillway_tower::LimitedListener;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

/// Loads every kind of rule `config` (checked) gives into the proxy's spillway, the cluster
/// rules with leases (inside the runtime: a new cluster rule starts a task), and has the
/// proxy's metrics read every kind's.
///
/// # Errors
///
/// A rule the spillway refuses (a checked configuration has none).
pub fn apply_rules(proxy: &Proxy, config: &Config) -> Result<(), String> {
    crate::kinds::apply_configured(proxy, config)
}

/// The cap on the proxy's connections that `setting` gives in this process, and the cap on
/// the process's upstream connections set from what it leaves; a number above what the
/// open-file limit leaves room for is warned of.
fn max_connections(setting: MaxConnections) -> io::Result<usize> {
    let files = Descriptors::now();
    let cap = setting
        .resolve(files)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
    let upstreams = files.room_for_upstreams(cap).unwrap_or(0);
    crate::descriptors::set_upstream_cap(upstreams);
    if let Some(room) = setting.above_room(files) {
        tracing::warn!(
            max_connections = cap,
            room,
            open_file_limit = files.limit,
            "listener.max_connections is above what the open-file limit leaves room for: out \
             of descriptors, requests fail with 502 and the admin API cannot accept"
        );
    }
    Ok(cap)
}

/// A bound proxy, ready to run.
#[derive(Debug)]
pub struct Server {
    listener: LimitedListener,
    proxy: Proxy,
    limits: conn::Limits,
}

impl Server {
    /// Binds the proxy's listener for `config` (already checked) and loads its rules into
    /// `spillway`.
    ///
    /// # Errors
    ///
    /// If the address cannot be bound; with [`std::io::ErrorKind::InvalidInput`], if the
    /// routes or rules are invalid, or if `max_connections = "auto"` and the open-file limit
    /// leaves no room for connections.
    pub async fn bind(config: &Config, spillway: spillway::Spillway) -> io::Result<Self> {
        let proxy = Proxy::new(config, spillway)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
        apply_rules(&proxy, config)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
        // Cluster rules learn the fleet's state before the first request.
        if let Some(cluster) = &config.cluster {
            let within = cluster.get_ref().startup_wait;
            proxy.cluster_limits().until_started(within).await;
        }
        let cap = max_connections(config.listener.max_connections)?;
        let listener = tokio::net::TcpListener::bind(config.listener.listen).await?;
        let listener = LimitedListener::new(listener, cap).at_capacity(config.listener.at_capacity);
        proxy
            .listener_counts()
            .set_accepts(Arc::new(listener.limit()));
        let per_client = config.listener.max_connections_per_client.resolve(cap);
        let prefixes = (config.listener.peer_ip_prefixes())
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
        proxy
            .listener_counts()
            .set_clients(crate::per_client::ClientConnections::new(
                per_client, prefixes,
            ));
        Ok(Self {
            listener,
            proxy,
            limits: conn::Limits {
                header_timeout: config.listener.header_timeout,
                max_header_size: config.listener.max_header_size,
                send_timeout: config.listener.send_timeout,
            },
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

    /// The most connections the proxy holds open at once (0: no cap), as
    /// `listener.max_connections` and the open-file limit set it.
    pub fn max_connections(&self) -> usize {
        self.listener.limit().state().max
    }

    /// The proxy (for reloading its routes).
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// Serves on the calling runtime until `shutdown` completes, then stops accepting and
    /// waits for the requests in flight to finish (graceful shutdown).
    ///
    /// Accept errors (out of file descriptors) do not stop it: it pauses, logs and counts
    /// them, and goes on accepting once it can.
    ///
    /// # Errors
    ///
    /// None today; the `Result` is kept for errors a future listener may not recover from.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        // One worker for the probes: this runtime, beating while it serves.
        let health = self.proxy.health().clone();
        let beat = health.expect_workers(1).remove(0);
        health.beat(&beat);
        let beating = tokio::spawn(health.clone().beat_forever(beat.clone()));
        let arrivals = crate::serve::Arrivals::Alone(self.listener);
        crate::serve::serve(arrivals, self.proxy, self.limits, shutdown).await;
        beating.abort();
        health.end(&beat);
        Ok(())
    }

    /// Serves on `workers` threads of its own, each with a single-threaded runtime that
    /// accepts from the listening socket and serves its connections to the end with its own
    /// upstream connections, as nginx's worker processes do; the cap on connections counts
    /// those of all. Until `shutdown` completes, then each stops accepting and drains as
    /// [`run`](Self::run) does. Dropped before that, it stops the workers at once, cutting
    /// the requests in flight.
    ///
    /// # Errors
    ///
    /// A worker thread or its runtime cannot be started (nothing is served then).
    pub async fn run_on_workers(
        self,
        workers: std::num::NonZeroUsize,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        crate::workers::run(workers, self.listener, self.proxy, self.limits, shutdown).await
    }
}
