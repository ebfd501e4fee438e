//! Netflix's `ExpAvgMeasurement`: a plain average over the first samples, then an exponential
//! moving average with factor `2 / (window + 1)`.

/// An exponentially smoothed value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ExpAvg {
    value: f64,
    sum: f64,
    count: u32,
    window: u32,
    warmup: u32,
}

impl ExpAvg {
    pub(crate) fn new(window: u32, warmup: u32) -> Self {
        Self {
            value: 0.0,
            sum: 0.0,
            count: 0,
            window,
            warmup,
        }
    }

    /// Adds `sample` and returns the new value.
    pub(crate) fn add(&mut self, sample: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / f64::from(self.count);
        } else {
            let factor = 2.0 / (f64::from(self.window) + 1.0);
            self.value = self.value * (1.0 - factor) + sample * factor;
        }
        self.value
    }

    pub(crate) fn get(&self) -> f64 {
        self.value
    }

    /// Scales the value (Netflix's `update(current -> current * factor)`).
    pub(crate) fn scale(&mut self, factor: f64) {
        self.value *= factor;
    }
}
