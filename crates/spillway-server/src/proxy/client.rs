//! The proxy's clients of one upstream: its base URL, and a connection pool speaking the HTTP
//! version it is configured for, in cleartext or over TLS.

use super::pool::Pool;
use crate::config::{self, UpstreamProtocol};
use http::uri::{self, PathAndQuery};
use http::Uri;
use hyper_rustls::HttpsConnectorBuilder;
use hyper_util::client::legacy::connect::HttpConnector;

/// One upstream, ready to take requests.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// Its base URL (without a final `/`).
    pub(crate) uri: Uri,
    /// Its pool, for requests.
    pub(crate) client: Pool,
    /// A pool speaking HTTP/1.1 only, for upgrades (WebSocket): none if the upstream speaks
    /// HTTP/2 only.
    pub(crate) upgrades: Option<Pool>,
}

impl Upstream {
    /// The URI of `path` (a request's path and query, in normal form) at this upstream: its
    /// path appended to the upstream's base path. None if the two do not make a URI.
    pub(crate) fn uri_for(&self, path: Option<&PathAndQuery>) -> Option<Uri> {
        let mut parts = uri::Parts::default();
        parts.scheme = self.uri.scheme().cloned();
        parts.authority = self.uri.authority().cloned();
        let base = self.uri.path().trim_end_matches('/');
        parts.path_and_query = Some(match path {
            // The common case: the request's own, shared, not copied.
            Some(path) if base.is_empty() => path.clone(),
            Some(path) => format!("{base}{path}").parse().ok()?,
            None if base.is_empty() => PathAndQuery::from_static("/"),
            None => format!("{base}/").parse().ok()?,
        });
        Uri::from_parts(parts).ok()
    }

    /// The clients of `upstream` (a checked one: its URL parses), for `workers` threads.
    ///
    /// # Errors
    ///
    /// Its `ca` file cannot be read or holds no good certificate.
    pub(crate) fn new(
        upstream: &config::Upstream,
        workers: std::num::NonZeroUsize,
    ) -> Result<Self, String> {
        let uri: Uri = upstream
            .url
            .trim_end_matches('/')
            .parse()
            .map_err(|err| format!("`{}`: {err}", upstream.url))?;
        let tls = crate::tls::client_config(upstream.ca.as_deref())?;
        let client = pool(tls.clone(), &uri, upstream.protocol, workers);
        let upgrades = match upstream.protocol {
            UpstreamProtocol::Http2 => None,
            // Its own connections: an upgraded one leaves the pool, and over TLS with `auto`,
            // ALPN may pick HTTP/2 for the main pool, where no upgrade exists.
            UpstreamProtocol::Http1 | UpstreamProtocol::Auto => {
                Some(pool(tls, &uri, UpstreamProtocol::Http1, workers))
            }
        };
        Ok(Self {
            uri,
            client,
            upgrades,
        })
    }
}

/// A pool for `protocol`: ALPN offers what it allows, and HTTP/2 alone is spoken with prior
/// knowledge in cleartext.
fn pool(
    tls: rustls::ClientConfig,
    uri: &Uri,
    protocol: UpstreamProtocol,
    workers: std::num::NonZeroUsize,
) -> Pool {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let connector = match protocol {
        UpstreamProtocol::Auto => builder.enable_all_versions().wrap_connector(http),
        UpstreamProtocol::Http1 => builder.enable_http1().wrap_connector(http),
        UpstreamProtocol::Http2 => builder.enable_http2().wrap_connector(http),
    };
    Pool::new(connector, uri, protocol, workers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(url: &str) -> Upstream {
        Upstream::new(
            &config::Upstream {
                name: "app".to_owned(),
                url: url.to_owned(),
                protocol: UpstreamProtocol::Auto,
                ca: None,
            },
            std::num::NonZeroUsize::MIN,
        )
        .unwrap()
    }

    fn uri_for(upstream: &Upstream, path: Option<&str>) -> String {
        let path = path.map(|path| path.parse::<PathAndQuery>().unwrap());
        upstream.uri_for(path.as_ref()).unwrap().to_string()
    }

    #[test]
    fn a_request_path_is_appended_to_the_upstream_base_path() {
        let bare = upstream("http://127.0.0.1:8081");
        assert_eq!(
            uri_for(&bare, Some("/api/x?a=1&b")),
            "http://127.0.0.1:8081/api/x?a=1&b"
        );
        assert_eq!(uri_for(&bare, None), "http://127.0.0.1:8081/");
        let slash = upstream("https://backend.example/");
        assert_eq!(uri_for(&slash, Some("/x")), "https://backend.example/x");
        let based = upstream("http://10.0.0.1:9000/v2/");
        assert_eq!(
            uri_for(&based, Some("/orders?id=7")),
            "http://10.0.0.1:9000/v2/orders?id=7"
        );
        assert_eq!(uri_for(&based, None), "http://10.0.0.1:9000/v2/");
    }
}
