//! The access-log formats `spillway replay` reads, one line at a time.

use super::fields::{
    header, host, peer, request_line, seconds, status, target_of, LastTime, MAX_DURATION_SECONDS,
};
use super::pattern::Pattern;
use super::record::Record;
use crate::calendar::{parse_clf, parse_rfc3339, parse_unix_seconds};
use http::{HeaderName, HeaderValue, Method, StatusCode};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// An access log's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Each file's own, from its first line: a JSON object is `jsonl`, a line that names
    /// `time` and `status` among commas is `csv`, anything else `nginx`.
    Auto,
    /// nginx's `combined` with `$request_time` appended:
    /// `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
    /// "$http_referer" "$http_user_agent" $request_time` (fields after it are ignored).
    Nginx,
    /// Envoy's default access log format: `[%START_TIME%] "%REQ(:METHOD)%
    /// %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS%
    /// %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%
    /// "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%"
    /// "%UPSTREAM_HOST%"`. The client is the first address of `X-Forwarded-For` (the format
    /// has no other).
    Envoy,
    /// Envoy's JSON access log with the keys Istio's default gives: `start_time`, `method`,
    /// `path`, `response_code`, `duration` (ms), and optionally `downstream_remote_address`,
    /// `x_forwarded_for`, `authority`, `user_agent`, `request_id`.
    EnvoyJson,
    /// One JSON object a line: `time` (RFC 3339, or Unix seconds as a number: when the request
    /// arrived), `status`, `duration_ms` (or `duration_s`), `path` (or `target`, `uri`; with
    /// the query), and optionally `method` (default GET), `ip` (or `peer`, `remote_addr`),
    /// `host` and `headers` (an object of names and values).
    Jsonl,
    /// A header line naming the columns (the JSON lines' names, and `header:NAME` for a
    /// header), then one request a line; a field may be quoted with `"` (a quote inside it
    /// doubled).
    Csv,
}

impl Format {
    /// Its name, as `--format` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Nginx => "nginx",
            Format::Envoy => "envoy",
            Format::EnvoyJson => "envoy_json",
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
        }
    }
}

/// How to read the logs: their format, an nginx `log_format` they follow instead of
/// `combined`, and the request headers worth keeping (those the configuration reads).
#[derive(Debug, Clone)]
pub(crate) struct Reading {
    pub(crate) format: Format,
    pub(crate) pattern: Option<Arc<Pattern>>,
    pub(crate) headers: Arc<[HeaderName]>,
}

/// Reads one file's lines in its format.
#[derive(Debug)]
pub(crate) struct Parser {
    format: Format,
    /// An nginx `log_format` the lines follow instead of `combined`.
    pattern: Option<Arc<Pattern>>,
    /// The headers a record keeps: no other is read, and a record waiting to be replayed
    /// holds nothing it will not use.
    headers: Arc<[HeaderName]>,
    /// A CSV file's columns, from its header line.
    columns: Option<Vec<String>>,
    /// The last nginx time read, and its nanoseconds.
    times: LastTime,
}

impl Parser {
    pub(crate) fn new(reading: &Reading) -> Self {
        Self {
            format: reading.format,
            pattern: reading.pattern.clone(),
            headers: Arc::clone(&reading.headers),
            columns: None,
            times: LastTime::default(),
        }
    }

    /// Whether its format gives when a request ended to the second only (nginx's
    /// `$time_local`).
    pub(crate) fn ends_to_the_second(&self) -> bool {
        match &self.pattern {
            Some(pattern) => pattern.to_the_second(),
            None => self.format == Format::Nginx,
        }
    }

    /// The record on `line`, `None` for a line that holds none (blank, or a CSV header), or
    /// why it is malformed; with the headers worth keeping only.
    pub(crate) fn parse(&mut self, line: &str) -> Result<Option<Record>, String> {
        let mut record = self.parse_all(line)?;
        if let Some(record) = &mut record {
            let keep = &self.headers;
            record.headers.retain(|(name, _)| keep.contains(name));
            if record.headers.is_empty() {
                // Its room too: a record may wait a while.
                record.headers = Vec::new();
            }
        }
        Ok(record)
    }

