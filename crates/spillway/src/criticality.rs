//! How much a request matters when a limit must turn some away: Google's four criticalities,
//! in order, with `Critical` the default for requests that carry none.

use std::fmt;
use std::str::FromStr;

/// How much a request matters when a limit must turn some away (the four criticalities of
/// Google's SRE book, lowest first). An adaptive limit's queue hands a freed place to the most
/// critical waiter first, and when it is full a newcomer takes the place of a less critical
/// waiter (see [`AdaptiveQueue`](crate::adaptive::AdaptiveQueue)). A request that carries none
/// is [`Critical`](Self::Critical), as at Google: mark what may be shed, and what must not be.
///
/// Names, as [`as_str`](Self::as_str) writes them and [`FromStr`] reads them (in any case, with
/// `-` or `_`): `sheddable`, `sheddable_plus`, `critical`, `critical_plus`.
///
/// # Examples
///
/// ```
/// use spillway::Criticality;
///
/// assert!(Criticality::CriticalPlus > Criticality::Critical);
/// assert!(Criticality::Sheddable < Criticality::SheddablePlus);
/// assert_eq!(Criticality::default(), Criticality::Critical);
/// assert_eq!("Sheddable-Plus".parse::<Criticality>()?, Criticality::SheddablePlus);
/// assert!("urgent".parse::<Criticality>().is_err());
/// # Ok::<(), spillway::ParseCriticalityError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Criticality {
    /// Work whose loss is expected often, in part or in whole: prefetches, crawlers, retries
    /// of batch work.
    Sheddable = 0,
    /// Work that expects partial unavailability: batch jobs that retry.
    SheddablePlus = 1,
    /// The default: production traffic whose failure users see.
    #[default]
    Critical = 2,
    /// Work whose failure is serious for users: a checkout, a login.
    CriticalPlus = 3,
}

impl Criticality {
    /// Every criticality, lowest first.
    pub const ALL: [Criticality; 4] = [
        Criticality::Sheddable,
        Criticality::SheddablePlus,
        Criticality::Critical,
        Criticality::CriticalPlus,
    ];

    /// Its name: `sheddable`, `sheddable_plus`, `critical` or `critical_plus`.
    pub fn as_str(self) -> &'static str {
        match self {
            Criticality::Sheddable => "sheddable",
            Criticality::SheddablePlus => "sheddable_plus",
            Criticality::Critical => "critical",
            Criticality::CriticalPlus => "critical_plus",
        }
    }

    /// Its rank, 0 (sheddable) to 3 (critical plus).
    pub fn rank(self) -> usize {
        self as usize
    }

    /// The criticality of rank `rank` (0 to 3), if there is one.
    pub fn from_rank(rank: usize) -> Option<Self> {
        Self::ALL.get(rank).copied()
    }
}

impl fmt::Display for Criticality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no criticality (see [`Criticality`] for the names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseCriticalityError {
    name: String,
}

impl fmt::Display for ParseCriticalityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The name is shown as a debug string: it may come from a client's header.
        write!(
            f,
            "{:?} is no criticality: sheddable, sheddable_plus, critical or critical_plus",
            self.name.chars().take(64).collect::<String>()
        )
    }
}

impl std::error::Error for ParseCriticalityError {}

impl FromStr for Criticality {
    type Err = ParseCriticalityError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let trimmed = name.trim();
        Criticality::ALL
            .into_iter()
            .find(|criticality| {
                let known = criticality.as_str();
                known.len() == trimmed.len()
                    && known.bytes().zip(trimmed.bytes()).all(|(k, t)| {
                        let t = if t == b'-' { b'_' } else { t };
                        k == t.to_ascii_lowercase()
                    })
            })
            .ok_or_else(|| ParseCriticalityError {
                name: name.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_in_any_case_and_bad_ones_are_named_in_the_error() {
        for criticality in Criticality::ALL {
            assert_eq!(criticality.as_str().parse(), Ok(criticality));
            assert_eq!(
                criticality
                    .as_str()
                    .to_uppercase()
                    .replace('_', "-")
                    .parse(),
                Ok(criticality)
            );
            assert_eq!(
                Criticality::from_rank(criticality.rank()),
                Some(criticality)
            );
        }
        assert_eq!(" critical ".parse(), Ok(Criticality::Critical));
        assert_eq!(Criticality::from_rank(4), None);
        for bad in [
            "",
            "critical plus",
            "criticalplus",
            "ürgent",
            "critical_plus_",
        ] {
            let err = bad.parse::<Criticality>().unwrap_err();
            assert!(err.to_string().contains("is no criticality"), "{err}");
        }
        let long = "x".repeat(10_000);
        assert!(long.parse::<Criticality>().unwrap_err().to_string().len() < 200);
    }
}
