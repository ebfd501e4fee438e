//! When each new request of a scenario arrives, and the work it brings: the one place both labs
//! draw them, so that the simulation and the loopback lab's generator, given the same
//! parameters, see the same requests at the same times.

use crate::draws::WorkDistribution;
use crate::mix::{Claim, Mix};
use crate::params::{LabError, LabParams};
use crate::record::nanos;
use crate::scenario::Scenario;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;
use std::time::Duration;

/// The random stream of the arrivals and their work (retries draw their jitter from another).
const ARRIVAL_STREAM: u64 = 1;

/// How new requests are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Spacing {
    /// One every `1 / rate` (at least 1 ns apart): the same gaps every run.
    Even,
    /// Exponential gaps at the rate (a Poisson process, as the simulation's clients arrive).
    Poisson,
}

/// A new request: when it arrives, from the start of the run, and the work it brings (before
/// any slowdown; the same on every attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// When it arrives.
    pub at: Duration,
    /// How long it holds a worker.
    pub work: Duration,
    /// What it claims (a scenario without a [`Mix`]: the default).
    pub claim: Claim,
}

/// The new requests of a scenario: at `load x capacity` a second as [`Scenario::load_at`] says,
/// until the scenario's arrivals end, each with its work drawn from the service-time
/// distribution, from `params.seed`.
///
/// With [`Spacing::Poisson`], a gap that would cross a change of load is drawn again from the
/// change at the new rate (a Poisson process has no memory, so this is exact). Draws come in a
/// fixed order (each arrival's gap, then its work), so the same parameters give the same
/// requests, whoever draws them.
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
/// let even: Vec<_> = Arrivals::new(&params, Scenario::Sweep { load: 2.0 }, Spacing::Even)?.collect();
/// assert_eq!(even.len(), 16_000);
/// assert_eq!(even[1].at, Duration::from_nanos(625_000));
///
/// let poisson: Vec<_> =
///     Arrivals::new(&params, Scenario::Sweep { load: 2.0 }, Spacing::Poisson)?.collect();
/// assert!((15_500..16_500).contains(&poisson.len()), "{}", poisson.len());
/// let mean = poisson.iter().map(|a| a.work).sum::<Duration>() / poisson.len() as u32;
/// assert!(mean > Duration::from_micros(9_700) && mean < Duration::from_micros(10_300));
/// # Ok::<(), spillway_lab::LabError>(())
/// ```
#[derive(Debug)]
pub struct Arrivals {
    scenario: Scenario,
    capacity: f64,
    spacing: Spacing,
    rng: ChaCha8Rng,
    work: WorkDistribution,
    /// The claims' own stream, for a scenario with a mix (so that its times and work are a
    /// sweep's).
    claims: Option<(Mix, ChaCha8Rng)>,
    /// The next arrival in ns, if it comes before the end.
    next: Option<u64>,
    end: u64,
}

impl Arrivals {
    /// The arrivals of `scenario` on the service of `params` (its capacity, service times, run
    /// lengths and seed), spaced by `spacing`.
    ///
    /// # Errors
    ///
    /// A [`LabError`] if the parameters or the scenario's load cannot be run.
    pub fn new(params: &LabParams, scenario: Scenario, spacing: Spacing) -> Result<Self, LabError> {
        params.validate()?;
        scenario.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        rng.set_stream(ARRIVAL_STREAM);
        let claims = scenario.mix().map(|mix| {
            let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
            rng.set_stream(crate::mix::CLAIM_STREAM);
            (mix, rng)
        });
        let mut arrivals = Self {
            claims,
            scenario,
            capacity: params.capacity(),
            spacing,
            rng,
            work: WorkDistribution::new(params.service_time)?,
            next: None,
            end: nanos(scenario.arrivals_end(params)),
        };
        arrivals.next = match spacing {
            Spacing::Even => Some(0),
            Spacing::Poisson => arrivals.draw_after(0),
        };
        Ok(arrivals)
    }

    /// The first Poisson arrival after `from` (ns), or `None` past the end.
    fn draw_after(&mut self, mut from: u64) -> Option<u64> {
        loop {
            let (load, change) = self.scenario.load_at(Duration::from_nanos(from));
            let gap = Exp::new(load * self.capacity / 1e9)
                .map(|d| d.sample(&mut self.rng))
                .unwrap_or(f64::INFINITY);
            let at = from.saturating_add(gap.min(u64::MAX as f64 / 2.0) as u64);
            match change.map(nanos) {
                Some(change) if at >= change => from = change,
                _ => return (at < self.end).then_some(at),
            }
        }
    }
}

impl Iterator for Arrivals {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        let at = self.next.filter(|&at| at < self.end)?;
        let work = self.work.sample(&mut self.rng);
        self.next = match self.spacing {
            Spacing::Even => {
                let (load, _) = self.scenario.load_at(Duration::from_nanos(at));
                let gap = (1e9 / (load * self.capacity)).min(u64::MAX as f64 / 2.0) as u64;
                Some(at.saturating_add(gap.max(1)))
            }
            Spacing::Poisson => self.draw_after(at),
        };
        let claim = match &mut self.claims {
            Some((mix, rng)) => mix.draw(rng),
            None => Claim::default(),
        };
        Some(Arrival {
            at: Duration::from_nanos(at),
            work: Duration::from_nanos(work),
            claim,
        })
    }
}