    fn parse_all(&mut self, line: &str) -> Result<Option<Record>, String> {
        let line = line.trim_end_matches(['\r', '\n']);
        // A byte-order mark starts some files written on Windows.
        let line = line.strip_prefix('\u{feff}').unwrap_or(line);
        if line.trim().is_empty() {
            return Ok(None);
        }
        if let Some(pattern) = &self.pattern {
            return pattern.parse(line, &mut self.times).map(Some);
        }
        if self.format == Format::Auto {
            self.format = detect(line);
        }
        match self.format {
            Format::Auto | Format::Nginx => nginx(line, &mut self.times).map(Some),
            Format::Jsonl => jsonl(line, &self.headers).map(Some),
            Format::Envoy => envoy(line).map(Some),
            Format::EnvoyJson => envoy_json(line).map(Some),
            Format::Csv => match &self.columns {
                None => {
                    let columns = csv_fields(line)?;
                    if !columns.iter().any(|c| c == "time")
                        || !columns.iter().any(|c| c == "status")
                    {
                        return Err("a CSV log's first line must name its columns, `time` and `status` among them".into());
                    }
                    self.columns = Some(columns.into_iter().map(Cow::into_owned).collect());
                    Ok(None)
                }
                Some(columns) => csv(columns, line, &self.headers).map(Some),
            },
        }
    }
}

fn detect(line: &str) -> Format {
    let line = line.trim_start();
    if line.starts_with('{') {
        if line.contains("\"start_time\"") && line.contains("\"response_code\"") {
            Format::EnvoyJson
        } else {
            Format::Jsonl
        }
    } else if line.starts_with('[') && line.as_bytes().get(5) == Some(&b'-') {
        Format::Envoy
    } else if csv_fields(line).is_ok_and(|columns| {
        columns.iter().any(|c| c == "time") && columns.iter().any(|c| c == "status")
    }) {
        Format::Csv
    } else {
        Format::Nginx
    }
}

/// A cursor over a log line's fields.
struct Fields<'a> {
    rest: &'a str,
}

impl<'a> Fields<'a> {
    /// The next field up to a space.
    fn word(&mut self, what: &str) -> Result<&'a str, String> {
        let rest = self.rest.trim_start_matches(' ');
        if rest.is_empty() {
            return Err(format!("the line ends before its {what}"));
        }
        let end = rest.bytes().position(|b| b == b' ').unwrap_or(rest.len());
        let (word, rest) = rest.split_at(end);
        self.rest = rest;
        Ok(word)
    }

    /// The next field between `open` and `close`.
    fn enclosed(&mut self, open: char, close: char, what: &str) -> Result<&'a str, String> {
        let rest = self.rest.trim_start_matches(' ');
        let inner = rest
            .strip_prefix(open)
            .ok_or_else(|| format!("its {what} should start with `{open}`"))?;
        // `open` and `close` are ASCII: a byte search finds them.
        let end = (inner.bytes())
            .position(|b| char::from(b) == close)
            .ok_or_else(|| format!("its {what} has no closing `{close}`"))?;
        self.rest = &inner[end + close.len_utf8()..];
        Ok(&inner[..end])
    }
}

/// nginx's `combined` with `$request_time` appended. `$time_local` is when the response was
/// logged, at its end: the request arrived `$request_time` before.
fn nginx(line: &str, times: &mut LastTime) -> Result<Record, String> {
    let mut fields = Fields { rest: line };
    let peer = peer(fields.word("remote address")?)?;
    fields.word("`-`")?;
    fields.word("remote user")?;
    let time = fields.enclosed('[', ']', "time")?;
    let ended = (times.read(time, parse_clf))
        .ok_or_else(|| format!("time `{time}` is not nginx's `$time_local`"))?;
    let (method, target) = request_line(fields.enclosed('"', '"', "request")?)?;
    let status = status(fields.word("status")?)?;
    fields.word("body size")?;
    let referer = fields.enclosed('"', '"', "referer")?;
    let agent = fields.enclosed('"', '"', "user agent")?;
    let duration = seconds(fields.word("request time")?, "request time")?;
    let mut headers = Vec::new();
    for (name, value) in [("referer", referer), ("user-agent", agent)] {
        if value != "-" {
            if let Ok(header) = header(name, value) {
                headers.push(header);
            }
        }
    }
    let took = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    Ok(Record {
        start_nanos: ended.saturating_sub(took),
        duration,
        method,
        target: target_of(target)?,
        host: None,
        peer,
        status,
        headers,
    })
}

