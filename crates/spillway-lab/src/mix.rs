//! Who sends a scenario's requests, and what they claim: a criticality, a tenant, a deadline.
//! What each group of them got is [`crate::mix_result`]'s. The claims are drawn from a random stream of their own, so that a
//! scenario's arrival times and work are those of a sweep at the same load.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use spillway::Criticality;
use std::time::Duration;

/// The random stream of the claims (arrivals and their work draw from stream 1, retries' jitter
/// from 2).
pub(crate) const CLAIM_STREAM: u64 = 3;

/// The mixed scenario's classes, by share of the requests: 20% critical (`critical_plus`: a
/// checkout), 30% default (`critical`, what a request that claims nothing is), 50% sheddable
/// (a prefetch).
pub const CRITICALITY_MIX: [(Criticality, f64); 3] = [
    (Criticality::CriticalPlus, 0.2),
    (Criticality::Critical, 0.3),
    (Criticality::Sheddable, 0.5),
];

/// The noisy-tenant scenario's tenants: ten, the first offering this many times the rate of
/// each other one.
pub const NOISY_TENANTS: u16 = 10;
/// See [`NOISY_TENANTS`].
pub const NOISY_FACTOR: f64 = 20.0;

/// The deadline scenario's deadline, which is also its clients' timeout.
pub const DEADLINE: Duration = Duration::from_millis(100);

/// Who sends a scenario's requests, and what they claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mix {
    /// [`CRITICALITY_MIX`]: one tenant, no deadline.
    Criticality,
    /// [`NOISY_TENANTS`] tenants of one criticality, the first [`NOISY_FACTOR`] times as busy
    /// as each other one.
    NoisyTenant,
    /// One class, one tenant, every request with a [`DEADLINE`] (its client's timeout).
    Deadlines,
}

/// What one request claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Its criticality.
    pub class: Criticality,
    /// Its tenant, 0 to [`NOISY_TENANTS`] - 1 (0 where there is one).
    pub tenant: u16,
}

impl Default for Claim {
    fn default() -> Self {
        Self {
            class: Criticality::Critical,
            tenant: 0,
        }
    }
}

impl Mix {
    /// Every mix.
    pub const ALL: [Mix; 3] = [Mix::Criticality, Mix::NoisyTenant, Mix::Deadlines];

    /// The scenario's name: `mixed_criticality`, `noisy_tenant` or `deadlines`.
    pub fn name(self) -> &'static str {
        match self {
            Mix::Criticality => "mixed_criticality",
            Mix::NoisyTenant => "noisy_tenant",
            Mix::Deadlines => "deadlines",
        }
    }

    /// The deadline each attempt claims, if any (its client's timeout too).
    pub fn deadline(self) -> Option<Duration> {
        (self == Mix::Deadlines).then_some(DEADLINE)
    }

    /// Draws the claim of the next request.
    pub(crate) fn draw(self, rng: &mut ChaCha8Rng) -> Claim {
        let pick: f64 = rng.random();
        match self {
            Mix::Criticality => {
                let mut sum = 0.0;
                let class = CRITICALITY_MIX
                    .iter()
                    .find(|(_, share)| {
                        sum += share;
                        pick < sum
                    })
                    .map_or(Criticality::Sheddable, |(class, _)| *class);
                Claim { class, tenant: 0 }
            }
            Mix::NoisyTenant => {
                // The noisy tenant's share of the requests: 20 / (20 + 9).
                let total = NOISY_FACTOR + f64::from(NOISY_TENANTS - 1);
                let noisy = NOISY_FACTOR / total;
                let tenant = if pick < noisy {
                    0
                } else {
                    let quiet =
                        ((pick - noisy) / (1.0 - noisy) * f64::from(NOISY_TENANTS - 1)) as u16;
                    1 + quiet.min(NOISY_TENANTS - 2)
                };
                Claim {
                    class: Criticality::Critical,
                    tenant,
                }
            }
            Mix::Deadlines => Claim::default(),
        }
    }

    /// The share of the requests each group of this mix sends: by class (in
    /// [`CRITICALITY_MIX`]'s order), or by tenant.
    pub fn shares(self) -> Vec<(String, f64)> {
        match self {
            Mix::Criticality => CRITICALITY_MIX
                .iter()
                .map(|(class, share)| (class.as_str().to_owned(), *share))
                .collect(),
            Mix::NoisyTenant => {
                let total = NOISY_FACTOR + f64::from(NOISY_TENANTS - 1);
                (0..NOISY_TENANTS)
                    .map(|tenant| {
                        let weight = if tenant == 0 { NOISY_FACTOR } else { 1.0 };
                        (
                            group_name(
                                self,
                                Claim {
                                    class: Criticality::Critical,
                                    tenant,
                                },
                            ),
                            weight / total,
                        )
                    })
                    .collect()
            }
            Mix::Deadlines => vec![(group_name(self, Claim::default()), 1.0)],
        }
    }
}

/// The group a request of `claim` counts in, in a run of `mix`: its class, or its tenant.
pub(crate) fn group_name(mix: Mix, claim: Claim) -> String {
    match mix {
        Mix::Criticality => claim.class.as_str().to_owned(),
        Mix::NoisyTenant if claim.tenant == 0 => "noisy tenant".to_owned(),
        Mix::NoisyTenant => format!("quiet tenant {}", claim.tenant),
        Mix::Deadlines => "all".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn draws_follow_the_shares() {
        for mix in [Mix::Criticality, Mix::NoisyTenant] {
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            let mut counts = std::collections::HashMap::<String, u32>::new();
            let n = 100_000;
            for _ in 0..n {
                *counts
                    .entry(group_name(mix, mix.draw(&mut rng)))
                    .or_default() += 1;
            }
            for (group, share) in mix.shares() {
                let seen = f64::from(counts[&group]) / f64::from(n);
                assert!(
                    (seen - share).abs() < 0.01,
                    "{mix:?} {group}: {seen} against {share}"
                );
            }
        }
    }
}
