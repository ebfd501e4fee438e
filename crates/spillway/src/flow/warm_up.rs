//! Sentinel's `WarmUpController`: a token bucket that starts cold and lets the rate climb.

use super::{Decision, FlowStats};
use crate::sync::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// The warm-up token bucket shared by [`WarmUp`] and
/// [`WarmUpThrottle`](super::WarmUpThrottle), with Sentinel's arithmetic to the integer
/// truncation:
///
/// ```text
/// warningToken = (int)(period * count) / (coldFactor - 1)              (integer division)
/// maxToken     = warningToken + (int)(2 * period * count / (1 + coldFactor))
/// slope        = (coldFactor - 1) / count / (maxToken - warningToken)
/// ```
///
/// Tokens are synced once per second, at whole seconds of the clock: the bucket refills at
/// `count` per second while below the warning line, or above it while the previous second's
/// passes were under `(int)count / coldFactor` (integer division), never when it sits exactly on
/// the warning line; then the previous second's passes are taken out. The bucket starts full
/// (cold): its first sync counts as if the last one were infinitely long ago, as Sentinel's does
/// on its epoch clock, whatever this clock's origin.
#[derive(Debug)]
pub(crate) struct WarmUpTokens {
    count: f64,
    cold_factor: u32,
    warning_token: i64,
    max_token: i64,
    slope: f64,
    stored: AtomicI64,
    /// Whole second (in ms) of the last sync; [`NEVER`] before the first.
    last_filled_ms: AtomicU64,
}

/// `last_filled_ms` before the first sync. Sentinel's clock is the epoch and its first sync sees
/// decades since its `lastFilledTime` of 0, which fills the bucket; spillway's clocks may start at
/// process start, so "never" is a value of its own.
const NEVER: u64 = u64::MAX;

/// `Math.nextUp` for the non-negative values it is applied to here (`f64::next_up` needs a newer
/// Rust than this crate's minimum).
fn next_up(x: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        x
    } else if x == 0.0 {
        f64::from_bits(1)
    } else if x > 0.0 {
        f64::from_bits(x.to_bits() + 1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    }
}

impl WarmUpTokens {
    pub(crate) fn new(count: f64, period: Duration, cold_factor: u32) -> Self {
        let period_secs = period.as_secs_f64();
        let cold = f64::from(cold_factor);
        // Java: int warningToken = (int)(warmUpPeriodInSec * count) / (coldFactor - 1);
        let warning_token = i64::from((period_secs * count) as i32) / i64::from(cold_factor - 1);
        // Java: maxToken = warningToken + (int)(2 * warmUpPeriodInSec * count / (1.0 + coldFactor));
        let max_token =
            warning_token + i64::from((2.0 * period_secs * count / (1.0 + cold)) as i32);
        let slope = (cold - 1.0) / count / (max_token - warning_token) as f64;
        Self {
            count,
            cold_factor,
            warning_token,
            max_token,
            slope,
            stored: AtomicI64::new(0),
            last_filled_ms: AtomicU64::new(NEVER),
        }
    }

    pub(crate) fn count(&self) -> f64 {
        self.count
    }

    pub(crate) fn warning_token(&self) -> i64 {
        self.warning_token
    }

    pub(crate) fn max_token(&self) -> i64 {
        self.max_token
    }

    pub(crate) fn stored(&self) -> i64 {
        self.stored.load(Ordering::Acquire)
    }

    /// The rate allowed at the current fill: `count` below the warning line, and
    /// `nextUp(1 / (above * slope + 1 / count))` above it.
    ///
    /// Deliberate deviation: when the bucket has no warm-up range (`maxToken == warningToken`,
    /// for a tiny `period * count`), Sentinel computes `0 * Infinity = NaN` and blocks everything;
    /// here zero tokens above the line contribute zero, giving `nextUp(count)`.
    pub(crate) fn allowed_qps(&self, rest: i64) -> Option<f64> {
        if rest < self.warning_token {
            return None;
        }
        let above = rest - self.warning_token;
        let interval = if above == 0 {
            1.0 / self.count
        } else {
            above as f64 * self.slope + 1.0 / self.count
        };
        Some(next_up(1.0 / interval))
    }

