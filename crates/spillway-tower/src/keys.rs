//! Reading a request's key for per-key rules ([`spillway::keyed`]): the client's address
//! (through trusted proxies), a query parameter, a segment of the route's path. The layer's
//! [`key_*`](crate::SpillwayLayer::key_header) methods and the `spillway` binary use them.

use http::HeaderMap;
pub use ipnet::IpNet;
use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

mod peer_prefixes;
pub use peer_prefixes::{client_address, PeerIpPrefixes};

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

/// The one header that trusted proxies name the client in. A proxy passes on the headers it
/// does not write, so the header it writes is the only one to trust: the other may be the
/// client's own, forged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For` (nginx's `$proxy_add_x_forwarded_for`, most load balancers).
    #[default]
    XForwardedFor,
    /// `Forwarded`'s `for=` parameters (RFC 7239).
    Forwarded,
}

impl ForwardedHeader {
    /// Its name in a configuration file: `x-forwarded-for` or `forwarded`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::XForwardedFor => "x-forwarded-for",
            Self::Forwarded => "forwarded",
        }
    }

    /// The header named `name` (either spelling's case).
    ///
    /// # Errors
    ///
    /// A message naming what is accepted.
    pub fn parse(name: &str) -> Result<Self, String> {
        if name.eq_ignore_ascii_case("x-forwarded-for") {
            Ok(Self::XForwardedFor)
        } else if name.eq_ignore_ascii_case("forwarded") {
            Ok(Self::Forwarded)
        } else {
            Err(format!(
                "unknown header `{name}`, expected `x-forwarded-for` or `forwarded`"
            ))
        }
    }
}

/// The proxies in front of a service whose forwarding header names the client, that header,
/// and the prefix lengths that make the client's address its key ([`PeerIpPrefixes`]: by
/// default an IPv4 client's address, an IPv6 client's /64).
///
/// # Examples
///
/// ```
/// use spillway_tower::keys::{ForwardedHeader, TrustedProxies};
///
/// let proxies = TrustedProxies::parse(&["10.0.0.0/8".into()])?;
/// let mut headers = http::HeaderMap::new();
/// // The client forged a `Forwarded`; the proxy at 10.0.0.2 appended the client to XFF.
/// headers.insert("forwarded", "for=192.0.2.99".parse().unwrap());
/// headers.insert("x-forwarded-for", "198.51.100.7".parse().unwrap());
/// let client = proxies.client_ip("10.0.0.2".parse().unwrap(), &headers);
/// assert_eq!(client.to_string(), "198.51.100.7");
/// let rfc = proxies.reading(ForwardedHeader::Forwarded);
/// assert_eq!(rfc.client_ip("10.0.0.2".parse().unwrap(), &headers).to_string(), "192.0.2.99");
/// // The client's key: an IPv6 client is keyed by its /64.
/// headers.insert("forwarded", "for=\"[2001:db8:1:2::77]\"".parse().unwrap());
/// assert_eq!(rfc.client_key("10.0.0.2".parse().unwrap(), &headers), "2001:db8:1:2::/64");
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
    header: ForwardedHeader,
    prefixes: PeerIpPrefixes,
}

impl TrustedProxies {
    /// `nets`, naming the client in `X-Forwarded-For`.
    pub fn new(nets: Vec<IpNet>) -> Self {
        Self {
            nets,
            header: ForwardedHeader::default(),
            prefixes: PeerIpPrefixes::default(),
        }
    }

