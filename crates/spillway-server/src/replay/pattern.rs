//! An nginx `log_format` given as a pattern (`--log-format`): its `$variables` read from each
//! line, the text between them matched as it is.

use super::fields::{header, host, peer, request_line, seconds, status, target_of, LastTime};
use super::record::Record;
use crate::calendar::{parse_clf, parse_rfc3339, parse_unix_seconds};
use http::{HeaderName, Method};

/// What a variable of the pattern gives.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Field {
    /// `$remote_addr`, `$realip_remote_addr`: the client.
    Peer,
    /// `$time_local`: when the response was logged, to the second.
    TimeLocal,
    /// `$time_iso8601`: as `$time_local`, in ISO 8601.
    TimeIso,
    /// `$msec`: when the response was logged, in Unix seconds to the millisecond.
    Msec,
    /// `$request`: the request line.
    Request,
    /// `$request_method`.
    Method,
    /// `$request_uri`: the target, with its query.
    Target,
    /// `$uri` (the path) and `$args` / `$query_string`: the target in two parts.
    Path,
    Query,
    /// `$status`.
    Status,
    /// `$request_time`: from the first byte read to the log write, in seconds.
    RequestTime,
    /// `$host`, `$http_host`: the host.
    Host,
    /// `$http_NAME`: a request header.
    Header(HeaderName),
    /// Any other variable: read and left aside.
    Other,
}

/// A piece of the pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Variable(Field),
}

/// A compiled `log_format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    pieces: Vec<Piece>,
    /// Whether its time is to the second (`$time_local`, `$time_iso8601`), not to the
    /// millisecond (`$msec`).
    to_the_second: bool,
}

/// A variable's name after a `$` (`${name}` or `$name`), and the rest of the text.
fn variable_name(text: &str) -> Result<(&str, &str), String> {
    if let Some(braced) = text.strip_prefix('{') {
        let end = braced
            .find('}')
            .ok_or_else(|| "a `${` has no closing `}`".to_owned())?;
        return Ok((&braced[..end], &braced[end + 1..]));
    }
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    Ok(text.split_at(end))
}

fn field(name: &str) -> Result<Field, String> {
    Ok(match name {
        "" => return Err("a `$` names no variable".to_owned()),
        "remote_addr" | "realip_remote_addr" => Field::Peer,
        "time_local" => Field::TimeLocal,
        "time_iso8601" => Field::TimeIso,
        "msec" => Field::Msec,
        "request" => Field::Request,
        "request_method" => Field::Method,
        "request_uri" => Field::Target,
        "uri" | "document_uri" => Field::Path,
        "args" | "query_string" => Field::Query,
        "status" => Field::Status,
        "request_time" => Field::RequestTime,
        "host" | "http_host" => Field::Host,
        _ => match name.strip_prefix("http_") {
            Some(header) => {
                let name = header.replace('_', "-");
                Field::Header(
                    HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| format!("`${name}` names no header"))?,
                )
            }
            None => Field::Other,
        },
    })
}

impl Pattern {
    /// Compiles `format`, nginx's `log_format` string (the quoted parts joined).
    ///
    /// # Errors
    ///
    /// Why it cannot be read: two variables with nothing between them (a line would not say
    /// where one ends), or a pattern without a time, a status, a request or `$request_time`.
    pub(crate) fn new(format: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = format;
        while !rest.is_empty() {
            match rest.find('$') {
                Some(0) => {
                    let (name, after) = variable_name(&rest[1..])?;
                    let field = field(name)?;
                    if matches!(pieces.last(), Some(Piece::Variable(_))) {
                        return Err(format!(
                            "`${name}` follows another variable with nothing between them: a \
                             line would not say where one ends"
                        ));
                    }
                    pieces.push(Piece::Variable(field));
                    rest = after;
                }
                Some(at) => {
                    pieces.push(Piece::Text(rest[..at].to_owned()));
                    rest = &rest[at..];
                }
                None => {
                    pieces.push(Piece::Text(rest.to_owned()));
                    rest = "";
                }
            }
        }
        let has = |wanted: &[Field]| {
            (pieces.iter()).any(|piece| matches!(piece, Piece::Variable(f) if wanted.contains(f)))
        };
        let time = [Field::TimeLocal, Field::TimeIso, Field::Msec];
        if !has(&time) {
            return Err("it has no time: `$time_local`, `$time_iso8601` or `$msec`".to_owned());
        }
        if !has(&[Field::Status]) {
            return Err("it has no `$status`".to_owned());
        }
        if !has(&[Field::RequestTime]) {
            return Err(
                "it has no `$request_time`: a replay needs how long each request took".to_owned(),
            );
        }
        if !has(&[Field::Request, Field::Target, Field::Path]) {
            return Err("it has no request: `$request`, `$request_uri` or `$uri`".to_owned());
        }
        let to_the_second = !has(&[Field::Msec]);
        Ok(Self {
            pieces,
            to_the_second,
        })
    }

