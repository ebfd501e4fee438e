//! One request as an access log recorded it, and the request replayed from it.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::Empty;
use std::net::IpAddr;
use std::time::Duration;

/// One request as a log recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// When it arrived, in nanoseconds since the Unix epoch.
    pub start_nanos: u64,
    /// How long it took to answer.
    pub duration: Duration,
    /// Its method.
    pub method: Method,
    /// Its target: the path, with the query if it had one.
    pub target: Uri,
    /// The `Host` it named, if the log has it.
    pub host: Option<HeaderValue>,
    /// The client's address (the log's remote address).
    pub peer: IpAddr,
    /// What the upstream answered.
    pub status: StatusCode,
    /// Other headers the log kept (`User-Agent`, `Referer`, or any a format names).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// The `Host` a replayed request names when its log gives none (the proxy refuses a request
/// without one, as HTTP/1.1 requires).
const NO_HOST: &str = "replay.invalid";

impl Record {
    /// The request it replays as (its method, target and headers taken from it).
    pub(crate) fn take_request(&mut self) -> Request<Empty<Bytes>> {
        let mut request = Request::new(Empty::new());
        *request.method_mut() = std::mem::replace(&mut self.method, Method::GET);
        *request.uri_mut() = std::mem::take(&mut self.target);
        let headers = request.headers_mut();
        for (name, value) in self.headers.drain(..) {
            headers.append(name, value);
        }
        // The log's host field, else a `Host` among its headers, else one of ours.
        match self.host.take() {
            Some(host) => {
                headers.insert(http::header::HOST, host);
            }
            None if headers.contains_key(http::header::HOST) => {}
            None => {
                headers.insert(http::header::HOST, HeaderValue::from_static(NO_HOST));
            }
        }
        request
    }

    /// When its answer ended, in nanoseconds since the Unix epoch.
    pub(crate) fn end_nanos(&self) -> u64 {
        let duration = u64::try_from(self.duration.as_nanos()).unwrap_or(u64::MAX);
        self.start_nanos.saturating_add(duration)
    }
}
