//! Guava's `SmoothRateLimiter` arithmetic on a private copy of the state, with every formula in
//! Java's types and truncations. [`super::schedule`] publishes the results atomically.

/// Which curve stored permits follow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Curve {
    /// `SmoothBursty`: stored permits are free; at most `max_burst_seconds` of them.
    Bursty { max_burst_seconds: f64 },
    /// `SmoothWarmingUp`: stored permits above the threshold cost more, up to
    /// `cold_factor * stable_interval` at max permits.
    WarmingUp {
        warmup_period_micros: i64,
        cold_factor: f64,
        slope: f64,
        threshold_permits: f64,
    },
}

/// The limiter's state, as Guava's fields.
#[derive(Debug, Clone, Copy)]
pub(super) struct Smooth {
    pub(super) curve: Curve,
    pub(super) stored_permits: f64,
    pub(super) max_permits: f64,
    pub(super) stable_interval_micros: f64,
    pub(super) next_free_ticket_micros: i64,
}

impl Smooth {
    pub(super) fn new(curve: Curve) -> Self {
        Self {
            curve,
            stored_permits: 0.0,
            max_permits: 0.0,
            stable_interval_micros: 0.0,
            next_free_ticket_micros: 0,
        }
    }

    /// Guava's `doSetRate(permitsPerSecond, nowMicros)`.
    pub(super) fn set_rate(&mut self, permits_per_second: f64, now_micros: i64) {
        self.resync(now_micros);
        self.stable_interval_micros = 1_000_000.0 / permits_per_second;
        let stable = self.stable_interval_micros;
        let old_max_permits = self.max_permits;
        match &mut self.curve {
            Curve::Bursty { max_burst_seconds } => {
                self.max_permits = *max_burst_seconds * permits_per_second;
                self.stored_permits = if old_max_permits == f64::INFINITY {
                    self.max_permits
                } else if old_max_permits == 0.0 {
                    0.0
                } else {
                    self.stored_permits * self.max_permits / old_max_permits
                };
            }
            Curve::WarmingUp {
                warmup_period_micros,
                cold_factor,
                slope,
                threshold_permits,
            } => {
                let warmup = *warmup_period_micros as f64;
                let cold_interval = stable * *cold_factor;
                *threshold_permits = 0.5 * warmup / stable;
                self.max_permits = *threshold_permits + 2.0 * warmup / (stable + cold_interval);
                *slope = (cold_interval - stable) / (self.max_permits - *threshold_permits);
                self.stored_permits = if old_max_permits == f64::INFINITY {
                    0.0
                } else if old_max_permits == 0.0 {
                    self.max_permits
                } else {
                    self.stored_permits * self.max_permits / old_max_permits
                };
            }
        }
    }

    /// Guava's `doGetRate`.
    pub(super) fn rate(&self) -> f64 {
        1_000_000.0 / self.stable_interval_micros
    }

    /// Guava's `coolDownIntervalMicros`. Deliberate deviation: a zero warm-up period gives
    /// `0 / 0 = NaN` in Guava, which turns stored permits into NaN after any idle time; here a
    /// warm-up curve without permits cools down like a bursty one (at the stable interval) and
    /// never stores a permit.
    #[inline]
    fn cool_down_interval_micros(&self) -> f64 {
        match self.curve {
            Curve::Bursty { .. } => self.stable_interval_micros,
            Curve::WarmingUp {
                warmup_period_micros,
                ..
            } => {
                if self.max_permits == 0.0 {
                    self.stable_interval_micros
                } else {
                    warmup_period_micros as f64 / self.max_permits
                }
            }
        }
    }

    /// Guava's `resync`: stored permits grow while the limiter is unused.
    #[inline]
    pub(super) fn resync(&mut self, now_micros: i64) {
        if now_micros > self.next_free_ticket_micros {
            let new_permits = (now_micros - self.next_free_ticket_micros) as f64
                / self.cool_down_interval_micros();
            self.stored_permits = java_min(self.max_permits, self.stored_permits + new_permits);
            self.next_free_ticket_micros = now_micros;
        }
    }

    /// Stored permits as a resync at `now_micros` would leave them, without changing anything.
    pub(super) fn stored_at(&self, now_micros: i64) -> f64 {
        let mut copy = *self;
        copy.resync(now_micros);
        copy.stored_permits
    }