/// An Envoy response code: 0, a client that left before a response, is replayed as 499 (a
/// client's fault, as nginx counts it), so that its load is not lost.
fn envoy_status(text: &str) -> Result<StatusCode, String> {
    if text == "0" {
        return Ok(StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST));
    }
    status(text)
}

/// A field Envoy writes `-` for when it has no value.
fn envoy_field(text: &str) -> Option<&str> {
    (text != "-" && !text.is_empty()).then_some(text)
}

/// The client of an Envoy line: `downstream_remote_address` (`ip:port`), else the first
/// address of `X-Forwarded-For`, else none.
fn envoy_peer(remote: Option<&str>, forwarded: Option<&str>) -> IpAddr {
    let remote = remote.and_then(|text| {
        text.parse::<std::net::SocketAddr>()
            .map(|addr| addr.ip())
            .or_else(|_| text.parse::<IpAddr>())
            .ok()
    });
    let forwarded = forwarded.and_then(|text| text.split(',').next()?.trim().parse().ok());
    remote.or(forwarded).unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

/// The headers an Envoy line records, as the request had them.
fn envoy_headers(
    forwarded: Option<&str>,
    agent: Option<&str>,
    id: Option<&str>,
) -> Vec<(HeaderName, HeaderValue)> {
    [
        ("x-forwarded-for", forwarded),
        ("user-agent", agent),
        ("x-request-id", id),
    ]
    .into_iter()
    .filter_map(|(name, value)| header(name, value?).ok())
    .collect()
}

/// Envoy's default text format.
fn envoy(line: &str) -> Result<Record, String> {
    let mut fields = Fields { rest: line };
    let time = fields.enclosed('[', ']', "start time")?;
    let start_nanos =
        parse_rfc3339(time).ok_or_else(|| format!("start time `{time}` is not RFC 3339"))?;
    let (method, target) = request_line(fields.enclosed('"', '"', "request")?)?;
    let status = envoy_status(fields.word("response code")?)?;
    fields.word("response flags")?;
    fields.word("bytes received")?;
    fields.word("bytes sent")?;
    let duration = fields.word("duration")?;
    let millis: f64 = duration
        .parse()
        .map_err(|_| format!("duration `{duration}` is not milliseconds"))?;
    fields.word("upstream service time")?;
    let forwarded = envoy_field(fields.enclosed('"', '"', "X-Forwarded-For")?);
    let agent = envoy_field(fields.enclosed('"', '"', "user agent")?);
    let id = envoy_field(fields.enclosed('"', '"', "request id")?);
    let authority = envoy_field(fields.enclosed('"', '"', "authority")?);
    Ok(Record {
        start_nanos,
        duration: self::duration(Some(millis), None)?,
        method,
        target: target_of(target)?,
        host: authority.map(host).transpose()?,
        peer: envoy_peer(None, forwarded),
        status,
        headers: envoy_headers(forwarded, agent, id),
    })
}

/// A number Envoy's JSON writes as a number or as text (`"12"`), or `-`.
#[derive(Deserialize)]
#[serde(untagged)]
enum JsonNumber<'a> {
    Number(f64),
    #[serde(borrow)]
    Text(Cow<'a, str>),
}

impl JsonNumber<'_> {
    fn value(&self, what: &str) -> Result<f64, String> {
        match self {
            JsonNumber::Number(number) => Ok(*number),
            JsonNumber::Text(text) => text
                .parse()
                .map_err(|_| format!("{what} `{text}` is not a number")),
        }
    }
}

