//! The shape matrix on loopback: each adaptive strategy through the real proxy in front of real
//! upstreams of 1 to 32 workers with exponential and bimodal service times, each cell beside its
//! simulated twin (the same strategy on the same shape, at the capacity measured).

use super::loopback::{measure_capacity, run_point, LoopbackParams};
use crate::upstream::UpstreamShape;
use spillway::adaptive::{AdaptiveQueue, EnvoyGradientConfig};
use spillway_lab::arrivals::Spacing;
use spillway_lab::matrix::{
    compared_markdown, matrix_shapes, run_cell, shape_name, Cell, MATRIX_LOADS,
};
use spillway_lab::{simulate, LabParams, Scenario, Strategy, EVENT_BASE_LOAD};
use std::time::Duration;
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The services' workers: the simulated matrix's.
pub const LOOPBACK_MATRIX_WORKERS: [usize; 5] = [1, 2, 4, 8, 32];

/// The service-time shapes run on loopback: two of the simulated matrix's three, to keep the run
/// under an hour (log-normal, whose p99 is the furthest from its mean, is only simulated).
pub const LOOPBACK_MATRIX_SHAPES: [&str; 2] = ["exponential", "bimodal"];

/// What the matrix's services offer at most, in requests a second: the generator, the proxy and
/// the upstream share this machine's CPUs, and at 10x the generator sends ten times this.
pub const LOOPBACK_MATRIX_MAX_CAPACITY: f64 = 400.0;

/// The mean service time the clients' timeout and back-off are set for (the simulated matrix's).
pub const LOOPBACK_MATRIX_BASE_MEAN: Duration = Duration::from_millis(10);

/// The mean service time of a loopback service of `workers`: [`LOOPBACK_MATRIX_BASE_MEAN`], or
/// longer where that would offer more than [`LOOPBACK_MATRIX_MAX_CAPACITY`] a second (8 workers:
/// 20 ms; 32 workers: 80 ms).
///
/// # Examples
///
/// ```
/// use spillway_server::lab::loopback_matrix::loopback_mean;
/// use std::time::Duration;
///
/// assert_eq!(loopback_mean(1), Duration::from_millis(10));
/// assert_eq!(loopback_mean(4), Duration::from_millis(10));
/// assert_eq!(loopback_mean(32), Duration::from_millis(80));
/// ```
pub fn loopback_mean(workers: usize) -> Duration {
    Duration::from_secs_f64(workers as f64 / LOOPBACK_MATRIX_MAX_CAPACITY)
        .max(LOOPBACK_MATRIX_BASE_MEAN)
}

/// The loopback matrix's cells and their simulated twins: on the loopback run's seed, in the
/// same order, and on the other seeds, `TWIN_SEEDS - 1` a cell in that order.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LoopbackMatrix {
    /// The cells measured on loopback (no long run: three minutes a cell).
    pub loopback: Vec<Cell>,
    /// The same cells simulated, each on its loopback cell's measured capacity, with the
    /// loopback run's seed (its arrivals and service times).
    pub simulated: Vec<Cell>,
    /// The same cells simulated on the next [`TWIN_SEEDS`] - 1 seeds: how far the simulation
    /// differs from itself on other arrivals and service times.
    pub other_seeds: Vec<Cell>,
    /// `envoy_gradient`'s settings in these runs.
    pub envoy: EnvoyGradientConfig,
    /// The adaptive strategies' queue in these runs (`None`: none), as given: on a service
    /// slower than [`LOOPBACK_MATRIX_BASE_MEAN`] its timeout is stretched with the clients'.
    pub adaptive_queue: Option<AdaptiveQueue>,
}

/// What the loopback matrix is and how to read it.
const INTRO: &str = include_str!("loopback_matrix_intro.md");

impl LoopbackMatrix {
    /// The matrix as `docs/overload.md` has it: what it is, then every loopback cell and where
    /// its simulated twin disagrees.
    pub fn markdown(&self) -> String {
        let lab = LabParams {
            envoy: self.envoy,
            adaptive_queue: self.adaptive_queue,
            ..LabParams::default()
        };
        let mut settings: Vec<String> = [lab.envoy_settings(), lab.queue_settings()]
            .into_iter()
            .flatten()
            .collect();
        if self.adaptive_queue.is_some() {
            settings.push(
                "the queue's timeout is stretched with the clients' on the slower services (2 \
                 times on 8 workers, 8 times on 32)"
                    .to_string(),
            );
        }
        let settings = if settings.is_empty() {
            String::new()
        } else {
            format!("\nIn these runs {}.\n", settings.join("; "))
        };
        format!(
            "{INTRO}{settings}\n{}",
            compared_markdown(&self.loopback, &self.simulated, &self.other_seeds)
        )
    }
}

/// How many seeds each loopback cell's twin is simulated on: the loopback run's own and the
/// next `TWIN_SEEDS - 1`, to tell a disagreement from the spread of the simulation's own
/// results on other arrivals and service times.
pub const TWIN_SEEDS: u64 = 5;

