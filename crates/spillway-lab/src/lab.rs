//! A whole lab: every strategy in every scenario, on identical arrivals.

use crate::params::{LabError, LabParams};
use crate::record::RunResult;
use crate::scenario::{Scenario, SWEEP_LOADS};
use crate::strategy::Strategy;

/// The base load of the spike and slowdown scenarios, as a multiple of capacity.
pub const EVENT_BASE_LOAD: f64 = 1.0;

/// Every run of one lab, with the parameters it ran with.
#[derive(Debug, Clone)]
pub struct LabReport {
    /// The parameters.
    pub params: LabParams,
    /// The strategies, in order.
    pub strategies: Vec<Strategy>,
    /// Every run: for each strategy, the sweep loads in order, then the spike, then the
    /// slowdown.
    pub runs: Vec<RunResult>,
    /// The p99 latency of the same service at 0.5x capacity with no protection, in ms.
    pub unloaded_p99_ms: f64,
}

impl LabReport {
    /// The run of `strategy` in scenario `scenario` (by name) at `load`.
    pub fn find(&self, scenario: &str, strategy: Strategy, load: f64) -> Option<&RunResult> {
        self.runs
            .iter()
            .find(|r| r.scenario == scenario && r.strategy == strategy.name() && r.load == load)
    }
}

/// Every scenario of a lab: the sweep loads, the spike and the slowdown.
pub fn scenarios() -> Vec<Scenario> {
    let mut all: Vec<Scenario> = SWEEP_LOADS
        .iter()
        .map(|&load| Scenario::Sweep { load })
        .collect();
    all.push(Scenario::Spike {
        load: EVENT_BASE_LOAD,
    });
    all.push(Scenario::Slowdown {
        load: EVENT_BASE_LOAD,
    });
    all
}

/// Runs every strategy in `strategies` in every [`scenarios`] entry, and the unprotected service
/// at 0.5x for the unloaded p99.
///
/// # Errors
///
/// A [`LabError`] if a parameter cannot be simulated, or if `strategies` is empty.
///
/// # Examples
///
/// ```
/// use spillway_lab::{run_lab, LabParams, Strategy};
/// use std::time::Duration;
///
/// let params = LabParams { measure: Duration::from_secs(1), ..LabParams::default().quick() };
/// let report = run_lab(&params, &[Strategy::StaticConcurrency])?;
/// assert_eq!(report.runs.len(), 8); // 6 sweep loads, a spike, a slowdown
/// assert!(report.unloaded_p99_ms > 10.0);
/// # Ok::<(), spillway_lab::LabError>(())
/// ```
pub fn run_lab(params: &LabParams, strategies: &[Strategy]) -> Result<LabReport, LabError> {
    params.validate()?;
    if strategies.is_empty() {
        return Err(LabError::new(
            "strategies",
            "name at least one strategy".to_string(),
        ));
    }
    let unloaded = crate::simulate(params, Scenario::Sweep { load: 0.5 }, Strategy::None)?;
    let mut runs = Vec::new();
    for &strategy in strategies {
        for scenario in scenarios() {
            runs.push(crate::simulate(params, scenario, strategy)?);
        }
    }
    Ok(LabReport {
        params: params.clone(),
        strategies: strategies.to_vec(),
        runs,
        unloaded_p99_ms: unloaded.p99_ms,
    })
}
