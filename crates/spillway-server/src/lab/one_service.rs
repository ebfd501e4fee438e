//! The one service a long run (`spillway lab --long-run`) or a trace (`--trace`) runs its
//! strategies on, and how their reports name it.

use serde::Serialize;
use spillway::adaptive::{AdaptiveQueue, BbrConfig, EnvoyGradientConfig};
use spillway_lab::LabParams;

/// The service of a report on one service, and where it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OneService {
    /// Whether it ran through the real proxy on loopback (beside the simulated twin).
    pub loopback: bool,
    /// The service's workers.
    pub workers: u32,
    /// Its service times, as the tables describe them.
    pub service: String,
    /// Its capacity in requests a second: measured on loopback, else the nominal one.
    pub capacity: f64,
    /// The seed of the draws.
    pub seed: u64,
    /// `envoy_gradient`'s settings.
    pub envoy: EnvoyGradientConfig,
    /// `bbr_probe`'s settings.
    pub bbr: BbrConfig,
    /// The adaptive limits' queue, if they have one.
    pub adaptive_queue: Option<AdaptiveQueue>,
    /// The simulated service's spread ([`LabParams::service_spread`]; on loopback, the
    /// twin's).
    pub service_spread: f64,
}

impl OneService {
    /// The service of `params` (as given: its nominal mean) at `capacity`, run on loopback or
    /// simulated.
    pub fn of(params: &LabParams, loopback: bool, capacity: f64) -> Self {
        Self {
            loopback,
            workers: params.workers,
            service: params.service_time.label(),
            capacity,
            seed: params.seed,
            envoy: params.envoy,
            bbr: params.bbr,
            adaptive_queue: params.adaptive_queue,
            service_spread: params.service_spread,
        }
    }

    /// Where it ran, the service, its capacity, the seed and the settings that are not the
    /// defaults (a simulated spread among them), as a report's first sentences say them.
    ///
    /// ```
    /// use spillway_lab::LabParams;
    /// use spillway_server::lab::one_service::OneService;
    ///
    /// let service = OneService::of(&LabParams::default(), true, 392.0);
    /// assert_eq!(
    ///     service.describe(),
    ///     "through the real proxy on loopback, beside its simulated twin: 8 workers, \
    ///      exponential, mean 10ms, capacity 392 requests/s (measured); seed 1."
    /// );
    /// let spread = LabParams { service_spread: 0.07, ..LabParams::default() };
    /// assert!(OneService::of(&spread, false, 800.0).describe().ends_with(
    ///     "seed 1. In these runs each simulated call takes its work's time within 7% either way."
    /// ));
    /// ```
    pub fn describe(&self) -> String {
        let (lab, capacity) = if self.loopback {
            (
                "through the real proxy on loopback, beside its simulated twin",
                "measured",
            )
        } else {
            ("simulated", "nominal")
        };
        let lab_params = LabParams {
            envoy: self.envoy,
            bbr: self.bbr,
            adaptive_queue: self.adaptive_queue,
            service_spread: self.service_spread,
            ..LabParams::default()
        };
        let settings: String = lab_params
            .settings()
            .into_iter()
            .map(|text| format!(" In these runs {text}."))
            .collect();
        format!(
            "{lab}: {} workers, {}, capacity {:.0} requests/s ({capacity}); seed {}.{settings}",
            self.workers, self.service, self.capacity, self.seed
        )
    }
}
