//! The `spillway` binary's library: a reverse proxy that puts any HTTP service behind
//! spillway's limits, configured by one TOML file.
//!
//! - [`config`]: the file, checked with errors that name the file, line and field;
//! - [`Server`]: the proxy (routes to resources and upstreams, Dubbo limits per route,
//!   spillway's flow, system and breaker rules, the connection cap, graceful shutdown);
//! - [`admin`]: the admin API (statistics, rules, status, metrics);
//! - [`reload`]: hot reload of the file;
//! - [`demo`]: an upstream, the proxy and a load generator in one process;
//! - [`lab`]: the overload lab (`spillway lab`): the simulated lab and a real one on loopback;
//! - [`descriptors`]: the open-file limit, and the connections it leaves room for;
//! - [`upstream`]: an upstream with a known capacity, for the demo and the lab.

mod access_log;
pub mod admin;
mod audit;
mod calendar;
pub mod checked;
mod claims;
mod cluster;
pub mod config;
mod config_state;
mod conn;
pub mod demo;
pub mod descriptors;
pub mod feed;
mod file_stamp;
mod freed_memory;
pub mod health;
pub mod history;
mod idle;
mod keyed;
mod kinds;
pub mod lab;
mod log_sampled;
mod metrics;
mod per_client;
mod persist;
mod proxy;
mod read_headers;
pub mod reload;
pub mod replay;
mod router;
mod second;
mod send_timed;
mod serve;
mod server;
pub mod tls;
mod transitions;
mod troubles;
mod unix_time;
pub mod upstream;
mod workers;

pub use cluster::ClusterLimits;
pub use proxy::{normalize_path, PathError, Peer, Prepared, Proxy, ProxyBody};
pub use router::{Pattern, Router};
pub use server::{apply_rules, Server};
