//! The configuration file: routes to upstreams and resources, and every rule type, in TOML.
//!
//! Parsing keeps the byte span of every rule and route, so that an error names the file, the
//! line and the field (see [`ConfigError`]). A file is read and checked whole, its rules by
//! their kinds, by [`crate::checked`].

mod access_log;
mod auto_or_count;
mod claims;
mod cluster;
mod error;
mod file;
mod keyed;
mod log;
mod max_connections;
mod per_client;
mod read;
mod typed;
mod validate;
mod warnings;

pub use access_log::{AccessLogConfig, MAX_LOGGED_HEADERS};
pub use claims::{CriticalityConfig, CriticalityRule, DeadlineConfig, TenantConfig};
pub use cluster::{ClusterConfig, ClusterKind, ClusterMode, ClusterRuleConfig, FallbackPolicy};
pub use error::{ConfigError, Problem};
pub use file::{
    ActivesLimit, AdminConfig, BlockedResponse, Config, DefaultRoute, ListenerConfig, Route,
    TlsFiles, TpsLimit, Upstream, UpstreamProtocol, Workers, DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_RESOURCES, DEFAULT_WINDOW, MAX_MAX_HEADER_SIZE, MAX_WORKERS, MIN_MAX_HEADER_SIZE,
};
pub use keyed::{KeyedConfig, OnMissing};
pub use log::{LogConfig, LogFormat};
pub use max_connections::MaxConnections;
pub use per_client::MaxPerClient;
pub use read::{read, MAX_FILE_BYTES};
pub use validate::{admin_token, MAX_PROBLEMS};
pub(crate) use validate::{parse_with, Check};
pub use warnings::warnings;