    /// Whether its lines give their end to the second only.
    pub(crate) fn to_the_second(&self) -> bool {
        self.to_the_second
    }

    /// The record on `line`, its time read through `times`.
    pub(crate) fn parse(&self, line: &str, times: &mut LastTime) -> Result<Record, String> {
        let mut read = Read {
            times: Some(times),
            ..Read::default()
        };
        let mut rest = line;
        let mut pieces = self.pieces.iter().peekable();
        while let Some(piece) = pieces.next() {
            match piece {
                Piece::Text(text) => {
                    rest = rest
                        .strip_prefix(text.as_str())
                        .ok_or_else(|| format!("expected `{text}` at `{}`", excerpt(rest)))?;
                }
                Piece::Variable(field) => {
                    let end = match pieces.peek() {
                        Some(Piece::Text(next)) => rest.find(next.as_str()).ok_or_else(|| {
                            format!("expected `{next}` after a value at `{}`", excerpt(rest))
                        })?,
                        _ => rest.len(),
                    };
                    read.take(field, &rest[..end])?;
                    rest = &rest[end..];
                }
            }
        }
        read.record()
    }
}

/// The start of `text`, for a message.
fn excerpt(text: &str) -> &str {
    let end = (text.char_indices())
        .nth(24)
        .map_or(text.len(), |(at, _)| at);
    &text[..end]
}

