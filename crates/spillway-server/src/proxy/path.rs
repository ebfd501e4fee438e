//! Request paths in one normal form, before routing and forwarding: otherwise `//api/x`,
//! `/x/../api/x` and `/%61pi/x` would miss a route on `/api` (and its limits) while the upstream
//! serves each as `/api/x`.

use http::{Request, Uri};
use std::borrow::Cow;
use std::fmt;

/// Why a request path is refused (the proxy answers 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Not an absolute path (`*`, or no leading `/`).
    NotAbsolute,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// An encoded `/` or `\` (`%2F`, `%5C`): upstreams disagree on whether it separates
    /// segments, so a route cannot be matched safely.
    EscapedSlash,
    /// A backslash, which some servers take for a `/`.
    Backslash,
    /// An encoded NUL (`%00`).
    Nul,
    /// An encoded `;` (`%3B`): a server that decodes it before it drops a segment's
    /// parameters reads parameters (or `..;`) the proxy did not see.
    EscapedSemicolon,
    /// A `.` or `..` segment with parameters (`/x/..;/y`): Tomcat and Spring drop the
    /// parameters and climb, most other servers take it for a name, so a route cannot be
    /// matched safely.
    DotParameters,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathError::NotAbsolute => "the path must start with /",
            PathError::BadEscape => "a % in the path is not followed by two hex digits",
            PathError::EscapedSlash => "the path holds an encoded / or \\ (%2F, %5C)",
            PathError::Backslash => "the path holds a \\",
            PathError::Nul => "the path holds an encoded NUL (%00)",
            PathError::EscapedSemicolon => "the path holds an encoded ; (%3B)",
            PathError::DotParameters => {
                "the path holds a . or .. segment with parameters (such as ..;)"
            }
        })
    }
}

/// RFC 3986's unreserved characters: an escape of one means the character itself.
fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

fn hex(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Whether `path` is already in normal form: the common case, checked without allocating.
fn is_normal(path: &str) -> bool {
    // One pass: no escape, no backslash, and after each `/` neither another `/` nor a `.`
    // or `..` segment.
    let bytes = path.as_bytes();
    for (at, byte) in bytes.iter().enumerate() {
        match byte {
            b'%' | b'\\' => return false,
            b'/' => match &bytes[at + 1..] {
                [b'/', ..] | [b'.'] | [b'.', b'/', ..] | [b'.', b'.'] | [b'.', b'.', b'/', ..] => {
                    return false
                }
                _ => {}
            },
            _ => {}
        }
    }
    true
}

/// The normal form of a request path (without its query): escapes of unreserved characters
/// decoded (`%61` is `a`) and every other escape in upper case (`%2f` would be `%2F`, but is
/// refused), runs of `/` merged into one, and `.` and `..` segments removed as RFC 3986
/// (section 5.2.4) removes them, never above the root. A trailing `/` is kept.
///
/// # Errors
///
/// A [`PathError`] for a path that cannot be routed safely.
///
/// # Examples
///
/// ```
/// use spillway_server::normalize_path;
///
/// assert_eq!(normalize_path("/api/x").unwrap(), "/api/x");
/// assert_eq!(normalize_path("//api//x").unwrap(), "/api/x");
/// assert_eq!(normalize_path("/x/../api/./x").unwrap(), "/api/x");
/// assert_eq!(normalize_path("/%61pi/%7e%E2%82%ac").unwrap(), "/api/~%E2%82%AC");
/// assert!(normalize_path("/api%2Fx").is_err());
/// ```
pub fn normalize_path(path: &str) -> Result<Cow<'_, str>, PathError> {
    let normal = normal_form(path)?;
    // Checked on the normal form, where `%2e%2e;` is already `..;`.
    let dotted = |segment: &str| {
        segment
            .split_once(';')
            .is_some_and(|(name, _)| name == "." || name == "..")
    };
    if normal.contains(';') && normal.split('/').any(dotted) {
        return Err(PathError::DotParameters);
    }
    Ok(normal)
}