#[derive(Deserialize)]
struct EnvoyJsonLine<'a> {
    #[serde(borrow)]
    start_time: Cow<'a, str>,
    #[serde(borrow)]
    response_code: JsonNumber<'a>,
    #[serde(borrow)]
    duration: JsonNumber<'a>,
    #[serde(borrow)]
    path: Cow<'a, str>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    downstream_remote_address: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    x_forwarded_for: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    authority: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    user_agent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    request_id: Option<Cow<'a, str>>,
}

/// An optional field of an Envoy JSON line, `None` for `-`.
fn field<'a>(value: &'a Option<Cow<'_, str>>) -> Option<&'a str> {
    value.as_deref().and_then(envoy_field)
}

fn envoy_json(line: &str) -> Result<Record, String> {
    let parsed: EnvoyJsonLine<'_> = serde_json::from_str(line).map_err(|err| err.to_string())?;
    let start_nanos = parse_rfc3339(&parsed.start_time)
        .ok_or_else(|| format!("start_time `{}` is not RFC 3339", parsed.start_time))?;
    let code = parsed.response_code.value("response_code")?;
    let status = envoy_status(&format!("{code}"))?;

    let forwarded = field(&parsed.x_forwarded_for);
    Ok(Record {
        start_nanos,
        duration: duration(Some(parsed.duration.value("duration")?), None)?,
        method: method(field(&parsed.method))?,
        target: target_of(&parsed.path)?,
        host: field(&parsed.authority).map(host).transpose()?,
        peer: envoy_peer(field(&parsed.downstream_remote_address), forwarded),
        status,
        headers: envoy_headers(
            forwarded,
            field(&parsed.user_agent),
            field(&parsed.request_id),
        ),
    })
}

/// A time in a JSON line: RFC 3339 text, or Unix seconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum JsonTime<'a> {
    Seconds(f64),
    #[serde(borrow)]
    Text(Cow<'a, str>),
}

#[derive(Deserialize)]
struct JsonLine<'a> {
    #[serde(borrow)]
    time: JsonTime<'a>,
    status: u16,
    #[serde(default)]
    duration_ms: Option<f64>,
    #[serde(default)]
    duration_s: Option<f64>,
    #[serde(borrow, alias = "target", alias = "uri")]
    path: Cow<'a, str>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default, alias = "peer", alias = "remote_addr")]
    ip: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    host: Option<Cow<'a, str>>,
    #[serde(default)]
    headers: BTreeMap<String, Values>,
}

/// A header's value, or its values in order (spillway's access log writes a header given
/// several times as an array).
#[derive(Deserialize)]
#[serde(untagged)]
enum Values {
    One(String),
    Many(Vec<String>),
}

impl Values {
    fn iter(&self) -> impl Iterator<Item = &str> {
        let (one, many) = match self {
            Values::One(value) => (Some(value.as_str()), &[][..]),
            Values::Many(values) => (None, values.as_slice()),
        };
        one.into_iter().chain(many.iter().map(String::as_str))
    }
}

fn json_time(time: &JsonTime<'_>) -> Result<u64, String> {
    match time {
        JsonTime::Seconds(seconds) => parse_unix_seconds(*seconds)
            .ok_or_else(|| format!("time {seconds} is not Unix seconds")),
        JsonTime::Text(text) => {
            parse_rfc3339(text).ok_or_else(|| format!("time `{text}` is not RFC 3339"))
        }
    }
}