/// How much the loopback matrix stretches the clients' timeout and back-off, and the adaptive
/// queue's timeout, on a service of `workers`: its mean over [`LOOPBACK_MATRIX_BASE_MEAN`].
///
/// ```
/// use spillway_server::lab::loopback_matrix::loopback_stretch;
///
/// assert_eq!(loopback_stretch(4), 1.0);
/// assert_eq!(loopback_stretch(32), 8.0);
/// ```
pub fn loopback_stretch(workers: usize) -> f64 {
    loopback_mean(workers).as_secs_f64() / LOOPBACK_MATRIX_BASE_MEAN.as_secs_f64()
}

/// The loopback parameters of one shape of the matrix: `base`'s, on `upstream` at its measured
/// `capacity`, Poisson arrivals, and on a service slower than [`LOOPBACK_MATRIX_BASE_MEAN`]
/// ([`loopback_stretch`]) the clients' timeout and back-off and the adaptive queue's
/// timeout stretched as much (so that its slow requests do not all time out; the sweeps keep
/// their length).
fn shape_params(base: &LoopbackParams, upstream: UpstreamShape, capacity: f64) -> LoopbackParams {
    let stretch = loopback_stretch(upstream.workers);
    LoopbackParams {
        upstream,
        capacity: Some(capacity),
        spacing: Spacing::Poisson,
        client_timeout: base.client_timeout.mul_f64(stretch),
        backoff: base.backoff.mul_f64(stretch),
        adaptive_queue: base.adaptive_queue.map(|queue| AdaptiveQueue {
            timeout: queue.timeout.mul_f64(stretch),
            ..queue
        }),
        ..base.clone()
    }
}

/// How long [`run_loopback_matrix`] takes with `strategies`, in minutes, about.
pub fn loopback_matrix_minutes(params: &LoopbackParams, strategies: usize) -> u64 {
    let sweep = (params.warm_up + params.measure).as_secs_f64() + 0.5;
    let slowdown = Scenario::Slowdown {
        load: EVENT_BASE_LOAD,
    }
    .arrivals_end(&params.lab_params())
    .as_secs_f64()
        + 1.0;
    let shapes = (LOOPBACK_MATRIX_WORKERS.len() * LOOPBACK_MATRIX_SHAPES.len()) as f64;
    let per_shape =
        3.0 + sweep + strategies as f64 * (MATRIX_LOADS.len() as f64 * sweep + slowdown);
    (shapes * per_shape / 60.0).ceil() as u64
}

