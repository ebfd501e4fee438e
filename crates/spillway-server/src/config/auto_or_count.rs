//! A setting written as `"auto"` or a whole number (`listener.workers`,
//! `listener.max_connections`): how it is read from and written to the file.

use serde::de::{Error, Unexpected, Visitor};
use serde::{Deserializer, Serializer};
use std::fmt;
use std::ops::RangeInclusive;

/// Writes `None` as `"auto"` and a number as itself.
pub(super) fn serialize<S: Serializer>(count: Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match count {
        None => s.serialize_str("auto"),
        Some(count) => s.serialize_u64(count),
    }
}

/// Reads `"auto"` as `None` and a number in `valid` as itself; anything else is refused with
/// `expecting`, which says what the setting takes.
pub(super) fn deserialize<'de, D: Deserializer<'de>>(
    d: D,
    valid: RangeInclusive<u64>,
    expecting: &str,
) -> Result<Option<u64>, D::Error> {
    d.deserialize_any(AutoOrCount { valid, expecting })
}

/// Implements `Serialize` and `Deserialize` for an enum of `Auto` and `Count(u64)` through
/// [`serialize`] and [`deserialize`]: a number in `$valid`, or `"auto"`; `$expecting` says so.
macro_rules! serde_auto_or_count {
    ($type:ty, $valid:expr, $expecting:expr) => {
        impl serde::Serialize for $type {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let count = match self {
                    Self::Auto => None,
                    Self::Count(count) => Some(*count),
                };
                super::auto_or_count::serialize(count, s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $type {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let count = super::auto_or_count::deserialize(d, $valid, &$expecting)?;
                Ok(count.map_or(Self::Auto, Self::Count))
            }
        }
    };
}
pub(super) use serde_auto_or_count;

struct AutoOrCount<'a> {
    valid: RangeInclusive<u64>,
    expecting: &'a str,
}

impl Visitor<'_> for AutoOrCount<'_> {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_i64<E: Error>(self, value: i64) -> Result<Option<u64>, E> {
        match u64::try_from(value) {
            Ok(value) => self.visit_u64(value),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(value), &self)),
        }
    }

    fn visit_u64<E: Error>(self, value: u64) -> Result<Option<u64>, E> {
        if self.valid.contains(&value) {
            Ok(Some(value))
        } else {
            Err(E::invalid_value(Unexpected::Unsigned(value), &self))
        }
    }

    fn visit_str<E: Error>(self, value: &str) -> Result<Option<u64>, E> {
        match value {
            "auto" => Ok(None),
            other => Err(E::invalid_value(Unexpected::Str(other), &self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    /// A setting from 2 to 9, or `"auto"`.
    #[derive(Debug, PartialEq)]
    struct Setting(Option<u64>);

    impl Serialize for Setting {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            super::serialize(self.0, s)
        }
    }

    impl<'de> Deserialize<'de> for Setting {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            super::deserialize(d, 2..=9, "from 2 to 9, or \"auto\"").map(Setting)
        }
    }

    #[derive(Debug, Deserialize, Serialize)]
    struct Section {
        setting: Setting,
    }

    fn parse(value: &str) -> Result<Setting, String> {
        toml::from_str::<Section>(&format!("setting = {value}"))
            .map(|section| section.setting)
            .map_err(|err| err.message().to_owned())
    }

    #[test]
    fn auto_or_a_number_in_range_and_nothing_else() {
        assert_eq!(parse("\"auto\""), Ok(Setting(None)));
        assert_eq!(parse("2"), Ok(Setting(Some(2))));
        assert_eq!(parse("9"), Ok(Setting(Some(9))));
        for bad in ["1", "10", "-1", "\"Auto\"", "\"many\"", "1.5", "true"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("from 2 to 9, or \"auto\""), "{bad}: {err}");
        }
        for (setting, text) in [(None, "\"auto\""), (Some(4), "4")] {
            let section = Section {
                setting: Setting(setting),
            };
            let written = toml::to_string(&section).unwrap();
            assert_eq!(written.trim(), format!("setting = {text}"));
        }
    }
}
