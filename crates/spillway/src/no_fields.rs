//! Strict reading of the field-less variants of internally tagged enums: serde's derive lets
//! `{ type = "reject", zz = 1 }` through as `Reject`, ignoring `zz` even under
//! `deny_unknown_fields`, where a variant with fields refuses it. With
//! `#[serde(deserialize_with = "crate::no_fields::deserialize")]` on the variant, a stray field
//! is refused there too, naming it.

use serde::{Deserialize, Deserializer};

/// Reads the rest of a field-less variant's table: nothing may be in it.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<(), D::Error> {
    /// No field at all.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Empty {}
    Empty::deserialize(deserializer).map(|Empty {}| ())
}

#[cfg(test)]
mod tests {
    use crate::adaptive::Sampling;
    use crate::flow::{Behavior, Strategy};
    use crate::keyed::KeyedBehavior;
    use crate::system::MinRtEstimate;

    #[test]
    fn a_field_less_variant_refuses_a_stray_field_and_takes_none() {
        fn check<T: serde::de::DeserializeOwned + std::fmt::Debug>(tag: &str) {
            let bare = format!(r#"{{"type": "{tag}"}}"#);
            serde_json::from_str::<T>(&bare).unwrap_or_else(|err| panic!("{tag}: {err}"));
            let stray = format!(r#"{{"type": "{tag}", "zz": 1}}"#);
            let err = serde_json::from_str::<T>(&stray).unwrap_err().to_string();
            assert!(err.contains("unknown field `zz`"), "{tag}: {err}");
        }
        check::<Behavior>("reject");
        check::<Strategy>("direct");
        check::<KeyedBehavior>("reject");
        check::<Sampling>("every_sample");
        check::<MinRtEstimate>("exact");
        // Written back as they were.
        assert_eq!(
            serde_json::to_string(&Behavior::Reject).unwrap(),
            r#"{"type":"reject"}"#
        );
    }
}