    /// Guava's `reserveEarliestAvailable`: the moment this reservation may go (the caller pays
    /// the previous caller's debt), charging its own cost to the next one.
    #[inline]
    pub(super) fn reserve_earliest_available(&mut self, permits: u32, now_micros: i64) -> i64 {
        self.resync(now_micros);
        let moment = self.next_free_ticket_micros;
        let required = f64::from(permits);
        if let Curve::Bursty { .. } = self.curve {
            if self.stored_permits >= required {
                // Guava's arithmetic below with no fresh permits: a bursty limiter's stored
                // permits cost no time, and 0 * stableIntervalMicros truncates to 0 (also when
                // the interval is infinite: (long) NaN is 0). The moment stays free.
                self.stored_permits -= required;
                return moment;
            }
        }
        let stored_to_spend = java_min(required, self.stored_permits);
        let fresh = required - stored_to_spend;
        // Java: storedPermitsToWaitTime(...) + (long) (freshPermits * stableIntervalMicros)
        let wait = self
            .stored_permits_to_wait_time(self.stored_permits, stored_to_spend)
            .saturating_add((fresh * self.stable_interval_micros) as i64);
        self.next_free_ticket_micros = moment.saturating_add(wait);
        self.stored_permits -= stored_to_spend;
        moment
    }

    /// Guava's `storedPermitsToWaitTime`: free for a bursty limiter; for a warming-up one the
    /// area under the curve of the permits taken (a trapezoid above the threshold, the stable
    /// interval below it).
    #[inline]
    fn stored_permits_to_wait_time(&self, stored: f64, mut to_take: f64) -> i64 {
        let Curve::WarmingUp {
            slope,
            threshold_permits,
            ..
        } = self.curve
        else {
            return 0;
        };
        let permits_to_time = |permits: f64| self.stable_interval_micros + permits * slope;
        let above = stored - threshold_permits;
        let mut micros: i64 = 0;
        if above > 0.0 {
            let above_to_take = java_min(above, to_take);
            let length = permits_to_time(above) + permits_to_time(above - above_to_take);
            micros = (above_to_take * length / 2.0) as i64;
            to_take -= above_to_take;
        }
        micros.saturating_add((self.stable_interval_micros * to_take) as i64)
    }
}

/// Java's `Math.min` for doubles: NaN if either is NaN. (Of two zeros, Java returns the
/// negative one; no quantity here is ever negative zero.)
#[inline]
fn java_min(a: f64, b: f64) -> f64 {
    // One `minsd`: `b` unless `a < b`, so `b` when either is NaN...
    let smaller = if a < b { a } else { b };
    // ...and NaN when `a` is.
    if a.is_nan() {
        a
    } else {
        smaller
    }
}

#[cfg(test)]
mod tests {
    use super::{java_min, Curve, Smooth};
    use proptest::prelude::*;

    /// Guava's `reserveEarliestAvailable` for a bursty limiter, written out without the short
    /// path for stored permits.
    fn guava_bursty_reserve(smooth: &mut Smooth, permits: u32, now_micros: i64) -> i64 {
        smooth.resync(now_micros);
        let moment = smooth.next_free_ticket_micros;
        let required = f64::from(permits);
        let stored_to_spend = java_min(required, smooth.stored_permits);
        let fresh = required - stored_to_spend;
        let wait = 0i64.saturating_add((fresh * smooth.stable_interval_micros) as i64);
        smooth.next_free_ticket_micros = moment.saturating_add(wait);
        smooth.stored_permits -= stored_to_spend;
        moment
    }

    proptest! {
        #[test]
        fn the_short_path_for_stored_permits_is_guavas_arithmetic(
            rate in prop_oneof![0.001f64..10.0, 10.0f64..1e7, Just(f64::INFINITY)],
            max_burst_seconds in prop_oneof![Just(1.0f64), 0.1f64..10.0],
            steps in prop::collection::vec((0i64..2_000_000, 1u32..20), 1..40),
        ) {
            let mut ours = Smooth::new(Curve::Bursty { max_burst_seconds });
            ours.set_rate(rate, 0);
            let mut reference = ours;
            let mut now = 0;
            for (advance, permits) in steps {
                now += advance;
                let moment = ours.reserve_earliest_available(permits, now);
                let expected = guava_bursty_reserve(&mut reference, permits, now);
                prop_assert_eq!(moment, expected);
                prop_assert_eq!(ours.next_free_ticket_micros, reference.next_free_ticket_micros);
                prop_assert_eq!(ours.stored_permits.to_bits(), reference.stored_permits.to_bits());
            }
        }
    }

    #[test]
    fn java_min_is_nan_when_either_is_nan_and_the_smaller_otherwise() {
        let values = [
            f64::NEG_INFINITY,
            -1.5,
            0.0,
            1.0,
            2.5,
            f64::INFINITY,
            f64::NAN,
        ];
        for a in values {
            for b in values {
                let expected = if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else if a <= b {
                    a
                } else {
                    b
                };
                let got = java_min(a, b);
                assert_eq!(got.to_bits(), expected.to_bits(), "min({a}, {b})");
            }
        }
    }
}
