//! Linux's load1: an exponentially damped average of the runnable threads, updated every 5 s.

/// How often the kernel folds the runnable count into the average (`LOAD_FREQ`), in ns.
pub(crate) const LOAD_PERIOD_NANOS: u64 = 5_000_000_000;

/// The 1-minute load average, in floating point (the kernel's fixed-point `EXP_1` is
/// `1884 / 2048`, this is `exp(-5 / 60)`, 0.92004 against 0.91992).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LoadAverage {
    value: f64,
}

impl LoadAverage {
    /// Folds in the runnable count at one 5-second update.
    pub(crate) fn update(&mut self, runnable: u64) {
        let decay = (-5.0f64 / 60.0).exp();
        self.value = self.value * decay + runnable as f64 * (1.0 - decay);
    }

    pub(crate) fn value(&self) -> f64 {
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaches_63_percent_of_a_step_in_one_minute() {
        let mut load = LoadAverage::default();
        for _ in 0..12 {
            load.update(100);
        }
        // 1 - exp(-1)
        assert!((load.value() - 63.212).abs() < 0.01, "{}", load.value());
    }
}
