//! When an open-loop generator sends its requests: a scenario's offered load, evenly spaced or
//! as a Poisson process (the loopback lab's generator; the simulation draws its own, interleaved
//! with the work it draws).

use crate::params::{LabError, LabParams};
use crate::scenario::Scenario;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;
use std::time::Duration;

/// The random stream of the gaps.
const ARRIVAL_STREAM: u64 = 1;

/// The shortest gap: at a rate whose gap rounds to 0 ns, time still moves on.
const MIN_GAP: Duration = Duration::from_nanos(1);

/// How an open-loop generator spaces its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Spacing {
    /// One every `1 / rate`: the same gaps every run.
    Even,
    /// Exponential gaps at the rate (a Poisson process, as real clients and the simulation
    /// arrive), drawn from a seed.
    Poisson,
}

/// The times, from the start of a run, at which a generator sends each new request of a
/// scenario: at `load x capacity` a second, as [`Scenario::load_at`] says, until the scenario's
/// arrivals end.
///
/// With [`Spacing::Poisson`], a gap that would cross a change of load is drawn again from the
/// change at the new rate (a Poisson process has no memory, so this is exact).
///
/// # Examples
///
/// ```
/// use spillway_lab::arrivals::{Arrivals, Spacing};
/// use spillway_lab::{LabParams, Scenario};
/// use std::time::Duration;
///
/// // 8 workers x 10 ms: 800 a second, so 2x is 1,600 a second for 10 s (the quick mode's run).
/// let params = LabParams::default().quick();
/// let even: Vec<Duration> =
///     Arrivals::new(&params, Scenario::Sweep { load: 2.0 }, Spacing::Even, 1)?.collect();
/// assert_eq!(even.len(), 16_000);
/// assert_eq!(even[1], Duration::from_nanos(625_000));
///
/// let poisson: Vec<Duration> =
///     Arrivals::new(&params, Scenario::Sweep { load: 2.0 }, Spacing::Poisson, 1)?.collect();
/// assert!((15_500..16_500).contains(&poisson.len()), "{}", poisson.len());
/// # Ok::<(), spillway_lab::LabError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Arrivals {
    scenario: Scenario,
    capacity: f64,
    spacing: Spacing,
    rng: ChaCha8Rng,
    /// The next arrival, or where the next gap is drawn from.
    next: Option<Duration>,
    end: Duration,
}

impl Arrivals {
    /// The arrivals of `scenario` on the service of `params` (its capacity and run lengths),
    /// spaced by `spacing`, Poisson gaps drawn from `seed` (on another stream than a
    /// [`ServiceSampler`](crate::ServiceSampler)'s of the same seed).
    ///
    /// # Errors
    ///
    /// A [`LabError`] if the parameters or the scenario's load cannot be run.
    pub fn new(
        params: &LabParams,
        scenario: Scenario,
        spacing: Spacing,
        seed: u64,
    ) -> Result<Self, LabError> {
        params.validate()?;
        scenario.validate()?;
        let mut arrivals = Self {
            scenario,
            capacity: params.capacity(),
            spacing,
            rng: {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                // Not the stream a `ServiceSampler` of the same seed draws work from.
                rng.set_stream(ARRIVAL_STREAM);
                rng
            },
            next: None,
            end: scenario.arrivals_end(params),
        };
        arrivals.next = match spacing {
            Spacing::Even => Some(Duration::ZERO),
            Spacing::Poisson => arrivals.draw_after(Duration::ZERO),
        };
        Ok(arrivals)
    }

    /// The rate at `at`, in requests a second.
    fn rate_at(&self, at: Duration) -> (f64, Option<Duration>) {
        let (load, change) = self.scenario.load_at(at);
        (load * self.capacity, change)
    }

    /// The first Poisson arrival after `from`, or `None` past the end.
    fn draw_after(&mut self, mut from: Duration) -> Option<Duration> {
        loop {
            let (rate, change) = self.rate_at(from);
            let gap = Exp::new(rate)
                .map(|d| d.sample(&mut self.rng))
                .unwrap_or(f64::INFINITY);
            let at = Duration::try_from_secs_f64(gap)
                .ok()
                .and_then(|gap| from.checked_add(gap.max(MIN_GAP)));
            match (at, change) {
                (Some(at), Some(change)) if at >= change => from = change,
                (None, Some(change)) => from = change,
                (Some(at), _) if at < self.end => return Some(at),
                _ => return None,
            }
        }
    }
}

impl Iterator for Arrivals {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let at = self.next.filter(|&at| at < self.end)?;
        self.next = match self.spacing {
            Spacing::Even => {
                let (rate, _) = self.rate_at(at);
                Duration::try_from_secs_f64(1.0 / rate)
                    .ok()
                    .and_then(|gap| at.checked_add(gap.max(MIN_GAP)))
            }
            Spacing::Poisson => self.draw_after(at),
        };
        Some(at)
    }
}
