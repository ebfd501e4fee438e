//! The situations the lab puts a service in: a steady load, a spike, a downstream slowdown.

use crate::mix::Mix;
use crate::params::{LabError, LabParams};
use std::fmt;
use std::time::Duration;

/// The offered loads of a sweep, as multiples of capacity.
pub const SWEEP_LOADS: [f64; 6] = [0.5, 1.0, 2.0, 3.0, 5.0, 10.0];

/// How long a spike or a slowdown lasts, and how much of the run comes before and after it.
const BEFORE: Duration = Duration::from_secs(10);
const TRIGGER: Duration = Duration::from_secs(10);
const AFTER: Duration = Duration::from_secs(20);
/// The spike's offered load and the slowdown's service-time factor.
const SPIKE_LOAD: f64 = 5.0;
const SLOWDOWN_FACTOR: f64 = 5.0;
/// The long run's loads, each held for [`LONG_RUN_STEP`]: below capacity for minutes, crossing
/// every algorithm's re-measure interval (Envoy's 60 s, BBR's 10 s).
pub const LONG_RUN_LOADS: [f64; 3] = [0.5, 0.7, 0.9];
/// How long the long run holds each of its loads.
pub const LONG_RUN_STEP: Duration = Duration::from_secs(60);

/// What happens during a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scenario {
    /// A steady Poisson load at `load x capacity`, warmed up then measured.
    Sweep {
        /// The offered load as a multiple of capacity.
        load: f64,
    },
    /// A base load of `load x capacity`; from 10 s to 20 s the offered load is 5x capacity;
    /// then 20 s more at the base load.
    Spike {
        /// The base load as a multiple of capacity.
        load: f64,
    },
    /// A base load of `load x capacity`; work that starts from 10 s to 20 s takes 5 times as
    /// long (a slow dependency); then 20 s more as before.
    Slowdown {
        /// The base load as a multiple of capacity.
        load: f64,
    },
    /// From a cold start, [`LONG_RUN_LOADS`] in turn, each for [`LONG_RUN_STEP`]: never above
    /// capacity, so a protection should refuse nothing, at start-up or later. Measured from the
    /// start.
    LongRun,
    /// A steady Poisson load at `load x capacity`, as a sweep, of requests that claim a
    /// criticality, a tenant or a deadline as `mix` draws them.
    Mix {
        /// The offered load as a multiple of capacity.
        load: f64,
        /// Who sends the requests, and what they claim.
        mix: Mix,
    },
}

impl Scenario {
    /// The name in tables and JSON: `sweep`, `spike`, `slowdown` or `long_run`.
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Sweep { .. } => "sweep",
            Scenario::Spike { .. } => "spike",
            Scenario::Slowdown { .. } => "slowdown",
            Scenario::LongRun => "long_run",
            Scenario::Mix { mix, .. } => mix.name(),
        }
    }

    /// Who sends its requests, for a scenario whose requests claim something.
    pub fn mix(&self) -> Option<Mix> {
        match *self {
            Scenario::Mix { mix, .. } => Some(mix),
            _ => None,
        }
    }

    /// The (base) offered load as a multiple of capacity; the long run's highest.
    pub fn load(&self) -> f64 {
        match *self {
            Scenario::Sweep { load }
            | Scenario::Spike { load }
            | Scenario::Slowdown { load }
            | Scenario::Mix { load, .. } => load,
            Scenario::LongRun => LONG_RUN_LOADS[LONG_RUN_LOADS.len() - 1],
        }
    }

    /// Checks the load.
    ///
    /// # Errors
    ///
    /// If the load is not a finite number above 0 and at most 100.
    pub fn validate(&self) -> Result<(), LabError> {
        let load = self.load();
        if !load.is_finite() || load <= 0.0 || load > 100.0 {
            return Err(LabError::new(
                "load",
                format!("must be a number above 0 and at most 100, got {load}"),
            ));
        }
        Ok(())
    }

    /// When measuring starts (from the start of the run): after a sweep's warm-up; at once for
    /// a spike, a slowdown or the long run.
    pub fn measure_from(&self, params: &LabParams) -> Duration {
        match self {
            Scenario::Sweep { .. } | Scenario::Mix { .. } => params.warm_up,
            Scenario::Spike { .. } | Scenario::Slowdown { .. } | Scenario::LongRun => {
                Duration::ZERO
            }
        }
    }

    /// When clients stop sending new requests (from the start of the run).
    pub fn arrivals_end(&self, params: &LabParams) -> Duration {
        match self {
            Scenario::Sweep { .. } | Scenario::Mix { .. } => params.warm_up + params.measure,
            Scenario::Spike { .. } | Scenario::Slowdown { .. } => BEFORE + TRIGGER + AFTER,
            Scenario::LongRun => LONG_RUN_STEP * LONG_RUN_LOADS.len() as u32,
        }
    }

    /// The trigger's start and end, for a spike or a slowdown.
    pub fn trigger(&self) -> Option<(Duration, Duration)> {
        match self {
            Scenario::Sweep { .. } | Scenario::LongRun | Scenario::Mix { .. } => None,
            Scenario::Spike { .. } | Scenario::Slowdown { .. } => Some((BEFORE, BEFORE + TRIGGER)),
        }
    }

    /// The offered load at `at`, as a multiple of capacity, and when it next changes.
    pub fn load_at(&self, at: Duration) -> (f64, Option<Duration>) {
        match *self {
            Scenario::Spike { load } => {
                if at < BEFORE {
                    (load, Some(BEFORE))
                } else if at < BEFORE + TRIGGER {
                    (SPIKE_LOAD, Some(BEFORE + TRIGGER))
                } else {
                    (load, None)
                }
            }
            Scenario::Sweep { load } | Scenario::Slowdown { load } | Scenario::Mix { load, .. } => {
                (load, None)
            }
            Scenario::LongRun => {
                let step = (at.as_nanos() / LONG_RUN_STEP.as_nanos()) as usize;
                let step = step.min(LONG_RUN_LOADS.len() - 1);
                let next =
                    (step + 1 < LONG_RUN_LOADS.len()).then(|| LONG_RUN_STEP * (step + 1) as u32);
                (LONG_RUN_LOADS[step], next)
            }
        }
    }

    /// How many times longer work that starts at `at` takes.
    pub fn slowdown_at(&self, at: Duration) -> f64 {
        match self {
            Scenario::Slowdown { .. } if at >= BEFORE && at < BEFORE + TRIGGER => SLOWDOWN_FACTOR,
            _ => 1.0,
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scenario::Sweep { load } => write!(f, "sweep at {load}x"),
            Scenario::Spike { load } => {
                write!(f, "spike from {load}x to {SPIKE_LOAD}x for {TRIGGER:?}")
            }
            Scenario::Slowdown { load } => write!(
                f,
                "slowdown at {load}x: service time x{SLOWDOWN_FACTOR} for {TRIGGER:?}"
            ),
            Scenario::LongRun => write!(
                f,
                "long run from a cold start: {LONG_RUN_LOADS:?}x, {LONG_RUN_STEP:?} each"
            ),
            Scenario::Mix { load, mix } => write!(f, "{} at {load}x", mix.name()),
        }
    }
}