/// What a line's variables gave.
#[derive(Default)]
struct Read<'a, 't> {
    /// The last time read, to read the same text once.
    times: Option<&'t mut LastTime>,
    peer: Option<&'a str>,
    ended: Option<u64>,
    request: Option<(Method, &'a str)>,
    method: Option<Method>,
    target: Option<&'a str>,
    path: Option<&'a str>,
    query: Option<&'a str>,
    status: Option<http::StatusCode>,
    took: Option<std::time::Duration>,
    host: Option<&'a str>,
    headers: Vec<(HeaderName, &'a str)>,
}

impl<'a> Read<'a, '_> {
    /// `value` read by `parse`, through the last time read.
    fn time(&mut self, value: &str, parse: fn(&str) -> Option<u64>) -> Option<u64> {
        match &mut self.times {
            Some(times) => times.read(value, parse),
            None => parse(value),
        }
    }

    fn take(&mut self, field: &Field, value: &'a str) -> Result<(), String> {
        // nginx writes `-` for a variable with no value.
        let given = (value != "-").then_some(value);
        match field {
            Field::Peer => self.peer = given,
            Field::TimeLocal => {
                let time = value.trim_start_matches('[').trim_end_matches(']');
                let ended = (self.time(time, parse_clf))
                    .ok_or_else(|| format!("time `{value}` is not nginx's `$time_local`"))?;
                self.ended = Some(ended);
            }
            Field::TimeIso => {
                let ended = (self.time(value, parse_rfc3339))
                    .ok_or_else(|| format!("time `{value}` is not ISO 8601"))?;
                self.ended = Some(ended);
            }
            Field::Msec => {
                let ended = (value.parse::<f64>().ok())
                    .and_then(parse_unix_seconds)
                    .ok_or_else(|| format!("time `{value}` is not Unix seconds"))?;
                self.ended = Some(ended);
            }
            Field::Request => self.request = Some(request_line(value)?),
            Field::Method => {
                let method = Method::from_bytes(value.as_bytes())
                    .map_err(|_| format!("`{value}` is not an HTTP method"))?;
                self.method = Some(method);
            }
            Field::Target => self.target = given,
            Field::Path => self.path = given,
            Field::Query => self.query = given,
            Field::Status => self.status = Some(status(value)?),
            Field::RequestTime => self.took = Some(seconds(value, "request time")?),
            Field::Host => self.host = given,
            Field::Header(name) => {
                if let Some(value) = given {
                    self.headers.push((name.clone(), value));
                }
            }
            Field::Other => {}
        }
        Ok(())
    }

    fn record(self) -> Result<Record, String> {
        let ended = self.ended.ok_or("the line has no time")?;
        let duration = self.took.ok_or("the line has no request time")?;
        let status = self.status.ok_or("the line has no status")?;
        let joined;
        // The method: `$request_method`, else `$request`'s, else GET.
        let (requested, line_target) = match self.request {
            Some((method, target)) => (Some(method), Some(target)),
            None => (None, None),
        };
        let method = self.method.or(requested).unwrap_or(Method::GET);
        let target = match (self.target, self.path, line_target) {
            (Some(target), _, _) => target,
            (None, Some(path), _) => {
                joined = match self.query {
                    Some(query) => format!("{path}?{query}"),
                    None => path.to_owned(),
                };
                joined.as_str()
            }
            (None, None, Some(target)) => target,
            (None, None, None) => return Err("the line has no request".to_owned()),
        };
        let peer = match self.peer {
            Some(text) => peer(text)?,
            None => std::net::IpAddr::from([0, 0, 0, 0]),
        };
        let mut headers = Vec::with_capacity(self.headers.len());
        for (name, value) in self.headers {
            // A value that is no header value (nginx escapes bytes it will not write) is
            // left out, as the nginx format's user agent is.
            if let Ok(header) = header(name.as_str(), value) {
                headers.push(header);
            }
        }
        let took = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        Ok(Record {
            start_nanos: ended.saturating_sub(took),
            duration,
            method,
            target: target_of(target)?,
            host: self.host.map(host).transpose()?,
            peer,
            status,
            headers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-04T10:00:00Z in nanoseconds.
    const AT: u64 = 1_796_378_400 * 1_000_000_000;

    #[test]
    fn a_custom_log_format_reads_its_variables_in_their_places() {
        let pattern = Pattern::new(
            r#"$remote_addr [$time_iso8601] $host "$request_method $request_uri" $status rt=$request_time ua="$http_user_agent" user=$http_x_user $upstream_addr"#,
        )
        .expect("a pattern");
        assert!(pattern.to_the_second());
        let line = r#"10.0.0.7 [2026-12-04T10:00:01+00:00] api.example "POST /orders?x=1" 201 rt=0.250 ua="curl/8 (x)" user=ann 10.1.0.1:80"#;
        let record = pattern
            .parse(line, &mut LastTime::default())
            .expect("a record");
        assert_eq!(record.start_nanos, AT + 750_000_000);
        assert_eq!(record.duration, std::time::Duration::from_millis(250));
        assert_eq!(record.method, Method::POST);
        assert_eq!(record.target, "/orders?x=1");
        assert_eq!(
            record.host.as_ref().map(|h| h.to_str().unwrap()),
            Some("api.example")
        );
        assert_eq!(record.peer.to_string(), "10.0.0.7");
        assert_eq!(record.status, 201);
        let headers: Vec<_> = (record.headers.iter())
            .map(|(name, value)| (name.as_str(), value.to_str().unwrap()))
            .collect();
        assert_eq!(headers, [("user-agent", "curl/8 (x)"), ("x-user", "ann")]);
    }

    #[test]
    fn the_request_line_s_method_stands_beside_request_uri() {
        let pattern = Pattern::new("[$time_local] \"$request\" $request_uri $status $request_time")
            .expect("a pattern");
        let line = "[04/Dec/2026:10:00:01 +0000] \"DELETE /a HTTP/1.1\" /a?x=1 204 0.001";
        let record = pattern
            .parse(line, &mut LastTime::default())
            .expect("a record");
        assert_eq!(
            (record.method, record.target.to_string()),
            (Method::DELETE, "/a?x=1".to_owned())
        );
    }

    #[test]
    fn msec_gives_the_end_to_the_millisecond_and_uri_joins_its_args() {
        let pattern = Pattern::new("$msec $uri?$args $status $request_time").expect("a pattern");
        assert!(!pattern.to_the_second());
        let record = pattern
            .parse("1796378400.500 /a?b=1 200 0.100", &mut LastTime::default())
            .expect("a record");
        assert_eq!(record.start_nanos, AT + 400_000_000);
        assert_eq!(record.target, "/a?b=1");
        assert_eq!(record.method, Method::GET);
    }

    #[test]
    fn a_pattern_that_cannot_be_read_says_why() {
        for (format, why) in [
            ("$remote_addr$status", "nothing between them"),
            ("$status $request $request_time", "no time"),
            ("$time_local $request $request_time", "no `$status`"),
            ("$time_local $request $status", "no `$request_time`"),
            ("$time_local $status $request_time", "no request"),
            ("${time_local $status", "no closing"),
            ("$ $time_local", "names no variable"),
        ] {
            let err = Pattern::new(format).expect_err(format);
            assert!(err.contains(why), "{format}: {err}");
        }
        let pattern = Pattern::new("[$time_local] \"$request\" $status $request_time").unwrap();
        let err = pattern
            .parse(
                "[04/Dec/2026:10:00:00 +0000] GET / 200 0.1",
                &mut LastTime::default(),
            )
            .unwrap_err();
        assert!(err.contains("expected `] \"` after a value"), "{err}");
        let err = (pattern.parse(
            "[04/Dec/2026:10:00:00 +0000] \"GET / HTTP/1.1\" 2x 0.1",
            &mut LastTime::default(),
        ))
        .unwrap_err();
        assert!(err.contains("status `2x`"), "{err}");
    }
}