    /// Parses addresses (`127.0.0.1`) or CIDR blocks (`10.0.0.0/8`) ([`trusted_proxies`]).
    ///
    /// # Errors
    ///
    /// The first entry that is neither, named.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        trusted_proxies(entries).map(Self::new)
    }

    /// Reads the client from `header` alone.
    #[must_use]
    pub fn reading(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// The header read.
    pub fn header(&self) -> ForwardedHeader {
        self.header
    }

    /// Keys clients by the networks of `prefixes`' lengths.
    #[must_use]
    pub fn keying(mut self, prefixes: PeerIpPrefixes) -> Self {
        self.prefixes = prefixes;
        self
    }

    /// The prefix lengths clients are keyed by.
    pub fn prefixes(&self) -> PeerIpPrefixes {
        self.prefixes
    }

    /// The client's key: its address ([`client_ip`](Self::client_ip)) as
    /// [`PeerIpPrefixes::key`] writes it.
    pub fn client_key(&self, peer: IpAddr, headers: &HeaderMap) -> String {
        self.prefixes.key(self.client_ip(peer, headers))
    }

    /// Whether none is trusted (the peer is always the client).
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` is one of the trusted proxies.
    ///
    /// ```
    /// use spillway_tower::keys::TrustedProxies;
    ///
    /// let trusted = TrustedProxies::parse(&["10.0.0.0/8".to_owned()]).unwrap();
    /// assert!(trusted.trusts(&"10.1.2.3".parse().unwrap()));
    /// assert!(!trusted.trusts(&"192.0.2.1".parse().unwrap()));
    /// ```
    pub fn trusts(&self, ip: &IpAddr) -> bool {
        self.nets.iter().any(|net| net.contains(ip))
    }

    /// The client's address: the peer's, unless the peer is a trusted proxy; then the nearest
    /// address in the header that is not a trusted proxy, walking from the last hop back.
    /// Only the hops the trusted proxies appended are looked at: an element that is not an
    /// address (`unknown`, an obfuscated name, junk) met before an untrusted address stops the
    /// walk at the last trusted hop; one further back, which only the client can have written,
    /// is never read. Without the header, the peer.
    ///
    /// An IPv4 address written as IPv6 (`::ffff:192.0.2.7`, as a dual-stack socket reports an
    /// IPv4 peer) is the IPv4 address, wherever it comes from: one client, one key.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if self.nets.is_empty() || !self.trusts(&peer) {
            return peer;
        }
        let name = match self.header {
            ForwardedHeader::XForwardedFor => X_FORWARDED_FOR,
            ForwardedHeader::Forwarded => http::header::FORWARDED,
        };
        // Every line of the header, as one list in order, walked from its end.
        let lines: Vec<&http::HeaderValue> = headers.get_all(&name).iter().collect();
        let mut nearest = peer;
        for line in lines.into_iter().rev() {
            // Split before decoding: a byte that is not text in an element the client wrote
            // (`\x80, 203.0.113.9`, as nginx appends to it) must not hide the hop after it.
            // `Forwarded` is split outside its quoted strings (RFC 7239: a `host="a,for=x"`
            // a proxy copied from the client is one value, not a hop).
            let quoted = self.header == ForwardedHeader::Forwarded;
            for element in split_unquoted(line.as_bytes(), b',', quoted)
                .into_iter()
                .rev()
            {
                let Ok(element) = std::str::from_utf8(element) else {
                    return nearest;
                };
                let node = match self.header {
                    ForwardedHeader::XForwardedFor => Some(element.trim()),
                    ForwardedHeader::Forwarded => forwarded_for(element),
                };
                // A `Forwarded` element without `for=` names no hop.
                let Some(node) = node else { continue };
                let Some(ip) = parse_node(node.trim_matches('"')).map(|ip| ip.to_canonical())
                else {
                    return nearest;
                };
                if !self.trusts(&ip) {
                    return ip;
                }
                nearest = ip;
            }
        }
        // Every hop was a trusted proxy: the furthest one.
        nearest
    }
}

const X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");

impl From<Vec<IpNet>> for TrustedProxies {
    fn from(nets: Vec<IpNet>) -> Self {
        Self::new(nets)
    }
}

/// The `for=` value of one `Forwarded` element (RFC 7239), if it has one.
fn forwarded_for(element: &str) -> Option<&str> {
    let pairs = split_unquoted(element.as_bytes(), b';', true);
    pairs.into_iter().find_map(|pair| {
        // Split at ASCII bytes: each part is text.
        let pair = std::str::from_utf8(pair).ok()?;
        let (name, value) = pair.trim().split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then_some(value.trim())
    })
}

/// `bytes` split at each `separator`, outside quoted strings when `quoted` (a `"` opens and
/// closes one, a `\` in one escapes the next byte).
fn split_unquoted(bytes: &[u8], separator: u8, quoted: bool) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let (mut start, mut inside, mut escaped) = (0, false, false);
    for (at, &byte) in bytes.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if inside && byte == b'\\' {
            escaped = true;
        } else if quoted && byte == b'"' {
            inside = !inside;
        } else if byte == separator && !inside {
            parts.push(&bytes[start..at]);
            start = at + 1;
        }
    }
    parts.push(&bytes[start..]);
    parts
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