/// Runs every strategy of `strategies` through the proxy on each shape of the loopback matrix
/// ([`LOOPBACK_MATRIX_WORKERS`] x [`LOOPBACK_MATRIX_SHAPES`], means from [`loopback_mean`]):
/// the sweeps at 3x, 5x and 10x and the slowdown, Poisson arrivals, the clients and run lengths
/// of `base`; and simulates each cell's twin with `seed` and the next [`TWIN_SEEDS`] - 1 seeds.
/// Each service's capacity is measured
/// first; the upstream and the arrivals draw from `seed`. A service slower than
/// [`LOOPBACK_MATRIX_BASE_MEAN`] gets the clients' timeout and back-off, and `base`'s adaptive
/// queue its timeout, stretched as much (so that its slow requests do not all time out; the
/// sweeps keep `base`'s length, so a slower service has fewer round trips to settle in).
///
/// # Errors
///
/// A loopback port that cannot be bound, or a strategy whose rule the proxy refuses.
pub async fn run_loopback_matrix(
    base: &LoopbackParams,
    strategies: &[Strategy],
    seed: u64,
) -> Result<LoopbackMatrix, BoxError> {
    if strategies.is_empty() {
        return Err(spillway_lab::LabError::new("strategies", "name at least one strategy").into());
    }
    let mut matrix = LoopbackMatrix {
        loopback: Vec::new(),
        simulated: Vec::new(),
        other_seeds: Vec::new(),
        envoy: base.envoy,
        adaptive_queue: base.adaptive_queue,
    };
    for workers in LOOPBACK_MATRIX_WORKERS {
        let mean = loopback_mean(workers);
        for service in matrix_shapes(mean) {
            let shape = shape_name(&service);
            if !LOOPBACK_MATRIX_SHAPES.contains(&shape) {
                continue;
            }
            let upstream = UpstreamShape {
                workers,
                service,
                seed,
                flaky: false,
            };
            let capacity = measure_capacity(upstream).await?;
            let params = shape_params(base, upstream, capacity);
            eprintln!(
                "loopback matrix: {workers} workers, {shape} {mean:?}: {capacity:.0} requests/s \
                 ({:.0} nominal)",
                upstream.capacity()
            );
            // The twin: the same workers and shape at the measured capacity, seeded with `seed`.
            let lab = params.lab_params();
            let unloaded =
                run_point(&params, Strategy::None, Scenario::Sweep { load: 0.5 }).await?;
            let twin_unloaded = simulate(&lab, Scenario::Sweep { load: 0.5 }, Strategy::None)?;
            // The twins on the other seeds, each with its own unloaded p99.
            let other_seeds = (1..TWIN_SEEDS)
                .map(|k| {
                    let lab = LabParams {
                        seed: lab.seed.wrapping_add(k),
                        ..lab.clone()
                    };
                    let unloaded = simulate(&lab, Scenario::Sweep { load: 0.5 }, Strategy::None)?;
                    Ok((lab, unloaded))
                })
                .collect::<Result<Vec<_>, spillway_lab::LabError>>()?;
            for &strategy in strategies {
                let started = Instant::now();
                let mut overloads = Vec::with_capacity(MATRIX_LOADS.len());
                for load in MATRIX_LOADS {
                    overloads.push(run_point(&params, strategy, Scenario::Sweep { load }).await?);
                }
                let slowdown = run_point(
                    &params,
                    strategy,
                    Scenario::Slowdown {
                        load: EVENT_BASE_LOAD,
                    },
                )
                .await?;
                let overloads: [_; 3] = overloads
                    .try_into()
                    .map_err(|_| "the matrix has three loads")?;
                let cell = Cell::new(
                    strategy, shape, &lab, &unloaded, &overloads, &slowdown, None,
                );
                let simulated = run_cell(&lab, strategy, shape, &twin_unloaded, false)?;
                eprintln!(
                    "loopback matrix: {strategy}: goodput {:.2} {:.2} {:.2}, p99 {:.1}x {:.1}x \
                     {:.1}x, recovery {:?} ({:.0} s)",
                    cell.goodput[0],
                    cell.goodput[1],
                    cell.goodput[2],
                    cell.p99_ratio[0],
                    cell.p99_ratio[1],
                    cell.p99_ratio[2],
                    cell.recovery_s,
                    started.elapsed().as_secs_f64()
                );
                for (lab, unloaded) in &other_seeds {
                    matrix
                        .other_seeds
                        .push(run_cell(lab, strategy, shape, unloaded, false)?);
                }
                matrix.loopback.push(cell);
                matrix.simulated.push(simulated);
            }
        }
    }
    Ok(matrix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway::adaptive::QueueOrder;
    use spillway_lab::ServiceTime;

    /// The matrix's text says which `envoy_gradient` settings it ran with, when not Envoy's.
    #[test]
    fn the_markdown_names_envoy_s_settings_when_they_are_not_the_defaults() {
        let matrix = LoopbackMatrix {
            loopback: Vec::new(),
            simulated: Vec::new(),
            other_seeds: Vec::new(),
            envoy: EnvoyGradientConfig::default(),
            adaptive_queue: None,
        };
        assert!(!matrix.markdown().contains("In these runs"));
        let tuned = LoopbackMatrix {
            envoy: EnvoyGradientConfig {
                start_limit: 50,
                buffer_scaling: spillway::adaptive::BufferScaling::Spread,
                window_min_rtts: 0.0,
                ..Default::default()
            },
            ..matrix
        };
        assert!(tuned.markdown().contains(
            "In these runs `envoy_gradient` has buffer_scaling = \"spread\" and start_limit = 50 \
             and window_min_rtts = 0.0."
        ));
    }

    /// The queue reaches each shape's runs (and through `lab_params` their twins) with its
    /// timeout stretched as the clients' are, and the text names it.
    #[test]
    fn the_queue_is_stretched_with_the_clients_and_named() {
        let queue = AdaptiveQueue {
            capacity: 1000,
            order: QueueOrder::Adaptive,
            timeout: Duration::from_millis(190),
        };
        let base = LoopbackParams {
            adaptive_queue: Some(queue),
            ..LoopbackParams::default()
        };
        let upstream = UpstreamShape {
            workers: 32,
            service: ServiceTime::Exponential {
                mean: Duration::from_millis(80),
            },
            seed: 1,
            flaky: false,
        };
        let params = shape_params(&base, upstream, 390.0);
        assert_eq!(params.client_timeout, Duration::from_millis(1600));
        let stretched = Some(AdaptiveQueue {
            timeout: Duration::from_millis(1520),
            ..queue
        });
        assert_eq!(params.adaptive_queue, stretched);
        assert_eq!(params.lab_params().adaptive_queue, stretched);
        let four = UpstreamShape {
            workers: 4,
            ..upstream
        };
        let fast = shape_params(&base, four, 390.0);
        assert_eq!(fast.adaptive_queue, Some(queue));
        let matrix = LoopbackMatrix {
            loopback: Vec::new(),
            simulated: Vec::new(),
            other_seeds: Vec::new(),
            envoy: EnvoyGradientConfig {
                start_limit: 50,
                ..Default::default()
            },
            adaptive_queue: Some(queue),
        };
        assert!(matrix.markdown().contains(
            "In these runs `envoy_gradient` has start_limit = 50; the adaptive limits have a \
             queue: 1000 places, 190ms, order adaptive; the queue's timeout is stretched with \
             the clients' on the slower services (2 times on 8 workers, 8 times on 32)."
        ));
    }
}
