//! The overload lab: does a service behind spillway stay up under overload?
//!
//! A deterministic discrete-event simulation of a service with a fixed number of workers, open-loop
//! clients with timeouts and retries, and spillway's real entry path (the same rules, checks and
//! statistics a service uses) on a [`ManualClock`](spillway::ManualClock). It measures what the
//! field judges admission control by: goodput (answers within the client's timeout) and latency
//! against offered load, and the time to recover after a spike or a slowdown ends, for each
//! protection [`Strategy`] on identical arrivals.
//!
//! # Examples
//!
//! ```
//! use spillway_lab::{simulate, LabParams, Scenario, Strategy};
//! use std::time::Duration;
//!
//! let params = LabParams { measure: Duration::from_secs(2), ..LabParams::default().quick() };
//! let run = simulate(&params, Scenario::Sweep { load: 3.0 }, Strategy::StaticConcurrency)?;
//! assert!(run.goodput > 0.9, "a concurrency limit keeps the service up: {}", run.goodput);
//! # Ok::<(), spillway_lab::LabError>(())
//! ```

pub mod arrivals;
mod draws;
mod events;
pub mod fixed_floor;
mod lab;
mod load_average;
pub mod matrix;
pub mod matrix_report;
pub mod mix;
pub mod mix_report;
pub mod mix_result;
mod params;
pub mod plot;
pub mod measure {
    //! How both labs measure a run: each records its attempts and ticks, and
    //! [`RunRecord::summarize`] computes the numbers.
    pub use crate::record::{
        quantile, recovery, AttemptRecord, Outcome, RunRecord, Tick, BUCKET_NANOS, WINDOW_BUCKETS,
    };
}
mod record;
pub mod report;
mod scenario;
mod sim;
mod strategy;

pub use draws::ServiceSampler;
pub use lab::{run_lab, scenarios, LabReport, EVENT_BASE_LOAD};
pub use params::{LabError, LabParams, RetryPolicy, ServiceTime};
pub use record::{Counts, RunResult, SeriesPoint, Traced};
pub use scenario::{Scenario, LONG_RUN_LOADS, LONG_RUN_STEP, SWEEP_LOADS};
pub use strategy::{Strategy, RESOURCE, SENTINEL_LOAD_PER_CORE};

/// Runs `strategy` in a `scenario` whose requests claim something ([`Scenario::Mix`]) and
/// measures it, each group of its requests (a criticality, a tenant) apart.
///
/// # Errors
///
/// A [`LabError`] if a parameter or the scenario's load cannot be simulated, or the scenario
/// has no mix.
///
/// # Examples
///
/// ```
/// use spillway_lab::mix::Mix;
/// use spillway_lab::{simulate_mix, LabParams, Scenario, Strategy};
/// use std::time::Duration;
///
/// let params = LabParams { measure: Duration::from_secs(2), ..LabParams::default().quick() };
/// let scenario = Scenario::Mix { load: 3.0, mix: Mix::Criticality };
/// let run = simulate_mix(&params, scenario, Strategy::Classes)?;
/// let critical = &run.groups[0];
/// assert_eq!(critical.group, "critical_plus");
/// assert!(critical.served > 0.99, "{critical:?}");
/// # Ok::<(), spillway_lab::LabError>(())
/// ```
pub fn simulate_mix(
    params: &LabParams,
    scenario: Scenario,
    strategy: Strategy,
) -> Result<mix_result::MixResult, LabError> {
    if scenario.mix().is_none() {
        return Err(LabError::new(
            "scenario",
            format!("{scenario} has no mix of claims"),
        ));
    }
    Ok(sim::Run::new(params, scenario, strategy)?.run_mix())
}

/// Runs `strategy` in `scenario`, measures it, and keeps its time series whatever the scenario
/// (a sweep's too): how the limit, the requests in the service, goodput and p99 moved, a point
/// every 100 ms.
///
/// # Errors
///
/// A [`LabError`] if a parameter or the scenario's load cannot be simulated.
///
/// # Examples
///
/// ```
/// use spillway_lab::{simulate_traced, LabParams, Scenario, Strategy};
/// use std::time::Duration;
///
/// let params = LabParams { measure: Duration::from_secs(2), ..LabParams::default().quick() };
/// let traced = simulate_traced(&params, Scenario::Sweep { load: 3.0 }, Strategy::Aimd)?;
/// assert!(traced.run.series.is_empty()); // a sweep's summary keeps none
/// let last = traced.trace.last().unwrap();
/// assert!(last.limit.is_some(), "an adaptive limit has a limit at every point");
/// # Ok::<(), spillway_lab::LabError>(())
/// ```
pub fn simulate_traced(
    params: &LabParams,
    scenario: Scenario,
    strategy: Strategy,
) -> Result<Traced, LabError> {
    Ok(sim::Run::new(params, scenario, strategy)?.run_traced())
}

/// Runs `strategy` in `scenario` and measures it.
///
/// # Errors
///
/// A [`LabError`] if a parameter or the scenario's load cannot be simulated.
pub fn simulate(
    params: &LabParams,
    scenario: Scenario,
    strategy: Strategy,
) -> Result<RunResult, LabError> {
    Ok(sim::Run::new(params, scenario, strategy)?.run())
}