/// [`normalize_path`] but for its refusal of dotted segments with parameters.
fn normal_form(path: &str) -> Result<Cow<'_, str>, PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if is_normal(path) {
        return Ok(Cow::Borrowed(path));
    }
    // Decode the escapes of unreserved characters, upper-case the others.
    let bytes = path.as_bytes();
    let mut decoded = String::with_capacity(path.len());
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        match byte {
            b'%' => {
                let (Some(high), Some(low)) = (
                    bytes.get(at + 1).copied().and_then(hex),
                    bytes.get(at + 2).copied().and_then(hex),
                ) else {
                    return Err(PathError::BadEscape);
                };
                let value = high << 4 | low;
                match value {
                    b'/' | b'\\' => return Err(PathError::EscapedSlash),
                    b';' => return Err(PathError::EscapedSemicolon),
                    0 => return Err(PathError::Nul),
                    value if unreserved(value) => decoded.push(char::from(value)),
                    value => {
                        decoded.push('%');
                        decoded.push_str(&format!("{value:02X}"));
                    }
                }
                at += 3;
            }
            b'\\' => return Err(PathError::Backslash),
            _ => {
                // Bytes up to the next escape, copied whole (the path is valid UTF-8, and a
                // `%` or `\` is never inside a multi-byte character).
                let end = bytes[at..]
                    .iter()
                    .position(|b| matches!(b, b'%' | b'\\'))
                    .map_or(bytes.len(), |offset| at + offset);
                decoded.push_str(&path[at..end]);
                at = end;
            }
        }
    }
    // Merge slashes and remove dot segments.
    let mut segments: Vec<&str> = Vec::new();
    // A final `.` or `..` leaves a trailing slash (`/a/b/..` is `/a/`), as a final `/` does.
    let mut trailing = false;
    for segment in decoded.split('/').filter(|segment| !segment.is_empty()) {
        match segment {
            "." => trailing = true,
            ".." => {
                segments.pop();
                trailing = true;
            }
            segment => {
                segments.push(segment);
                trailing = false;
            }
        }
    }
    trailing |= decoded.ends_with('/');
    let mut normal = String::with_capacity(decoded.len());
    for segment in &segments {
        normal.push('/');
        normal.push_str(segment);
    }
    if trailing || segments.is_empty() {
        normal.push('/');
    }
    Ok(Cow::Owned(normal))
}

/// What is wrong with a request's host: an HTTP/1.1 request with no `Host` or more than one;
/// a `Host` that is no host (RFC 9110 section 7.2: a host and an optional port, without
/// user information; an HTTP/2 upstream is sent it as its `:authority`, and a key reads it);
/// an HTTP/2 request with more than one, one that names another host than its `:authority`
/// (RFC 9113 section 8.3.1: the upstream, which reads `Host`, and the proxy, which routed
/// by the request, would disagree), or an `:authority` with user information.
pub(super) fn bad_host<B>(request: &Request<B>) -> Option<&'static str> {
    let mut hosts = request.headers().get_all(http::header::HOST).iter();
    let (first, second) = (hosts.next(), hosts.next());
    if second.is_some() {
        return Some("more than one Host header\n");
    }
    if let Some(host) = first.filter(|host| !host.is_empty()) {
        let bytes = host.as_bytes();
        if bytes.contains(&b'@') || http::uri::Authority::try_from(bytes).is_err() {
            return Some("the Host header is not a host and an optional port\n");
        }
    }
    match request.version() {
        http::Version::HTTP_11 if first.is_none() => {
            Some("an HTTP/1.1 request needs a Host header\n")
        }
        http::Version::HTTP_2 => {
            let authority = request.uri().authority()?;
            if authority.as_str().contains('@') {
                return Some("the request's authority holds user information\n");
            }
            let named = first?.as_bytes();
            (!named.eq_ignore_ascii_case(authority.as_str().as_bytes()))
                .then_some("the Host header names another host than the request's authority\n")
        }
        _ => None,
    }
}

