//! `[criticality]`, `[tenant]` and `[deadline]`: what each request claims in an adaptive
//! limit's queue (how much it matters, whose it is, how long it has left), and where the proxy
//! reads it.

use serde::{Deserialize, Serialize};
use spillway::Criticality;
use std::time::Duration;

/// `[criticality]`: how critical each request is. The first that gives one wins: the trusted
/// `header`, the first `[[criticality.rule]]` that matches, the route's `criticality`, then
/// `default`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CriticalityConfig {
    /// A header that names the criticality (`sheddable`, `sheddable_plus`, `critical`,
    /// `critical_plus`, in any case, with `-` or `_`): set by a gateway you trust, since a client could
    /// raise its own requests with it. Of several values the lowest counts; a value that names
    /// no criticality is ignored.
    #[serde(default)]
    pub header: Option<String>,
    /// The criticality of a request nothing else classifies (default `critical`).
    #[serde(default)]
    pub default: Criticality,
    /// Rules by resource, method and key, tried in file order.
    #[serde(default, rename = "rule")]
    pub rules: Vec<toml::Spanned<CriticalityRule>>,
}

/// `[[criticality.rule]]`: requests that match every condition it gives get `class`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CriticalityRule {
    /// The criticality they get.
    pub class: Criticality,
    /// Only requests to this resource (unset: any).
    #[serde(default)]
    pub resource: Option<String>,
    /// Only requests with one of these methods (empty: any).
    #[serde(default)]
    pub methods: Vec<String>,
    /// Only requests whose key here (`peer_ip`, `header:NAME`, `query:NAME`, `path:NAME`, as
    /// `[[keyed]]` reads them) is one of `values`.
    #[serde(default)]
    pub key: Option<String>,
    /// The values of `key` that match (exactly).
    #[serde(default)]
    pub values: Vec<String>,
}

/// `[tenant]`: whose each request is, so that within a criticality an adaptive limit's queue
/// gives its turns to tenants in proportion.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Where the tenant is read: `peer_ip`, `header:NAME`, `query:NAME` or `path:NAME`.
    pub key: String,
}

/// `[deadline]`: how long each request has left. The first that gives one wins: gRPC's
/// `grpc-timeout`, `header`, the route's `deadline`, then `default`; `max` caps them all.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeadlineConfig {
    /// Read (and rewrite) a gRPC request's `grpc-timeout` (default true; without this section,
    /// only on routes with their own `deadline`).
    #[serde(default = "yes")]
    pub grpc: bool,
    /// A header with the milliseconds left (1 to 12 digits; anything else is ignored).
    #[serde(default)]
    pub header: Option<String>,
    /// The deadline of a request that gives none and whose route sets none (unset: none).
    #[serde(default, with = "humantime_serde")]
    pub default: Option<Duration>,
    /// The longest deadline a request may claim (unset: no cap).
    #[serde(default, with = "humantime_serde")]
    pub max: Option<Duration>,
}

fn yes() -> bool {
    true
}

impl Default for DeadlineConfig {
    fn default() -> Self {
        Self {
            grpc: true,
            header: None,
            default: None,
            max: None,
        }
    }
}
