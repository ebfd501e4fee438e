//! A small seeded generator for jitter (SplitMix64): no dependency, reproducible in tests.

use std::hash::{BuildHasher, Hasher};

/// SplitMix64.
#[derive(Debug, Clone)]
pub(crate) struct Jitter {
    state: u64,
}

impl Jitter {
    /// Seeded with `seed`.
    pub(crate) fn with_seed(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Seeded from the process's random hash keys: instances started together still jitter
    /// apart.
    pub(crate) fn random() -> Self {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(0x5EED);
        Self::with_seed(hasher.finish())
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..high`.
    pub(crate) fn next_f64(&mut self, low: f64, high: f64) -> f64 {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        low + unit * (high - low)
    }
}
