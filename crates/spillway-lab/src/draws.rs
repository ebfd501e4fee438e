//! Drawing service times: the simulated lab's, and [`ServiceSampler`] for a real upstream that
//! works as long as the simulated service does (the loopback lab's).

use crate::params::{LabError, ServiceTime};
use crate::record::nanos;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use std::time::Duration;

/// The distribution work is drawn from.
#[derive(Debug)]
pub(crate) enum WorkDistribution {
    Fixed(u64),
    Exponential(Exp<f64>),
    LogNormal(LogNormal<f64>),
    /// The fast and the slow time, and the slow share.
    Bimodal(u64, u64, f64),
}

impl WorkDistribution {
    pub(crate) fn new(service_time: ServiceTime) -> Result<Self, LabError> {
        let bad = |e: String| LabError::new("service_time", e);
        match service_time {
            ServiceTime::Fixed { time } => Ok(Self::Fixed(nanos(time))),
            ServiceTime::Exponential { mean } => {
                let rate = 1.0 / (mean.as_nanos() as f64);
                Exp::new(rate)
                    .map(Self::Exponential)
                    .map_err(|e| bad(e.to_string()))
            }
            ServiceTime::LogNormal { mean, sigma } => {
                let mu = (mean.as_nanos() as f64).ln() - sigma * sigma / 2.0;
                LogNormal::new(mu, sigma)
                    .map(Self::LogNormal)
                    .map_err(|e| bad(e.to_string()))
            }
            ServiceTime::Bimodal {
                mean,
                slow_share,
                slow_factor,
            } => {
                let (fast, slow) = ServiceTime::bimodal_times(mean, slow_share, slow_factor);
                Ok(Self::Bimodal(nanos(fast), nanos(slow), slow_share))
            }
        }
    }

    pub(crate) fn sample(&self, rng: &mut ChaCha8Rng) -> u64 {
        let nanos = match self {
            Self::Fixed(nanos) => *nanos as f64,
            Self::Exponential(d) => d.sample(rng),
            Self::LogNormal(d) => d.sample(rng),
            Self::Bimodal(fast, slow, share) => {
                // `random::<f64>()` is in [0, 1): a share of 0 is never slow, of 1 always.
                if rng.random::<f64>() < *share {
                    *slow as f64
                } else {
                    *fast as f64
                }
            }
        };
        // At least 1 µs, so that every piece of work takes time.
        (nanos as u64).max(1_000)
    }
}

/// Service times drawn one after another from a [`ServiceTime`], the same for the same seed.
///
/// # Examples
///
/// ```
/// use spillway_lab::{ServiceSampler, ServiceTime};
/// use std::time::Duration;
///
/// let bimodal = ServiceTime::Bimodal {
///     mean: Duration::from_millis(10),
///     slow_share: 0.1,
///     slow_factor: 10.0,
/// };
/// let mut draws = ServiceSampler::new(bimodal, 7)?;
/// let times: Vec<Duration> = (0..1_000).map(|_| draws.next_time()).collect();
/// let (fast, slow) = ServiceTime::bimodal_times(Duration::from_millis(10), 0.1, 10.0);
/// assert!(times.iter().all(|&t| t == fast || t == slow));
/// let mut again = ServiceSampler::new(bimodal, 7)?;
/// assert_eq!(times[0], again.next_time());
/// # Ok::<(), spillway_lab::LabError>(())
/// ```
#[derive(Debug)]
pub struct ServiceSampler {
    work: WorkDistribution,
    rng: ChaCha8Rng,
}

impl ServiceSampler {
    /// Draws from `service_time`, seeded with `seed`.
    ///
    /// # Errors
    ///
    /// A [`LabError`] if the distribution's parameters cannot be drawn from.
    pub fn new(service_time: ServiceTime, seed: u64) -> Result<Self, LabError> {
        Ok(Self {
            work: WorkDistribution::new(service_time)?,
            rng: ChaCha8Rng::seed_from_u64(seed),
        })
    }

    /// The next service time (at least 1 µs).
    pub fn next_time(&mut self) -> Duration {
        Duration::from_nanos(self.work.sample(&mut self.rng))
    }
}
