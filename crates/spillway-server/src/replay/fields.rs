//! The fields access logs share, read from their text: a status, a client address, a
//! duration in seconds, a request target and line, a host and a header; and a file's last
//! time, read once for the lines that repeat it.

use http::{HeaderName, HeaderValue, Method, StatusCode, Uri};
use std::net::IpAddr;
use std::time::Duration;

/// The longest duration a line may give: a day (a request held longer is held in memory
/// until the replay's end).
pub(crate) const MAX_DURATION_SECONDS: f64 = 86_400.0;

/// The last time a file's lines gave, as text, and its nanoseconds: nginx writes the same
/// `$time_local` on every line of a second, read once.
#[derive(Debug, Default)]
pub(super) struct LastTime {
    text: String,
    nanos: u64,
}

impl LastTime {
    /// `text` read by `parse`, or as the last line's was.
    pub(super) fn read(&mut self, text: &str, parse: fn(&str) -> Option<u64>) -> Option<u64> {
        if text != self.text || self.text.is_empty() {
            self.nanos = parse(text)?;
            text.clone_into(&mut self.text);
        }
        Some(self.nanos)
    }
}

pub(super) fn status(text: &str) -> Result<StatusCode, String> {
    text.parse::<u16>()
        .ok()
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or_else(|| format!("status `{text}` is not an HTTP status"))
}

pub(super) fn peer(text: &str) -> Result<IpAddr, String> {
    let text = text.trim_start_matches('[').trim_end_matches(']');
    text.parse()
        .map_err(|_| format!("`{text}` is not an IP address"))
}

pub(super) fn seconds(text: &str, what: &str) -> Result<Duration, String> {
    let seconds = text
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .ok_or_else(|| format!("{what} `{text}` is not a number of seconds"))?;
    if seconds > MAX_DURATION_SECONDS {
        return Err(format!("{what} `{text}` is longer than a day"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A request target: a path, with its query (an absolute URI's path and query too).
pub(super) fn target_of(text: &str) -> Result<Uri, String> {
    let uri: Uri = text
        .parse()
        .map_err(|_| format!("target `{text}` is not a URI"))?;
    match uri.path_and_query() {
        Some(path) if path.as_str().starts_with('/') => Ok(Uri::from(path.clone())),
        _ => Err(format!("target `{text}` is not a path")),
    }
}

pub(super) fn host(text: &str) -> Result<HeaderValue, String> {
    HeaderValue::from_str(text).map_err(|_| format!("host `{text}` is not a header value"))
}

pub(super) fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`{name}` is not a header name"))?;
    let value =
        HeaderValue::from_str(value).map_err(|_| format!("header `{name}`: not a header value"))?;
    Ok((name, value))
}

/// A request line, `METHOD TARGET PROTOCOL`: its method and target.
pub(super) fn request_line(request: &str) -> Result<(Method, &str), String> {
    let mut parts = request.split(' ');
    match (parts.next(), parts.next()) {
        (Some(method), Some(target)) if !method.is_empty() => {
            let method = Method::from_bytes(method.as_bytes())
                .map_err(|_| format!("`{method}` is not an HTTP method"))?;
            Ok((method, target))
        }
        _ => Err(format!(
            "request `{request}` is not `METHOD TARGET PROTOCOL`"
        )),
    }
}