/// Where a line gives its duration: `duration_ms`, or `duration_s`.
fn duration(millis: Option<f64>, seconds_given: Option<f64>) -> Result<Duration, String> {
    let seconds = match (millis, seconds_given) {
        (Some(millis), _) => millis / 1e3,
        (None, Some(seconds)) => seconds,
        (None, None) => return Err("it has no `duration_ms` or `duration_s`".into()),
    };
    if !(seconds.is_finite() && seconds >= 0.0) {
        return Err(format!("duration {seconds} s is not a time"));
    }
    if seconds > MAX_DURATION_SECONDS {
        return Err(format!("duration {seconds} s is longer than a day"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// The address a line names, or the unspecified address (a log without one).
fn peer_or_none(ip: Option<&str>) -> Result<IpAddr, String> {
    ip.map_or(Ok(IpAddr::from([0, 0, 0, 0])), peer)
}

fn method(text: Option<&str>) -> Result<Method, String> {
    let text = text.unwrap_or("GET");
    Method::from_bytes(text.as_bytes()).map_err(|_| format!("`{text}` is not an HTTP method"))
}

/// Whether a header named `name` is one of `keep` (those the rules read): no other is read, so
/// that a value the rules never read cannot make a line malformed.
fn kept(keep: &[HeaderName], name: &str) -> bool {
    keep.iter()
        .any(|kept| kept.as_str().eq_ignore_ascii_case(name))
}

fn jsonl(line: &str, keep: &[HeaderName]) -> Result<Record, String> {
    let parsed: JsonLine<'_> = serde_json::from_str(line).map_err(|err| err.to_string())?;
    let status = StatusCode::from_u16(parsed.status)
        .map_err(|_| format!("status {} is not an HTTP status", parsed.status))?;
    let headers = (parsed.headers.iter())
        .filter(|(name, _)| kept(keep, name))
        .flat_map(|(name, values)| values.iter().map(move |value| header(name, value)))
        .collect::<Result<_, _>>()?;
    Ok(Record {
        start_nanos: json_time(&parsed.time)?,
        duration: duration(parsed.duration_ms, parsed.duration_s)?,
        method: method(parsed.method.as_deref())?,
        target: target_of(&parsed.path)?,
        host: parsed.host.as_deref().map(host).transpose()?,
        peer: peer_or_none(parsed.ip.as_deref())?,
        status,
        headers,
    })
}

/// A CSV line's fields: split at commas, a field in quotes may hold commas and doubled quotes.
fn csv_fields(line: &str) -> Result<Vec<Cow<'_, str>>, String> {
    let mut fields = Vec::new();
    let mut rest = line;
    loop {
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((index, c)) = chars.next() {
                if c == '"' {
                    if quoted[index + 1..].starts_with('"') {
                        value.push('"');
                        chars.next();
                    } else {
                        end = Some(index + 1);
                        break;
                    }
                } else {
                    value.push(c);
                }
            }
            let end = end.ok_or("a quoted field has no closing quote")?;
            fields.push(Cow::Owned(value));
            rest = &quoted[end..];
            match rest.strip_prefix(',') {
                Some(next) => rest = next,
                None if rest.is_empty() => return Ok(fields),
                None => return Err("a quoted field goes on after its closing quote".into()),
            }
        } else {
            match rest.split_once(',') {
                Some((field, next)) => {
                    fields.push(Cow::Borrowed(field.trim()));
                    rest = next;
                }
                None => {
                    fields.push(Cow::Borrowed(rest.trim()));
                    return Ok(fields);
                }
            }
        }
    }
}

fn csv(columns: &[String], line: &str, keep: &[HeaderName]) -> Result<Record, String> {
    let fields = csv_fields(line)?;
    if fields.len() != columns.len() {
        return Err(format!(
            "{} fields where the header names {} columns",
            fields.len(),
            columns.len()
        ));
    }
    let get = |names: &[&str]| {
        columns
            .iter()
            .position(|column| names.contains(&column.as_str()))
            .map(|index| fields[index].as_ref())
            .filter(|value| !value.is_empty())
    };
    let number = |names: &[&str]| -> Result<Option<f64>, String> {
        get(names)
            .map(|text| {
                text.parse::<f64>()
                    .map_err(|_| format!("`{}` is not a number: `{text}`", names[0]))
            })
            .transpose()
    };
    let time = get(&["time"]).ok_or("it has no time")?;
    let start_nanos = match time.parse::<f64>() {
        Ok(seconds) => parse_unix_seconds(seconds),
        Err(_) => parse_rfc3339(time),
    }
    .ok_or_else(|| format!("time `{time}` is neither RFC 3339 nor Unix seconds"))?;
    let mut headers = Vec::new();
    for (column, value) in columns.iter().zip(&fields) {
        if let Some(name) = column.strip_prefix("header:") {
            if !value.is_empty() && kept(keep, name) {
                headers.push(header(name, value)?);
            }
        }
    }
    Ok(Record {
        start_nanos,
        duration: duration(number(&["duration_ms"])?, number(&["duration_s"])?)?,
        method: method(get(&["method"]))?,
        target: target_of(get(&["path", "target", "uri"]).ok_or("it has no path")?)?,
        host: get(&["host"]).map(host).transpose()?,
        peer: peer_or_none(get(&["ip", "peer", "remote_addr"]))?,
        status: status(get(&["status"]).ok_or("it has no status")?)?,
        headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reading `format`, keeping the headers the tests look at.
    fn every_header(format: Format) -> Reading {
        let names = [
            "x-api-key",
            "x-forwarded-for",
            "user-agent",
            "x-request-id",
            "referer",
        ];
        Reading {
            format,
            pattern: None,
            headers: names.iter().map(|n| HeaderName::from_static(n)).collect(),
        }
    }

    const AT: u64 = 1_796_378_400_000_000_000;

    #[test]
    fn an_nginx_line_reads_its_request_and_arrival() {
        let line = r#"203.0.113.5 - alice [04/Dec/2026:10:00:01 +0000] "GET /api/orders?id=7 HTTP/1.1" 200 512 "https://shop.example/" "curl/8.5" 0.250 0.249"#;
        let record = Parser::new(&every_header(Format::Auto))
            .parse(line)
            .unwrap()
            .unwrap();
        assert_eq!(record.start_nanos, AT + 750_000_000);
        assert_eq!(record.duration, Duration::from_millis(250));
        assert_eq!(record.method, Method::GET);
        assert_eq!(record.target, "/api/orders?id=7");
        assert_eq!(record.peer, "203.0.113.5".parse::<IpAddr>().unwrap());
        assert_eq!(record.status, StatusCode::OK);
        assert_eq!(record.headers.len(), 2);
        assert_eq!(record.end_nanos(), AT + 1_000_000_000);
    }

    #[test]
    fn a_malformed_nginx_line_says_what_is_wrong() {
        let cases = [
            ("nonsense", "is not an IP address"),
            (
                r#"1.2.3.4 - - 04/Dec/2026:10:00:01 +0000 "GET / HTTP/1.1" 200 1 "-" "-" 0.1"#,
                "should start with `[`",
            ),
            (
                r#"1.2.3.4 - - [04/Dec/2026:10:00:01 +0000] "\x16\x03\x01" 400 1 "-" "-" 0.1"#,
                "is not `METHOD TARGET PROTOCOL`",
            ),
            (
                r#"1.2.3.4 - - [04/Dec/2026:10:00:01 +0000] "GET / HTTP/1.1" 2000 1 "-" "-" 0.1"#,
                "not an HTTP status",
            ),
            (
                r#"1.2.3.4 - - [04/Dec/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 1 "-" "-""#,
                "ends before its request time",
            ),
            (
                r#"1.2.3.4 - - [04/Dec/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 1 "-" "-" -"#,
                "not a number of seconds",
            ),
        ];
        for (line, why) in cases {
            let err = Parser::new(&every_header(Format::Nginx))
                .parse(line)
                .unwrap_err();
            assert!(err.contains(why), "{line}: {err}");
        }
    }

    #[test]
    fn a_bad_value_in_a_header_no_rule_reads_leaves_the_line_good() {
        let line = r#"{"time":1796378400,"path":"/","status":200,"duration_ms":1,"headers":{"x-unread":"a\u0001b"}}"#;
        let mut unread = Parser::new(&every_header(Format::Jsonl));
        let record = unread.parse(line).unwrap().unwrap();
        assert!(record.headers.is_empty());
        let mut read = Parser::new(&Reading {
            headers: Arc::from([HeaderName::from_static("x-unread")]),
            ..every_header(Format::Jsonl)
        });
        let err = read.parse(line).unwrap_err();
        assert!(err.contains("x-unread"), "{err}");
        let csv = "time,status,path,duration_ms,header:X-Unread\n1796378400,200,/,1,a\u{1}b";
        let mut lines = csv.lines();
        let mut unread = Parser::new(&every_header(Format::Csv));
        assert!(unread.parse(lines.next().unwrap()).unwrap().is_none());
        assert!(unread.parse(lines.next().unwrap()).unwrap().is_some());
    }

    #[test]
    fn json_lines_read_their_fields_and_aliases() {
        let mut parser = Parser::new(&every_header(Format::Auto));
        let line = r#"{"time":"2026-12-04T10:00:00.5Z","method":"POST","target":"/api/pay","status":503,"duration_ms":12.5,"peer":"2001:db8::1","host":"shop.example","headers":{"x-api-key":"k1"}}"#;
        let record = parser.parse(line).unwrap().unwrap();
        assert_eq!(record.start_nanos, AT + 500_000_000);
        assert_eq!(record.method, Method::POST);
        assert_eq!(record.status.as_u16(), 503);
        assert_eq!(record.duration, Duration::from_micros(12_500));
        assert_eq!(record.host.unwrap(), "shop.example");
        assert_eq!(record.headers[0].0, "x-api-key");
        // A header given several times, as an array, in order.
        let line = r#"{"time":1796378400,"path":"/","status":200,"duration_ms":1,"headers":{"x-forwarded-for":["10.0.0.1","10.0.0.2"]}}"#;
        let record = parser.parse(line).unwrap().unwrap();
        let values: Vec<_> = (record.headers.iter())
            .map(|(_, v)| v.to_str().unwrap())
            .collect();
        assert_eq!(values, ["10.0.0.1", "10.0.0.2"]);
        let line = r#"{"time":1796378400.25,"path":"/","status":200,"duration_s":0.1}"#;
        let record = parser.parse(line).unwrap().unwrap();
        assert_eq!(record.start_nanos, AT + 250_000_000);
        assert_eq!(record.peer, IpAddr::from([0, 0, 0, 0]));
        for (line, why) in [
            (
                r#"{"time":"yesterday","path":"/","status":200,"duration_ms":1}"#,
                "not RFC 3339",
            ),
            (r#"{"time":1,"path":"/","status":200}"#, "no `duration_ms`"),
            (
                r#"{"time":1,"path":"/","status":200,"duration_ms":-1}"#,
                "is not a time",
            ),
            (
                r#"{"time":1,"path":"/","duration_ms":1}"#,
                "missing field `status`",
            ),
            (r#"{"time":1,"path":"/","#, "EOF"),
            (
                r#"{"time":1,"path":"no slash","status":200,"duration_ms":1}"#,
                "is not a",
            ),
        ] {
            let err = parser.parse(line).unwrap_err();
            assert!(err.contains(why), "{line}: {err}");
        }
    }

    #[test]
    fn envoy_lines_read_as_envoy_writes_them() {
        let line = r#"[2026-12-04T10:00:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28, 10.0.0.1" "nsq2http" "cc21d9b0" "locations" "tcp://10.0.2.1:80""#;
        let record = Parser::new(&every_header(Format::Auto))
            .parse(line)
            .unwrap()
            .unwrap();
        assert_eq!(record.start_nanos, AT + 310_000_000);
        assert_eq!(record.duration, Duration::from_millis(226));
        assert_eq!(record.method, Method::POST);
        assert_eq!(record.target, "/api/v1/locations");
        assert_eq!(record.status.as_u16(), 204);
        assert_eq!(record.peer, "10.0.35.28".parse::<IpAddr>().unwrap());
        assert_eq!(record.host.unwrap(), "locations");
        assert_eq!(record.headers.len(), 3);
        let line =
            r#"[2026-12-04T10:00:00.310Z] "GET / HTTP/1.1" 200 - 0 0 1 - "-" "-" "-" "-" "-""#;
        let record = Parser::new(&every_header(Format::Envoy))
            .parse(line)
            .unwrap()
            .unwrap();
        assert_eq!(
            (record.peer, record.host, record.headers.len()),
            (IpAddr::from([0, 0, 0, 0]), None, 0)
        );
        let err = Parser::new(&every_header(Format::Envoy))
            .parse(r#"[2026-12-04T10:00:00Z] "GET / HTTP/1.1" 200 - 0 0 x"#)
            .unwrap_err();
        assert!(err.contains("is not milliseconds"), "{err}");
        let json = r#"{"start_time":"2026-12-04T10:00:00.500Z","method":"GET","path":"/a?b=1","response_code":"503","duration":12,"downstream_remote_address":"192.0.2.9:5555","authority":"shop","user_agent":"-"}"#;
        let record = Parser::new(&every_header(Format::Auto))
            .parse(json)
            .unwrap()
            .unwrap();
        assert_eq!(record.start_nanos, AT + 500_000_000);
        assert_eq!(record.status.as_u16(), 503);
        assert_eq!(record.duration, Duration::from_millis(12));
        assert_eq!(record.peer, "192.0.2.9".parse::<IpAddr>().unwrap());
        assert_eq!(record.headers.len(), 0);
        let err = Parser::new(&every_header(Format::EnvoyJson))
            .parse(r#"{"start_time":"x","path":"/","response_code":200,"duration":1}"#)
            .unwrap_err();
        assert!(err.contains("start_time `x` is not RFC 3339"), "{err}");
    }

    #[test]
    fn durations_past_a_day_and_odd_headers_and_envoy_s_status_0() {
        let long =
            r#"1.2.3.4 - - [04/Dec/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 1 "-" "-" 90000"#;
        let err = Parser::new(&every_header(Format::Nginx))
            .parse(long)
            .unwrap_err();
        assert!(err.contains("longer than a day"), "{err}");
        let long = r#"{"time":1,"path":"/","status":200,"duration_s":1e9}"#;
        let err = Parser::new(&every_header(Format::Jsonl))
            .parse(long)
            .unwrap_err();
        assert!(err.contains("longer than a day"), "{err}");
        // A byte-order mark and quoted column names are still a CSV header.
        let mut parser = Parser::new(&every_header(Format::Auto));
        assert_eq!(
            parser
                .parse("\u{feff}\"time\",\"status\",\"path\",\"duration_ms\"")
                .unwrap(),
            None
        );
        assert!(parser.parse("1796378400,200,/,1").unwrap().is_some());
        let gone =
            r#"[2026-12-04T10:00:00.310Z] "GET / HTTP/1.1" 0 DC 0 0 5 - "-" "-" "-" "-" "-""#;
        let record = Parser::new(&every_header(Format::Auto))
            .parse(gone)
            .unwrap()
            .unwrap();
        assert_eq!(record.status.as_u16(), 499);
    }

    #[test]
    fn csv_reads_its_columns_from_its_header() {
        let mut parser = Parser::new(&every_header(Format::Auto));
        assert_eq!(
            parser
                .parse("time,path,status,duration_ms,ip,header:x-api-key")
                .unwrap(),
            None
        );
        let record = parser
            .parse(r#"2026-12-04T10:00:00Z,"/search?q=a,b",200,3,10.0.0.1,"say ""hi""""#)
            .unwrap()
            .unwrap();
        assert_eq!(record.start_nanos, AT);
        assert_eq!(record.target, "/search?q=a,b");
        assert_eq!(record.headers[0].1, "say \"hi\"");
        let err = parser.parse("1796378400,/,200").unwrap_err();
        assert!(err.contains("3 fields where the header names 6"), "{err}");
        let err = Parser::new(&every_header(Format::Csv))
            .parse("a,b")
            .unwrap_err();
        assert!(err.contains("must name its columns"), "{err}");
        assert_eq!(
            csv_fields(r#""a"b"#).unwrap_err(),
            "a quoted field goes on after its closing quote"
        );
    }
}
