//! Wall-clock times as access logs write them (nginx's, RFC 3339), read into nanoseconds since
//! the Unix epoch, and written as RFC 3339: for `spillway replay` and spillway's access log.

/// Days from 1970-01-01 to the civil date `year-month-day` (proleptic Gregorian), by Howard
/// Hinnant's `days_from_civil`.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The civil date of `days` since 1970-01-01: `(year, month, day)`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted + 2) / 5 + 1) as u32;
    let month = if shifted < 10 {
        shifted + 3
    } else {
        shifted - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn digits(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Nanoseconds since the epoch of a civil time and an offset east of UTC in seconds; `None`
/// before 1970 or past what nanoseconds in a `u64` hold (year 2554).
fn to_nanos(date: (i64, u32, u32), time: (u32, u32, u32), nanos: u32, offset: i64) -> Option<u64> {
    let (year, month, day) = date;
    let (hour, minute, second) = time;
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month).contains(&day)
        && hour < 24
        && minute < 60
        && second <= 60;
    if !valid {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400
        + i64::from(hour) * 3_600
        + i64::from(minute) * 60
        + i64::from(second)
        - offset;
    let seconds = u64::try_from(seconds).ok()?;
    seconds
        .checked_mul(1_000_000_000)?
        .checked_add(u64::from(nanos))
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// nginx's `$time_local`: `04/Dec/2026:10:00:00 +0100`.
pub(crate) fn parse_clf(text: &str) -> Option<u64> {
    // Every byte index below falls between characters.
    if !text.is_ascii() {
        return None;
    }
    let (stamp, zone) = text.split_once(' ')?;
    let mut parts = stamp.splitn(4, [':', '/']);
    let day = digits(parts.next()?)?;
    let month = parts.next()?;
    let month = MONTHS.iter().position(|name| *name == month)? as u32 + 1;
    let year = digits(parts.next()?)?;
    let mut clock = parts.next()?.split(':');
    let hour = digits(clock.next()?)?;
    let minute = digits(clock.next()?)?;
    let second = digits(clock.next()?)?;
    if clock.next().is_some() {
        return None;
    }
    let offset = zone_offset(zone)?;
    to_nanos(
        (i64::from(year), month, day),
        (hour, minute, second),
        0,
        offset,
    )
}

/// `+0100`, `-07:00` or `Z`: seconds east of UTC.
fn zone_offset(zone: &str) -> Option<i64> {
    if !zone.is_ascii() {
        return None;
    }
    if zone == "Z" || zone == "z" {
        return Some(0);
    }
    let sign = match zone.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest = zone[1..].replace(':', "");
    if rest.len() != 4 {
        return None;
    }
    let hours = i64::from(digits(&rest[..2])?);
    let minutes = i64::from(digits(&rest[2..])?);
    (hours < 24 && minutes < 60).then_some(sign * (hours * 3_600 + minutes * 60))
}

/// RFC 3339 (`2026-12-04T10:00:00.123Z`, `2026-12-04T11:00:00+01:00`; a space for the `T`
/// too), to the nanosecond.
pub(crate) fn parse_rfc3339(text: &str) -> Option<u64> {
    let text = text.trim();
    // Every byte index below falls between characters.
    if text.len() < 20 || !text.is_ascii() {
        return None;
    }
    let (date, rest) = text.split_at(10);
    let mut date_parts = date.split('-');
    let year = digits(date_parts.next()?)?;
    let month = digits(date_parts.next()?)?;
    let day = digits(date_parts.next()?)?;
    if date_parts.next().is_some() || !matches!(rest.as_bytes()[0], b'T' | b't' | b' ') {
        return None;
    }
    let rest = &rest[1..];
    let (clock, rest) = rest.split_at(8.min(rest.len()));
    let mut clock_parts = clock.split(':');
    let hour = digits(clock_parts.next()?)?;
    let minute = digits(clock_parts.next()?)?;
    let second = digits(clock_parts.next()?)?;
    let (nanos, zone) = match rest.strip_prefix('.') {
        Some(fraction) => {
            let end = fraction
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(fraction.len());
            let (digits_text, zone) = fraction.split_at(end);
            if digits_text.is_empty() {
                return None;
            }
            let mut nanos = 0u32;
            for (index, byte) in digits_text.bytes().take(9).enumerate() {
                nanos += u32::from(byte - b'0') * 10u32.pow(8 - index as u32);
            }
            (nanos, zone)
        }
        None => (0, rest),
    };
    let offset = zone_offset(zone)?;
    to_nanos(
        (i64::from(year), month, day),
        (hour, minute, second),
        nanos,
        offset,
    )
}

/// Unix seconds written as a number (`1733306400.123`), to the microsecond.
pub(crate) fn parse_unix_seconds(seconds: f64) -> Option<u64> {
    (seconds.is_finite() && (0.0..1.8e10).contains(&seconds))
        .then(|| (seconds * 1e6).round() as u64 * 1_000)
}

/// `nanos` since the epoch in RFC 3339, UTC, to the millisecond.
pub(crate) fn rfc3339(nanos: u64) -> String {
    let millis = (nanos % 1_000_000_000) / 1_000_000;
    written(nanos, format_args!("{millis:03}"))
}

/// `nanos` since the epoch in RFC 3339, UTC, to the microsecond (the access log's times).
pub(crate) fn rfc3339_micros(nanos: u64) -> String {
    let micros = (nanos % 1_000_000_000) / 1_000;
    written(nanos, format_args!("{micros:06}"))
}

/// The date and time of `nanos`' second, then `fraction`.
fn written(nanos: u64, fraction: std::fmt::Arguments<'_>) -> String {
    let seconds = nanos / 1_000_000_000;
    let days = (seconds / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let of_day = seconds % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{fraction}Z",
        of_day / 3_600,
        of_day / 60 % 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn nginx_local_times_read_with_their_offset() {
        // 2026-12-04T10:00:00Z is 1796378400 s after the epoch.
        assert_eq!(
            parse_clf("04/Dec/2026:10:00:00 +0000"),
            Some(1_796_378_400 * SECOND)
        );
        assert_eq!(
            parse_clf("04/Dec/2026:11:30:00 +0130"),
            Some(1_796_378_400 * SECOND)
        );
        assert_eq!(
            parse_clf("04/Dec/2026:03:00:00 -0700"),
            Some(1_796_378_400 * SECOND)
        );
        assert_eq!(
            parse_clf("29/Feb/2024:00:00:00 +0000"),
            Some(1_709_164_800 * SECOND)
        );
        for bad in [
            "",
            "04/Dec/2026:10:00:00",
            "04/Dex/2026:10:00:00 +0000",
            "04/Dec/2026:25:00:00 +0000",
            "04/Dec/2026:10:00 +0000",
            "4a/Dec/2026:10:00:00 +0000",
            "04/Dec/2026:10:00:00 +00000",
            "01/Jan/1969:00:00:00 +0000",
            "31/Feb/2026:10:00:00 +0000",
            "29/Feb/2025:10:00:00 +0000",
            "04/Dec/2026:10:00:00 +0\u{e9}0",
            "04/D\u{e9}c/2026:10:00:00 +0000",
        ] {
            assert_eq!(parse_clf(bad), None, "{bad}");
        }
    }

    #[test]
    fn rfc3339_reads_fractions_and_zones() {
        let at = 1_796_378_400 * SECOND;
        assert_eq!(parse_rfc3339("2026-12-04T10:00:00Z"), Some(at));
        assert_eq!(
            parse_rfc3339("2026-12-04 10:00:00.5Z"),
            Some(at + SECOND / 2)
        );
        assert_eq!(
            parse_rfc3339("2026-12-04T11:00:00.000000123+01:00"),
            Some(at + 123)
        );
        assert_eq!(
            parse_rfc3339("2026-12-04T10:00:00.1234567891Z"),
            Some(at + 123_456_789)
        );
        for bad in [
            "2026-12-04",
            "2026-12-04T10:00:00",
            "2026-13-04T10:00:00Z",
            "2026-12-04T10:00:00.Z",
            "x026-12-04T10:00:00Z",
            "2026-04-31T10:00:00Z",
            "2026-12-0\u{e9}10:00:00Z",
            "2026-12-04T10:00:0\u{e9}0Z",
            "2026-12-04T10:00:00+0\u{e9}:00",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn times_go_back_to_rfc3339() {
        assert_eq!(
            rfc3339(1_796_378_400 * SECOND + 5_000_000),
            "2026-12-04T10:00:00.005Z"
        );
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        let micros = 1_796_378_400 * SECOND + 5_123_456;
        assert_eq!(rfc3339_micros(micros), "2026-12-04T10:00:00.005123Z");
        assert_eq!(parse_rfc3339(&rfc3339_micros(micros)), Some(micros - 456));
        assert_eq!(rfc3339(1_709_164_800 * SECOND), "2024-02-29T00:00:00.000Z");
        for days in [0i64, 59, 60, 365, 10_957, 20_000, 200_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(parse_unix_seconds(1.5), Some(1_500_000_000));
        assert_eq!(parse_unix_seconds(-1.0), None);
        assert_eq!(parse_unix_seconds(f64::NAN), None);
    }
}