/// The first value of the query parameter `name`, percent-decoded (`+` as a space); `None` if
/// it is not there or empty (`?user=` names no one).
///
/// # Examples
///
/// ```
/// use spillway_tower::keys::query_value;
///
/// assert_eq!(query_value("a=1&user=al%69ce", "user").as_deref(), Some("alice"));
/// assert_eq!(query_value("user=&a=1", "user"), None);
/// ```
pub fn query_value<'q>(query: &'q str, name: &str) -> Option<Cow<'q, str>> {
    query_values(query, name)
        .next()
        .filter(|value| !value.is_empty())
}

/// Whether the query parameter `name` is given more than once (`?user=a&user=b`): servers
/// differ in which one they read (the first, the last, all), so no one value is the key. Names
/// some server takes for the same count as the same (any case; `.`, `_`, `-` and a space
/// alike), and so do pairs split at `;` (`?a=1;user=b`, or a value holding a `;`), which some
/// servers split as at `&`.
///
/// # Examples
///
/// ```
/// use spillway_tower::keys::query_repeated;
///
/// assert!(query_repeated("user=a&u%73er=b", "user"));
/// assert!(query_repeated("user=a&User=b", "user"));
/// assert!(query_repeated("a=1;user=b", "user"));
/// assert!(!query_repeated("user=a&other=b", "user"));
/// ```
pub fn query_repeated(query: &str, name: &str) -> bool {
    // Names that some servers take for the same parameter count as the same: in any case
    // (ASP.NET), with `.`, `_`, `-` and a space alike (PHP makes `.` and a space `_`), and
    // pairs split at `;` as well as `&` (older Rack and Python).
    let folded = |text: &str| -> String {
        text.chars()
            .map(|c| match c {
                '.' | '-' | ' ' => '_',
                c => c.to_ascii_lowercase(),
            })
            .collect()
    };
    let wanted = folded(name);
    let alike = query
        .split(['&', ';'])
        .filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(key, _)| key);
            folded(&decode(key)) == wanted
        })
        .count();
    // Read as `query_value` reads it: `&` alone, the name exactly. A server splitting at `;`
    // finds another parameter, or another value, if the counts differ or the value holds a
    // `;`.
    let exact: Vec<Cow<'_, str>> = query_values(query, name).collect();
    alike > 1 || alike != exact.len() || exact.iter().any(|value| value.contains(';'))
}

/// The values of the query parameter `name`, in order, percent-decoded.
fn query_values<'q, 'n>(query: &'q str, name: &'n str) -> impl Iterator<Item = Cow<'q, str>> + 'n
where
    'q: 'n,
{
    query.split('&').filter_map(move |pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(key) == name).then(|| decode(value))
    })
}

/// The key that header `name` gives a request: its value, `None` if it has none or an empty
/// one. A value that is not visible ASCII is the key written as a NUL, `bytes:` and the bytes in hex (a
/// form no text takes, so that two such keys stay apart and none is missed). `Host` is read as
/// servers match it: the host name in lower case, without a trailing `.` and without the port
/// (`App.Example.:8080` is `app.example`), so that spellings of one host are one key. When the
/// header is given more than once, the first line is read: see [`header_repeated`].
///
/// # Examples
///
/// ```
/// use http::header::{HeaderMap, HeaderValue, HOST};
/// use spillway_tower::keys::header_value;
///
/// let mut headers = HeaderMap::new();
/// headers.insert(HOST, HeaderValue::from_static("API.Example.com.:443"));
/// headers.insert("x-user-id", HeaderValue::from_static("alice"));
/// assert_eq!(header_value(&headers, &HOST).as_deref(), Some("api.example.com"));
/// assert_eq!(header_value(&headers, &"x-user-id".parse().unwrap()).as_deref(), Some("alice"));
/// ```
pub fn header_value(headers: &HeaderMap, name: &http::HeaderName) -> Option<String> {
    let value = headers.get(name)?;
    if name == http::header::HOST {
        // Every `Host` is a key, an empty one too (the empty name): a host a client can leave
        // out of a limit would let it choose to be unlimited.
        return Some(host_key(value.to_str().unwrap_or_default()));
    }
    if value.is_empty() {
        return None;
    }
    if name == http::header::COOKIE {
        // HTTP/2 sends each cookie as a field of its own (RFC 9113 section 8.2.3): the key is
        // them all, joined as HTTP/1.1 would send them, every byte of them (a line that is not
        // text is not dropped: the key would be the other lines', or empty).
        let lines: Vec<&[u8]> = (headers.get_all(name).iter())
            .map(http::HeaderValue::as_bytes)
            .collect();
        return Some(key_of_bytes(&lines.join(&b"; "[..])));
    }
    Some(key_of_bytes(value.as_bytes()))
}

