//! Reading a request's key for per-key rules ([`spillway::keyed`]): the client's address
//! (through trusted proxies), a query parameter, a segment of the route's path. The layer's
//! [`key_*`](crate::SpillwayLayer::key_header) methods and the `spillway` binary use them.

use http::HeaderMap;
pub use ipnet::IpNet;
use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

/// The peer's address, for keys by client address: put it in each request's extensions
/// (axum's `ConnectInfo<SocketAddr>` is read too, with the `axum` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The segment of `{name}` in the route path `template` (counted after the leading `/`).
pub fn path_segment(template: &str, name: &str) -> Option<usize> {
    let wanted = format!("{{{name}}}");
    template
        .strip_prefix('/')?
        .split('/')
        .position(|segment| segment == wanted)
}

/// The client's address: the peer's, unless the peer is one of `trusted` (proxies), then the last
/// address in `Forwarded` (or, without it, `X-Forwarded-For`) that is not a trusted proxy,
/// walking from the nearest hop back (or the first, if every one is trusted).
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if trusted.is_empty() || !is_trusted(&peer) {
        return peer;
    }
    let mut hops: Vec<IpAddr> = forwarded_for(headers);
    if hops.is_empty() {
        hops = x_forwarded_for(headers);
    }
    hops.iter()
        .rev()
        .find(|ip| !is_trusted(ip))
        .or(hops.first())
        .copied()
        .unwrap_or(peer)
}

/// The `for=` addresses of every `Forwarded` header (RFC 7239), nearest last; an element
/// that is not an address (`unknown`, an obfuscated name) ends the list there.
fn forwarded_for(headers: &HeaderMap) -> Vec<IpAddr> {
    let mut hops = Vec::new();
    for value in headers.get_all(http::header::FORWARDED) {
        let Ok(value) = value.to_str() else {
            return Vec::new();
        };
        for element in value.split(',') {
            let Some(node) = element.split(';').find_map(|pair| {
                let (name, value) = pair.trim().split_once('=')?;
                name.eq_ignore_ascii_case("for").then_some(value.trim())
            }) else {
                continue;
            };
            match parse_node(node.trim_matches('"')) {
                Some(ip) => hops.push(ip),
                None => return Vec::new(),
            }
        }
    }
    hops
}

/// `X-Forwarded-For`'s addresses, nearest last; a malformed element makes it all untrusted.
fn x_forwarded_for(headers: &HeaderMap) -> Vec<IpAddr> {
    let mut hops = Vec::new();
    for value in headers.get_all("x-forwarded-for") {
        let Ok(value) = value.to_str() else {
            return Vec::new();
        };
        for element in value.split(',') {
            match parse_node(element.trim()) {
                Some(ip) => hops.push(ip),
                None => return Vec::new(),
            }
        }
    }
    hops
}

/// An address with or without a port: `1.2.3.4`, `1.2.3.4:80`, `[::1]`, `[::1]:80`, `::1`.
fn parse_node(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = node.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    node.strip_prefix('[')
        .and_then(|rest| rest.split(']').next())
        .and_then(|ip| ip.parse().ok())
}

/// Parses trusted proxies: addresses (`127.0.0.1`) or CIDR blocks (`10.0.0.0/8`).
///
/// # Errors
///
/// The first entry that is neither, named.
pub fn trusted_proxies(entries: &[String]) -> Result<Vec<IpNet>, String> {
    entries
        .iter()
        .map(|entry| {
            entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("`{entry}` is not an address or a CIDR block"))
        })
        .collect()
}

/// The first value of the query parameter `name`, percent-decoded (`+` as a space).
pub fn query_value<'q>(query: &'q str, name: &str) -> Option<Cow<'q, str>> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(key) == name).then(|| decode(value))
    })
}

/// Percent-decodes `text` (`+` as a space); a malformed escape stays as written, and bytes
/// that are not UTF-8 become U+FFFD.
fn decode(text: &str) -> Cow<'_, str> {
    if !text.contains(['%', '+']) {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// The segment at `index` of `path` (counted after its leading `/`), if not empty.
pub fn segment(path: &str, index: usize) -> Option<&str> {
    path.strip_prefix('/')?
        .split('/')
        .nth(index)
        .filter(|segment| !segment.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> http::Request<()> {
        let mut builder = http::Request::get("/");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn the_client_is_the_peer_unless_a_trusted_proxy_names_it() {
        let trusted = trusted_proxies(&["10.0.0.0/8".into(), "127.0.0.1".into()]).unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let headers = |pairs: &[(&str, &str)]| request(pairs).headers().clone();
        let spoofed = headers(&[("x-forwarded-for", "6.6.6.6")]);
        // An untrusted peer is the client, whatever it claims.
        assert_eq!(client_ip(ip("8.8.8.8"), &spoofed, &trusted), ip("8.8.8.8"));
        assert_eq!(client_ip(ip("10.1.1.1"), &spoofed, &[]), ip("10.1.1.1"));
        // Through trusted proxies: the nearest untrusted hop, not a spoofed first one.
        let chain = headers(&[("x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.0.0.7")]);
        assert_eq!(client_ip(ip("10.0.0.1"), &chain, &trusted), ip("1.2.3.4"));
        let split = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "1.2.3.4:555"),
        ]);
        assert_eq!(client_ip(ip("127.0.0.1"), &split, &trusted), ip("1.2.3.4"));
        // `Forwarded` first, IPv6 in quotes and brackets.
        let forwarded = headers(&[
            (
                "forwarded",
                r#"for="[2001:db8::1]:4711";proto=https, for=10.0.0.9"#,
            ),
            ("x-forwarded-for", "6.6.6.6"),
        ]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &forwarded, &trusted),
            ip("2001:db8::1")
        );
        // A malformed list is not believed.
        let garbage = headers(&[("x-forwarded-for", "1.2.3.4, nonsense")]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &garbage, &trusted),
            ip("10.0.0.1")
        );
        assert!(trusted_proxies(&["10.0.0.0/33".into()]).is_err());
    }

    #[test]
    fn query_values_are_decoded_and_malformed_escapes_kept() {
        assert_eq!(
            query_value("a=1&user=a%20b+c&user=x", "user").as_deref(),
            Some("a b c")
        );
        assert_eq!(query_value("flag&user=", "user").as_deref(), Some(""));
        assert_eq!(query_value("flag", "user"), None);
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode("%C3%A9"), "é");
        assert_eq!(path_segment("/users/{id}/orders", "id"), Some(1));
        assert_eq!(path_segment("/users/{id}", "other"), None);
        assert_eq!(segment("/users/42/orders", 1), Some("42"));
        assert_eq!(segment("/users//orders", 1), None);
    }
}