    /// Syncs the bucket once per whole second of `now_nanos` with the previous second's passes.
    pub(crate) fn sync(&self, now_nanos: u64, previous_qps: i64) {
        let now_ms = now_nanos / 1_000_000;
        let current = now_ms - now_ms % 1_000;
        let last = self.last_filled_ms.load(Ordering::Acquire);
        if last != NEVER && current <= last {
            return;
        }
        // One thread per second wins the sync (Sentinel races here and can sync twice).
        if self
            .last_filled_ms
            .compare_exchange(last, current, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let old = self.stored.load(Ordering::Acquire);
        let elapsed_ms = if last == NEVER {
            u64::MAX
        } else {
            current - last
        };
        let refilled = self.cool_down(old, elapsed_ms, previous_qps);
        // Java: storedTokens.addAndGet(0 - passQps); if (currentValue < 0) storedTokens.set(0L);
        self.stored
            .store((refilled - previous_qps).max(0), Ordering::Release);
    }

    /// Sentinel's `coolDownTokens`.
    fn cool_down(&self, old: i64, elapsed_ms: u64, previous_qps: i64) -> i64 {
        // Java: (long)(oldValue + (currentTime - lastFilledTime.get()) * count / 1000)
        let refill = || (old as f64 + elapsed_ms as f64 * self.count / 1_000.0) as i64;
        let value = if old < self.warning_token {
            refill()
        } else if old > self.warning_token {
            // Java: passQps < (int)count / coldFactor, an integer division.
            if previous_qps < i64::from(self.count as i32) / i64::from(self.cold_factor) {
                refill()
            } else {
                old
            }
        } else {
            old
        };
        value.min(self.max_token)
    }
}

/// Sentinel's `WarmUpController`: a QPS limit that starts at `count / cold_factor` and climbs to
/// `count` over the warm-up period as the traffic uses up the stored tokens, and cools down again
/// when traffic stays low.
///
/// # Examples
///
/// ```
/// use spillway::flow::{Decision, FlowStats, WarmUp};
/// use std::time::Duration;
///
/// struct Idle;
/// impl FlowStats for Idle {
///     fn pass_qps(&self, _: u64) -> f64 { 0.0 }
///     fn previous_pass_qps(&self, _: u64) -> f64 { 0.0 }
///     fn concurrency(&self) -> i64 { 0 }
/// }
///
/// let warm_up = WarmUp::new(100.0, Duration::from_secs(10), 3);
/// // Cold: 500 warning tokens, 1000 max, the first call syncs the bucket to full.
/// assert_eq!(warm_up.check(&Idle, 1_700_000_000_000_000_000, 1), Decision::Pass);
/// assert_eq!(warm_up.stored_tokens(), 1000);
/// // Full bucket: the allowed rate is count / cold_factor, nudged up.
/// assert!((warm_up.allowed_qps() - 100.0 / 3.0).abs() < 1e-9);
/// ```
#[derive(Debug)]
pub struct WarmUp {
    tokens: WarmUpTokens,
}

impl WarmUp {
    /// `count` per second once warm, `count / cold_factor` when cold, `period` to warm up.
    /// Arguments are taken as validated by [`FlowRule`](super::FlowRule): `count > 0`,
    /// `cold_factor >= 2`.
    pub fn new(count: f64, period: Duration, cold_factor: u32) -> Self {
        Self {
            tokens: WarmUpTokens::new(count, period, cold_factor),
        }
    }

    /// Pass or block `acquire` permits at `now_nanos`.
    pub fn check(&self, stats: &impl FlowStats, now_nanos: u64, acquire: u32) -> Decision {
        match self.check_current(stats, now_nanos, acquire) {
            Ok(()) => Decision::Pass,
            Err(_) => Decision::Block,
        }
    }

    /// [`check`](Self::check), returning the pass QPS seen and the QPS allowed when it blocks.
    pub(crate) fn check_current(
        &self,
        stats: &impl FlowStats,
        now_nanos: u64,
        acquire: u32,
    ) -> Result<(), (i64, f64)> {
        // Java: long passQps = (long) node.passQps(); long previousQps = (long) node.previousPassQps();
        let pass_qps = stats.pass_qps(now_nanos) as i64;
        let previous_qps = stats.previous_pass_qps(now_nanos) as i64;
        self.tokens.sync(now_nanos, previous_qps);
        let wanted = (pass_qps + i64::from(acquire)) as f64;
        let limit = self
            .tokens
            .allowed_qps(self.tokens.stored())
            .unwrap_or(self.tokens.count());
        if wanted <= limit {
            Ok(())
        } else {
            Err((pass_qps, limit))
        }
    }

    /// Tokens in the bucket (the fuller, the colder).
    pub fn stored_tokens(&self) -> i64 {
        self.tokens.stored()
    }

    /// The warning line: below it the full `count` is allowed.
    pub fn warning_tokens(&self) -> i64 {
        self.tokens.warning_token()
    }

    /// The bucket's capacity.
    pub fn max_tokens(&self) -> i64 {
        self.tokens.max_token()
    }

    /// The QPS allowed at the current fill.
    pub fn allowed_qps(&self) -> f64 {
        self.tokens
            .allowed_qps(self.tokens.stored())
            .unwrap_or(self.tokens.count())
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;

    fn tokens() -> WarmUpTokens {
        // warning 50, max 100
        WarmUpTokens::new(10.0, Duration::from_secs(10), 3)
    }

    #[test]
    fn refills_below_the_warning_line() {
        assert_eq!(tokens().cool_down(40, 1_000, 100), 50);
        assert_eq!(tokens().cool_down(40, 100_000, 100), 100); // capped at max
    }

    #[test]
    fn refills_above_the_line_only_when_traffic_is_low() {
        // (int)10 / 3 = 3: a previous second of 2 refills, of 3 does not.
        assert_eq!(tokens().cool_down(60, 1_000, 2), 70);
        assert_eq!(tokens().cool_down(60, 1_000, 3), 60);
    }

    #[test]
    fn never_refills_exactly_on_the_line() {
        assert_eq!(tokens().cool_down(50, 1_000, 0), 50);
    }

    #[test]
    fn refill_truncates_like_java() {
        // (long)(40 + 333 * 10.0 / 1000) = (long)43.33 = 43
        assert_eq!(tokens().cool_down(40, 333, 0), 43);
    }

    #[test]
    fn degenerate_bucket_allows_count() {
        // count 1, period 1 s: warningToken 0, maxToken 0 + (int)0.5 = 0, slope infinite.
        let tiny = WarmUpTokens::new(1.0, Duration::from_secs(1), 3);
        assert_eq!((tiny.warning_token(), tiny.max_token()), (0, 0));
        assert_eq!(tiny.allowed_qps(0), Some(next_up(1.0)));
    }

    #[test]
    fn next_up_matches_java() {
        assert_eq!(next_up(1.0), 1.0000000000000002);
        assert_eq!(next_up(0.0), f64::from_bits(1));
        assert_eq!(next_up(f64::INFINITY), f64::INFINITY);
    }
}