/// The path a request is routed and keyed by: its path (in normal form, where no `.` or `..`
/// segment has parameters) without the parameters of its segments (`/users/7;jsessionid=1`
/// is `/users/7`), its runs of `/` merged again (`/;x/orders` is `/orders`). Servers such as
/// Tomcat and Spring drop those parameters before they route, so a request must not reach
/// its handler past the limits of the route it reaches there. The request is forwarded with
/// them.
pub(crate) fn routable_path(path: &str) -> Cow<'_, str> {
    if !path.contains(';') {
        return Cow::Borrowed(path);
    }
    let stripped: Vec<&str> = path
        .split('/')
        .map(|segment| segment.split_once(';').map_or(segment, |(kept, _)| kept))
        .collect();
    let stripped = stripped.join("/");
    match normalize_path(&stripped) {
        Ok(normal) => Cow::Owned(normal.into_owned()),
        // Dropping text cannot make a path unroutable; were it so, the path as it came.
        Err(_) => Cow::Borrowed(path),
    }
}

/// Puts the request's path in normal form ([`normalize_path`]), keeping its query.
pub(super) fn normalize_uri<B>(request: &mut Request<B>) -> Result<(), PathError> {
    let uri = request.uri();
    let std::borrow::Cow::Owned(path) = normalize_path(uri.path())? else {
        return Ok(());
    };
    let path_and_query = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().map_err(|_| PathError::NotAbsolute)?);
    *request.uri_mut() = Uri::from_parts(parts).map_err(|_| PathError::NotAbsolute)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_parameters_are_not_part_of_the_routed_path() {
        assert!(matches!(
            routable_path("/users/7"),
            Cow::Borrowed("/users/7")
        ));
        assert_eq!(routable_path("/users/7;jsessionid=1"), "/users/7");
        assert_eq!(routable_path("/api;v=1/orders;x=1"), "/api/orders");
        assert_eq!(routable_path("/;x/orders"), "/orders");
        // A dotted segment with parameters never gets this far: servers disagree on it.
        for dotted in [
            "/api/x/..;/orders",
            "/api/.;x/orders",
            "/api/%2e%2e;/x",
            "/..;",
        ] {
            assert_eq!(
                normalize_path(dotted),
                Err(PathError::DotParameters),
                "{dotted}"
            );
        }
        assert!(normalize_path("/api/..x;y/z").is_ok());
        assert_eq!(routable_path("/users/7/;x"), "/users/7/");
    }

    #[test]
    fn http2_requests_name_one_host_the_same_as_their_authority() {
        let request = |authority: &str, hosts: &[&str]| {
            let mut builder = Request::builder()
                .version(http::Version::HTTP_2)
                .uri(format!("http://{authority}/x"));
            for host in hosts {
                builder = builder.header(http::header::HOST, *host);
            }
            builder.body(()).unwrap()
        };
        assert_eq!(bad_host(&request("app", &[])), None);
        assert_eq!(bad_host(&request("app", &["APP"])), None);
        assert!(bad_host(&request("app", &["other"])).is_some());
        assert!(bad_host(&request("app", &["app", "app"])).is_some());
        assert!(bad_host(&request("user@app", &[])).is_some());
        let mut http1 = request("app", &["app"]);
        *http1.version_mut() = http::Version::HTTP_11;
        assert_eq!(bad_host(&http1), None);
        // A `Host` that is no host and optional port, on either version.
        for host in [
            "u1@app", "x1/evil", "x2?q", "x4#f", "[::1", "x7:80:80", "x8\\y",
        ] {
            let mut http1 = request("app", &[host]);
            *http1.version_mut() = http::Version::HTTP_11;
            let why = bad_host(&http1).unwrap_or_else(|| panic!("{host}"));
            assert!(why.contains("not a host"), "{host}: {why}");
        }
        for host in [
            "app:8080",
            "[::1]:80",
            "192.0.2.1",
            "xn--bcher-kva.example",
            "",
        ] {
            let mut http1 = request("app", &[host]);
            *http1.version_mut() = http::Version::HTTP_11;
            assert_eq!(bad_host(&http1), None, "{host}");
        }
    }

    #[test]
    fn the_one_pass_check_of_normal_form_agrees_with_its_definition() {
        // Every path of up to 7 bytes from `/`, `.`, `a`, `%` and `\`.
        fn defined(path: &str) -> bool {
            !path.contains(['%', '\\'])
                && !path.contains("//")
                && !path.contains("/./")
                && !path.contains("/../")
                && !path.ends_with("/.")
                && !path.ends_with("/..")
        }
        let alphabet = ['/', '.', 'a', '%', '\\'];
        let mut paths = vec![String::from("/")];
        let mut checked = 0;
        for _ in 0..6 {
            let mut longer = Vec::new();
            for path in &paths {
                assert_eq!(is_normal(path), defined(path), "{path}");
                checked += 1;
                longer.extend(alphabet.iter().map(|c| format!("{path}{c}")));
            }
            paths = longer;
        }
        assert!(checked > 3_000);
    }

    #[test]
    fn paths_take_one_normal_form() {
        for (path, normal) in [
            ("/", "/"),
            ("/api", "/api"),
            ("/api/", "/api/"),
            ("//api/x", "/api/x"),
            ("/api//x///y", "/api/x/y"),
            ("/x/../api/x", "/api/x"),
            ("/../../api", "/api"),
            ("/api/.", "/api/"),
            ("/api/..", "/"),
            ("/api/x/..", "/api/"),
            ("/./api/./x", "/api/x"),
            ("/%61pi/x", "/api/x"),
            ("/%2e%2e/api", "/api"),
            ("/a/%2E%2E/api", "/api"),
            ("/api/%7e%2d%5f", "/api/~-_"),
            ("/api/%e2%82%ac", "/api/%E2%82%AC"),
            ("/api/%20x", "/api/%20x"),
            ("/api/€", "/api/€"),
            ("/api/...", "/api/..."),
            ("/api/.x", "/api/.x"),
            // A trailing slash stays when the path had escapes too (found by fuzzing: the
            // normal form of this one lost it on a second pass).
            ("/%61pi/", "/api/"),
            ("/c/a=a%21F%22%44F/./", "/c/a=a%21F%22DF/"),
            ("/c/a=a%21F%22DF/", "/c/a=a%21F%22DF/"),
        ] {
            assert_eq!(normalize_path(path).unwrap(), normal, "{path}");
        }
    }

    #[test]
    fn an_already_normal_path_is_not_copied() {
        assert!(matches!(normalize_path("/api/x"), Ok(Cow::Borrowed(_))));
        assert!(matches!(normalize_path("/api/x/"), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn ambiguous_paths_are_refused() {
        for (path, error) in [
            ("*", PathError::NotAbsolute),
            ("api", PathError::NotAbsolute),
            ("", PathError::NotAbsolute),
            ("/api%2Fx", PathError::EscapedSlash),
            ("/api%2fx", PathError::EscapedSlash),
            ("/api%5Cx", PathError::EscapedSlash),
            ("/users/7%3B", PathError::EscapedSemicolon),
            ("/x/..%3b/api", PathError::EscapedSemicolon),
            ("/x/%2e%2e%3B/api", PathError::EscapedSemicolon),
            ("/api\\x", PathError::Backslash),
            ("/api%00", PathError::Nul),
            ("/api%", PathError::BadEscape),
            ("/api%4", PathError::BadEscape),
            ("/api%zz", PathError::BadEscape),
        ] {
            assert_eq!(normalize_path(path).unwrap_err(), error, "{path}");
        }
    }
}
