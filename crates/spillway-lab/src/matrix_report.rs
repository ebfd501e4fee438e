//! The simulated shape matrix with its fixed-limit floor: what `spillway lab --matrix` prints
//! and docs/overload.md holds.

use crate::fixed_floor::{floor_comparison_markdown, floors_markdown, run_floors, FixedFloor};
use crate::matrix::{matrix_markdown, run_matrix, Cell};
use crate::params::{LabError, LabParams};
use crate::strategy::Strategy;
use serde::Serialize;
use spillway::adaptive::{AdaptiveQueue, BbrConfig, EnvoyGradientConfig};

/// The shape matrix's cells and, on the same shapes, the fixed-limit floor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatrixReport {
    /// Each strategy's cells ([`run_matrix`]).
    pub cells: Vec<Cell>,
    /// The largest fixed limit meeting the overload target on each shape, and its long run
    /// ([`run_floors`]).
    pub floors: Vec<FixedFloor>,
    /// `envoy_gradient`'s settings in these runs.
    pub envoy: EnvoyGradientConfig,
    /// `bbr_probe`'s settings in these runs.
    pub bbr: BbrConfig,
    /// The adaptive strategies' queue in these runs (the floor's fixed limits have none).
    pub adaptive_queue: Option<AdaptiveQueue>,
}

impl MatrixReport {
    /// Runs the matrix of `strategies` and the floor on `base`'s clients and mean service time.
    ///
    /// # Errors
    ///
    /// A [`LabError`] if a parameter cannot be simulated, or if `strategies` is empty.
    pub fn run(base: &LabParams, strategies: &[Strategy]) -> Result<Self, LabError> {
        Ok(Self {
            cells: run_matrix(base, strategies)?,
            floors: run_floors(base)?,
            envoy: base.envoy,
            bbr: base.bbr,
            adaptive_queue: base.adaptive_queue,
        })
    }

    /// The matrix's tables ([`matrix_markdown`]), then a section on the floor: how each
    /// strategy's long run compares with it, and the floor on each shape. Settings that are
    /// not the defaults (Envoy's, BBR's, no queue) are named first.
    pub fn markdown(&self) -> String {
        let lab = LabParams {
            envoy: self.envoy,
            bbr: self.bbr,
            adaptive_queue: self.adaptive_queue,
            ..LabParams::default()
        };
        let mut out = String::new();
        for text in lab.settings() {
            out.push_str(&format!("In these runs {text}.\n\n"));
        }
        out.push_str(&matrix_markdown(&self.cells));
        out.push_str("\n### The fixed-limit floor\n\n");
        out.push_str(&floor_comparison_markdown(&self.cells, &self.floors));
        out.push('\n');
        out.push_str(&floors_markdown(&self.floors));
        out
    }
}
