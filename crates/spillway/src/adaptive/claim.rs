//! What a caller brings to an adaptive limit's queue: its criticality, its tenant and its
//! deadline.

use crate::Criticality;

/// [`Claim::deadline`] when the caller has none.
pub(crate) const NO_DEADLINE: u64 = u64::MAX;

/// What a caller brings to an adaptive limit's queue: the queue hands places to the most
/// critical first, turn about between tenants within a criticality, and refuses a caller that
/// cannot be done by its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) criticality: Criticality,
    /// The tenant's fingerprint (see [`crate::keyed::fingerprint`]); 0 for none.
    pub(crate) tenant: u64,
    /// Clock nanoseconds by which the call must be done; [`NO_DEADLINE`] for none.
    pub(crate) deadline: u64,
}

impl Default for Claim {
    fn default() -> Self {
        Self {
            criticality: Criticality::default(),
            tenant: 0,
            deadline: NO_DEADLINE,
        }
    }
}

impl Claim {
    /// The claim with its deadline, held as the time left (as a builder holds it), made a
    /// clock time from `now`.
    pub(crate) fn starting_at(self, now: u64) -> Self {
        if self.deadline == NO_DEADLINE {
            return self;
        }
        Self {
            deadline: now.saturating_add(self.deadline).min(NO_DEADLINE - 1),
            ..self
        }
    }

    /// Whether a call started at `now` and taking `expected` nanoseconds would end past the
    /// deadline (or the deadline has passed).
    pub(crate) fn too_late(&self, now: u64, expected: u64) -> bool {
        self.deadline != NO_DEADLINE
            && (now >= self.deadline || now.saturating_add(expected) > self.deadline)
    }

    /// The time left until the deadline at `now`, in nanoseconds (`u64::MAX` for none).
    pub(crate) fn left(&self, now: u64) -> u64 {
        if self.deadline == NO_DEADLINE {
            u64::MAX
        } else {
            self.deadline.saturating_sub(now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_late_when_past_or_when_the_call_would_end_past_it() {
        let none = Claim::default();
        assert!(!none.too_late(u64::MAX - 1, u64::MAX));
        assert_eq!(none.left(5), u64::MAX);
        let claim = Claim {
            deadline: 100,
            ..Claim::default()
        };
        assert!(!claim.too_late(50, 50));
        assert!(claim.too_late(50, 51));
        assert!(claim.too_late(100, 0));
        assert!(claim.too_late(u64::MAX - 1, 0));
        assert_eq!((claim.left(40), claim.left(140)), (60, 0));
        assert_eq!(claim.starting_at(1_000).deadline, 1_100);
        assert_eq!(none.starting_at(1_000), none);
        let far = Claim {
            deadline: u64::MAX - 1,
            ..Claim::default()
        };
        assert_eq!(far.starting_at(5).deadline, NO_DEADLINE - 1);
    }
}