/// A header value's bytes as a key: the text, or for bytes that are not visible ASCII, a NUL,
/// `bytes:` and the bytes in hex (a form no text takes, so that two such keys stay apart).
fn key_of_bytes(bytes: &[u8]) -> String {
    // Visible ASCII, as `HeaderValue::to_str` reads it (a tab and spaces too).
    let visible = |byte: &u8| *byte == b'\t' || (0x20..0x7f).contains(byte);
    if bytes.iter().all(visible) {
        if let Ok(text) = std::str::from_utf8(bytes) {
            return text.to_owned();
        }
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(7 + 2 * bytes.len());
    text.push_str("\u{0}bytes:");
    for byte in bytes {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    text
}

/// The host name of a `Host` value, as servers match it and as [`header_value`] keys it:
/// lower case, without the port and without a trailing `.` (an IPv6 literal in brackets, in
/// one form).
///
/// # Examples
///
/// ```
/// use spillway_tower::keys::host_key;
///
/// assert_eq!(host_key("API.Example.com.:8443"), "api.example.com");
/// assert_eq!(host_key("[0:0::1]:80"), "[::1]");
/// ```
pub fn host_key(host: &str) -> String {
    if let Some(literal) = host.strip_prefix('[') {
        // An IPv6 literal in one form (`[0:0::1]` is `[::1]`).
        let address = literal.split(']').next().unwrap_or(literal);
        return match address.parse::<std::net::Ipv6Addr>() {
            Ok(address) => format!("[{address}]"),
            Err(_) => format!("[{}]", address.to_ascii_lowercase()),
        };
    }
    let name = host.split(':').next().unwrap_or(host);
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// The key of a request's host, as [`header_value`] reads `Host`: its `Host`, or where it has
/// none (an HTTP/2 request, which names its host in `:authority`), its URI's authority.
pub fn host_value(headers: &HeaderMap, uri: &http::Uri) -> Option<String> {
    if headers.contains_key(http::header::HOST) {
        return header_value(headers, &http::header::HOST);
    }
    uri.authority()
        .map(|authority| host_key(authority.as_str().rsplit('@').next().unwrap_or_default()))
}

/// The key that the layer's [`key_header`](crate::SpillwayLayer::key_header) and
/// [`key_query`](crate::SpillwayLayer::key_query) give every request that states its key more
/// than once: all such requests share one limit. (A NUL first, as no header value has one.)
pub const REPEATED: &str = "\u{0}repeated";

/// Whether header `name` is given on more than one line: servers and frameworks differ in
/// which line they read (the first, the last, all joined), so no one value is the key. The
/// `spillway` binary refuses such a request with 400 where a route reads a key from the header.
///
/// # Examples
///
/// ```
/// use http::header::{HeaderMap, HeaderValue};
/// use spillway_tower::keys::header_repeated;
///
/// let mut headers = HeaderMap::new();
/// headers.append("x-user-id", HeaderValue::from_static("someone"));
/// assert!(!header_repeated(&headers, &"x-user-id".parse().unwrap()));
/// headers.append("x-user-id", HeaderValue::from_static("victim"));
/// assert!(header_repeated(&headers, &"x-user-id".parse().unwrap()));
/// ```
pub fn header_repeated(headers: &HeaderMap, name: &http::HeaderName) -> bool {
    if name == http::header::COOKIE {
        // One field per cookie is how HTTP/2 sends them ([`header_value`] joins them).
        return false;
    }
    // Spellings that CGI, WSGI and Rack read as the same header (`X_User` and `X-User` are
    // both `HTTP_X_USER`) count as the same name.
    let wanted = name.as_str();
    let same = |other: &http::HeaderName| {
        let other = other.as_str();
        other.len() == wanted.len()
            && (other.bytes().zip(wanted.bytes()))
                .all(|(a, b)| a == b || (a, b) == (b'_', b'-') || (a, b) == (b'-', b'_'))
    };
    headers
        .keys()
        .filter(|other| same(other))
        .map(|other| headers.get_all(other).iter().count())
        .sum::<usize>()
        > 1
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
    fn a_header_key_is_its_value_host_its_name_and_empty_none() {
        let headers = |pairs: &[(&str, &str)]| request(pairs).headers().clone();
        let host = http::header::HOST;
        for (spelling, name) in [
            ("V.Example", "v.example"),
            ("v.example.", "v.example"),
            ("v.example:80", "v.example"),
            ("v.example:", "v.example"),
            ("[2001:DB8::1]:8443", "[2001:db8::1]"),
            ("[2001:db8:0:0::1]", "[2001:db8::1]"),
            // An empty host is a key too (one for all such requests), never a missing one.
            ("", ""),
            (":80", ""),
        ] {
            let value = header_value(&headers(&[("host", spelling)]), &host);
            assert_eq!(value.as_deref(), Some(name), "{spelling}");
        }
        let user: http::HeaderName = "x-user".parse().unwrap();
        assert_eq!(header_value(&headers(&[("x-user", "")]), &user), None);
        assert_eq!(header_value(&headers(&[]), &user), None);
        // Other headers keep their case.
        let value = header_value(&headers(&[("x-user", "Alice")]), &user);
        assert_eq!(value.as_deref(), Some("Alice"));
        let mut raw = http::HeaderMap::new();
        raw.insert(&user, http::HeaderValue::from_bytes(b"caf\xe9").unwrap());
        assert_eq!(
            header_value(&raw, &user).as_deref(),
            Some("\u{0}bytes:636166e9")
        );
        assert!(!header_repeated(&headers(&[("x-user", "a")]), &user));
        assert!(header_repeated(
            &headers(&[("x-user", "a"), ("x-user", "b")]),
            &user
        ));
        // `X_User` is `X-User` to CGI, WSGI and Rack.
        assert!(header_repeated(
            &headers(&[("x_user", "a"), ("x-user", "b")]),
            &user
        ));
        // HTTP/2's cookie fields are one key, never "given twice".
        let cookie = http::header::COOKIE;
        let cookies = headers(&[("cookie", "a=1"), ("cookie", "b=2")]);
        assert!(!header_repeated(&cookies, &cookie));
        assert_eq!(header_value(&cookies, &cookie).as_deref(), Some("a=1; b=2"));
        // A cookie that is not text is a key of its own, with every other cookie beside it: not
        // the empty key every such client would share, nor the others' key.
        let mut odd = http::HeaderMap::new();
        odd.insert(
            &cookie,
            http::HeaderValue::from_bytes(b"s=mallory\x80").unwrap(),
        );
        let mallory = header_value(&odd, &cookie).unwrap();
        assert!(mallory.starts_with("\u{0}bytes:"), "{mallory:?}");
        odd.insert(
            &cookie,
            http::HeaderValue::from_bytes(b"s=alice\xe9").unwrap(),
        );
        assert_ne!(header_value(&odd, &cookie).unwrap(), mallory);
        odd.insert(&cookie, http::HeaderValue::from_static("s=carol"));
        odd.append(&cookie, http::HeaderValue::from_bytes(b"x=\x80").unwrap());
        let carol = header_value(&odd, &cookie).unwrap();
        assert_eq!(carol, "\u{0}bytes:733d6361726f6c3b20783d80");
        // Over HTTP/2, the host is the URI's authority.
        let uri: http::Uri = "https://user@API.example.com:443/x".parse().unwrap();
        assert_eq!(
            host_value(&http::HeaderMap::new(), &uri).as_deref(),
            Some("api.example.com")
        );
    }

    #[test]
    fn a_query_key_is_given_twice_in_any_spelling_a_server_merges() {
        for query in [
            "user=a&user=b",
            "user=a&User=b",
            "user.id=a&user_id=b",
            "user id=a&user_id=b",
            "a=1;user=b",
            "user=a;b",
            "user=a&u%73er=b",
        ] {
            let name = if query.contains("id") {
                "user_id"
            } else {
                "user"
            };
            assert!(query_repeated(query, name), "{query}");
        }
        for query in ["user=a", "user=a&users=b", "a=1&b=2", "user=a%2Cb"] {
            assert!(!query_repeated(query, "user"), "{query}");
        }
    }

    #[test]
    fn the_client_is_the_peer_unless_a_trusted_proxy_names_it() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8".into(), "127.0.0.1".into()]).unwrap();
        let rfc = trusted.clone().reading(ForwardedHeader::Forwarded);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let headers = |pairs: &[(&str, &str)]| request(pairs).headers().clone();
        let spoofed = headers(&[("x-forwarded-for", "6.6.6.6")]);
        // An untrusted peer is the client, whatever it claims.
        assert_eq!(trusted.client_ip(ip("8.8.8.8"), &spoofed), ip("8.8.8.8"));
        let none = TrustedProxies::default();
        assert_eq!(none.client_ip(ip("10.1.1.1"), &spoofed), ip("10.1.1.1"));
        // Through trusted proxies: the nearest untrusted hop, not a spoofed first one.
        let chain = headers(&[("x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.0.0.7")]);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &chain), ip("1.2.3.4"));
        let split = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "1.2.3.4:555"),
        ]);
        assert_eq!(trusted.client_ip(ip("127.0.0.1"), &split), ip("1.2.3.4"));
        // Only the header named is read: a forged `Forwarded` is ignored when XFF is trusted,
        // and a forged XFF when `Forwarded` is.
        let both = headers(&[
            (
                "forwarded",
                r#"for="[2001:db8::1]:4711";proto=https, for=10.0.0.9"#,
            ),
            ("x-forwarded-for", "6.6.6.6"),
        ]);
        assert_eq!(rfc.client_ip(ip("10.0.0.1"), &both), ip("2001:db8::1"));
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &both), ip("6.6.6.6"));
        // A quoted value the proxy copied from the client (`host="..."`) holds no hop.
        for host in [
            r#""app;for=6.6.6.1""#,
            r#""app,for=6.6.6.2""#,
            r#""a\"b,for=6.6.6.3""#,
        ] {
            let line = format!("proto=http;host={host};for=203.0.113.9");
            let copied = headers(&[("forwarded", line.as_str())]);
            assert_eq!(
                rfc.client_ip(ip("10.0.0.1"), &copied),
                ip("203.0.113.9"),
                "{line}"
            );
        }
        let forged = headers(&[("forwarded", "for=10.9.9.9")]);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &forged), ip("10.0.0.1"));
        // Junk the client wrote before its address is never read; junk in the hops the
        // proxies wrote stops the walk at the last trusted hop.
        let prefixed = headers(&[("x-forwarded-for", "nonsense, 1.2.3.4")]);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &prefixed), ip("1.2.3.4"));
        let garbage = headers(&[("x-forwarded-for", "1.2.3.4, nonsense, 10.0.0.3")]);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &garbage), ip("10.0.0.3"));
        // Bytes that are not text in what the client wrote, on the line the proxy appended to.
        let mut bytes = request(&[]).headers().clone();
        let line = http::HeaderValue::from_bytes(b"\x80\xff, 1.2.3.4").unwrap();
        bytes.insert("x-forwarded-for", line);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &bytes), ip("1.2.3.4"));
        let line = http::HeaderValue::from_bytes(b"1.2.3.4, \xc3\xa9, 10.0.0.3").unwrap();
        bytes.insert("x-forwarded-for", line);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &bytes), ip("10.0.0.3"));
        let unknown = headers(&[("forwarded", "for=unknown")]);
        assert_eq!(rfc.client_ip(ip("10.0.0.1"), &unknown), ip("10.0.0.1"));
        // IPv4 written as IPv6 is the same client.
        let mapped = headers(&[("x-forwarded-for", "::ffff:1.2.3.4")]);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &mapped), ip("1.2.3.4"));
        assert_eq!(
            trusted.client_ip(ip("::ffff:8.8.8.8"), &spoofed),
            ip("8.8.8.8")
        );
        assert_eq!(
            trusted.client_ip(ip("::ffff:10.0.0.1"), &chain),
            ip("1.2.3.4"),
            "a trusted proxy seen through a dual-stack socket is still trusted"
        );
        // Every hop trusted: the furthest.
        let inside = headers(&[("x-forwarded-for", "10.0.0.5, 10.0.0.6")]);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &inside), ip("10.0.0.5"));
        assert!(trusted_proxies(&["10.0.0.0/33".into()]).is_err());
        assert_eq!(
            ForwardedHeader::parse("Forwarded"),
            Ok(ForwardedHeader::Forwarded)
        );
        assert!(ForwardedHeader::parse("x-real-ip").is_err());
    }

    #[test]
    fn query_values_are_decoded_and_malformed_escapes_kept() {
        assert_eq!(
            query_value("a=1&user=a%20b+c&user=x", "user").as_deref(),
            Some("a b c")
        );
        // An empty value names no one.
        assert_eq!(query_value("flag&user=", "user"), None);
        assert_eq!(query_value("flag", "user"), None);
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode("%C3%A9"), "é");
        assert_eq!(path_segment("/users/{id}/orders", "id"), Some(1));
        assert_eq!(path_segment("/users/{id}", "other"), None);
        assert_eq!(segment("/users/42/orders", 1), Some("42"));
        assert_eq!(segment("/users//orders", 1), None);
    }
}
