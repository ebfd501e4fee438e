//! gRPC's `grpc-timeout` field: read strictly, and written for the time a request has left.
//!
//! The grammar (gRPC over HTTP/2): a positive integer of at most 8 ASCII digits, then a unit:
//! `H` hours, `M` minutes, `S` seconds, `m` milliseconds, `u` microseconds, `n` nanoseconds
//! (case matters: `M` is minutes, `m` milliseconds). A malformed value is ignored, as if
//! absent (as tonic does); so is a field given twice.

use http::{HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;

/// `grpc-timeout`, parsed once.
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// Most digits a value may have.
const MAX_DIGITS: usize = 8;

/// The largest value 8 digits hold.
const MAX_VALUE: u64 = 99_999_999;

/// Each unit's letter and nanoseconds, finest first.
const UNITS: [(u8, u64); 6] = [
    (b'n', 1),
    (b'u', 1_000),
    (b'm', 1_000_000),
    (b'S', 1_000_000_000),
    (b'M', 60_000_000_000),
    (b'H', 3_600_000_000_000),
];

/// The timeout a `grpc-timeout` value says, or `None` if it is malformed: empty, more than 8
/// digits, anything but ASCII digits before the unit (no sign, no space), or an unknown unit.
/// `0n` is a timeout of zero: already expired.
///
/// # Examples
///
/// ```
/// use spillway_tower::grpc::parse_grpc_timeout;
/// use std::time::Duration;
///
/// assert_eq!(parse_grpc_timeout(b"1S"), Some(Duration::from_secs(1)));
/// assert_eq!(parse_grpc_timeout(b"250m"), Some(Duration::from_millis(250)));
/// assert_eq!(parse_grpc_timeout(b"2M"), Some(Duration::from_secs(120)));
/// for bad in [&b""[..], b"S", b"+5S", b"5s", b"123456789H", b"1.5S", b" 1S"] {
///     assert_eq!(parse_grpc_timeout(bad), None);
/// }
/// ```
pub fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > MAX_DIGITS || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let count = digits
        .iter()
        .fold(0u64, |count, digit| count * 10 + u64::from(digit - b'0'));
    let (_, nanos) = UNITS.iter().find(|(letter, _)| *letter == unit)?;
    // At most 99,999,999 hours: 3.6e20 ns would not fit in a u64, so hours and minutes go
    // through seconds.
    Some(if *nanos >= 1_000_000_000 {
        Duration::from_secs(count * (nanos / 1_000_000_000))
    } else {
        Duration::from_nanos(count * nanos)
    })
}

/// The timeout of a request's one `grpc-timeout` field, or `None` when it has none, has two,
/// or has a malformed one.
///
/// # Examples
///
/// ```
/// use http::HeaderMap;
/// use spillway_tower::grpc::{grpc_timeout, GRPC_TIMEOUT};
/// use std::time::Duration;
///
/// let mut headers = HeaderMap::new();
/// headers.insert(GRPC_TIMEOUT, "100m".parse()?);
/// assert_eq!(grpc_timeout(&headers), Some(Duration::from_millis(100)));
/// headers.append(GRPC_TIMEOUT, "5S".parse()?);
/// assert_eq!(grpc_timeout(&headers), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let mut values = headers.get_all(GRPC_TIMEOUT).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    parse_grpc_timeout(value.as_bytes())
}

/// `left` as a `grpc-timeout` value, in the finest unit it fits in 8 digits, rounded down (a
/// service told it has more time than is left would work for a caller that has gone): `0n`
/// for nothing left, at most `99999999H`.
///
/// # Examples
///
/// ```
/// use spillway_tower::grpc::encode_grpc_timeout;
/// use std::time::Duration;
///
/// assert_eq!(encode_grpc_timeout(Duration::from_millis(250)), "250000u");
/// assert_eq!(encode_grpc_timeout(Duration::from_nanos(1_234_567_891)), "1234567u");
/// assert_eq!(encode_grpc_timeout(Duration::from_secs(3 * 3600)), "10800000m");
/// assert_eq!(encode_grpc_timeout(Duration::ZERO), "0n");
/// ```
pub fn encode_grpc_timeout(left: Duration) -> HeaderValue {
    let nanos = left.as_nanos();
    let (count, unit) = UNITS
        .iter()
        .map(|&(letter, unit)| (nanos / u128::from(unit), letter))
        .find(|&(count, _)| count <= u128::from(MAX_VALUE))
        .unwrap_or((u128::from(MAX_VALUE), b'H'));
    let mut text = itoa::Buffer::new().format(count).to_owned();
    text.push(char::from(unit));
    // Digits and a unit letter: always a valid header value.
    HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("0n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_reads_back_what_it_writes_rounded_down() {
        for left in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_nanos(99_999_999),
            Duration::from_nanos(100_000_001),
            Duration::from_millis(1_500),
            Duration::from_secs(100_000),
            Duration::from_secs(99_999_999 * 60),
            Duration::from_secs(99_999_999 * 3600),
        ] {
            let written = encode_grpc_timeout(left);
            let read = parse_grpc_timeout(written.as_bytes()).unwrap();
            assert!(read <= left, "{left:?} -> {written:?} -> {read:?}");
            // Rounded down by less than one unit of the one chosen, which is at most a
            // 100,000th of the time left (the next finer unit overflowed 8 digits, and units
            // are at most 1,000 apart).
            assert!(
                left - read <= left / 99_999 + Duration::from_nanos(1),
                "{left:?} -> {written:?}"
            );
        }
        // Past the largest value: the largest value.
        assert_eq!(encode_grpc_timeout(Duration::MAX), "99999999H");
        assert_eq!(
            parse_grpc_timeout(b"99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
    }

    #[test]
    fn malformed_values_are_none() {
        for bad in [
            &b"1"[..],
            b"1x",
            b"-1S",
            b"1 S",
            b"\xff1S",
            b"000000001S",
            b"1SS",
        ] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_grpc_timeout(b"00000001S"),
            Some(Duration::from_secs(1))
        );
        assert_eq!(parse_grpc_timeout(b"0n"), Some(Duration::ZERO));
    }
}
