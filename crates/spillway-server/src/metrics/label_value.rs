//! A label's value as the text exposition format needs it written.

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use std::fmt::Write as _;

/// A label value, written escaped: `\` as `\\`, `"` as `\"` and a line break as `\n`, as the
/// exposition format requires (`prometheus-client` writes values as given). Resource names and
/// rule ids come from the file and the admin API: unescaped, a `"` or a line break in one ended
/// its series early and let the rest of the value be read as series of its own.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(crate) struct LabelValue(String);

impl LabelValue {
    /// The value as given.
    #[cfg(test)]
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for LabelValue {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl From<String> for LabelValue {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::registry::Registry;

    #[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
    struct Named {
        resource: LabelValue,
    }

    #[test]
    fn quotes_backslashes_and_line_breaks_are_escaped() {
        let family = Family::<Named, Counter>::default();
        let hostile = "evil\"} 1\n# EOF\nfake{a=\"b\\";
        family
            .get_or_create(&Named {
                resource: hostile.into(),
            })
            .inc();
        let mut registry = Registry::default();
        registry.register("requests", "Requests", family);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        let series: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            series,
            [r#"requests_total{resource="evil\"} 1\n# EOF\nfake{a=\"b\\"} 1"#],
            "{text}"
        );
        assert_eq!(LabelValue::from(hostile).as_str(), hostile);
    }
}
