//! A token bucket shared by a fleet: Guava's smooth bursty `RateLimiter`, kept in Redis, checked
//! and reserved in one script call.

use crate::shared::{self, sealed, Answer, Beat, Mode, Shared};
use crate::{Error, Time};
use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation};
use std::sync::OnceLock;

/// How long a lease of a bucket's permits stays good, in milliseconds.
const LEASE_MS: u64 = 100;

/// The script, loaded once per Redis by its SHA (and loaded again if Redis forgot it).
fn script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(include_str!("scripts/bucket.lua")))
}

/// A rate that every process naming the same `name` shares, with Guava's `SmoothBursty`
/// semantics: permits are made at `rate` a second and, while unused, stored up to
/// `max_burst_seconds` of them; a request is granted when the bucket's next free moment is not
/// after now, takes stored permits first, and pays for the fresh ones it takes by moving the next
/// free moment on (so a large request passes at once and the ones after it wait). The
/// arithmetic is Guava's: microseconds, `(long)` truncation of the wait, stored permits as a
/// double.
///
/// Each check is one atomic script call: exact across the fleet, a round trip per request. A
/// [`crate::LeasedBucket`] takes permits in batches instead.
///
/// ```no_run
/// # async fn demo() -> Result<(), spillway_redis::Error> {
/// use spillway_redis::SharedBucket;
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let mut redis = client.get_connection_manager().await?;
/// // 100 a second, bursts of up to 2 s of permits (200) after a quiet spell.
/// let exports = SharedBucket::per_second("exports", 100.0, 2.0)?;
/// if exports.try_acquire(&mut redis, 1).await?.admitted {
///     // serve it
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SharedBucket {
    key: String,
    rate: f64,
    max_burst_seconds: f64,
    time: Time,
}

/// What a bucket's check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    /// Whether the request may pass (its permits reserved).
    pub admitted: bool,
    /// Whole permits stored after the check.
    pub stored: u64,
    /// When the bucket grants again, on its clock, in milliseconds (rounded up).
    pub next_free_ms: u64,
    /// The time of the check, in milliseconds, on the clock it used.
    pub now_ms: u64,
}

impl SharedBucket {
    /// `rate` permits a second storing up to `max_burst_seconds` of them, on Redis's clock.
    ///
    /// # Errors
    ///
    /// As [`SharedBucket::new`].
    pub fn per_second(name: &str, rate: f64, max_burst_seconds: f64) -> Result<Self, Error> {
        Self::new(name, rate, max_burst_seconds, Time::Redis)
    }

    /// `rate` permits a second storing up to `max_burst_seconds` of them, read on `time`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if `name` is empty, longer than 200 bytes or holds a brace, `rate` is
    /// not a finite number above 0, or `max_burst_seconds` is negative or not finite.
    pub fn new(name: &str, rate: f64, max_burst_seconds: f64, time: Time) -> Result<Self, Error> {
        crate::check_name(name)?;
        check_bucket(rate, max_burst_seconds).map_err(|(_, problem)| Error::Invalid(problem))?;
        Ok(Self {
            key: crate::key(name, "bucket"),
            rate,
            max_burst_seconds,
            time,
        })
    }

    /// The Redis key its state lives under (one cluster slot, by its hash tag).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Permits a second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Seconds of permits it stores at most.
    pub fn max_burst_seconds(&self) -> f64 {
        self.max_burst_seconds
    }

    /// Reserves `permits` if the bucket is free now (Guava's `tryAcquire(permits, 0)`), in one
    /// call; a refusal changes nothing.
    ///
    /// # Errors
    ///
    /// Redis failed or answered something else than the script's answer.
    pub async fn try_acquire<C: ConnectionLike>(
        &self,
        redis: &mut C,
        permits: u32,
    ) -> Result<Reserved, Error> {
        let invocation = sealed::Sealed::invocation(self, Mode::All, u64::from(permits), 0, None);
        let answer = shared::call(redis, invocation).await?;
        Ok(Reserved {
            admitted: permits > 0 && answer.count == u64::from(permits),
            stored: answer.level,
            next_free_ms: answer.free_at_ms,
            now_ms: answer.now_ms,
        })
    }
}

/// Checks a shared bucket's settings: `rate` finite and above 0, `max_burst_seconds` finite and
/// at least 0.
///
/// # Errors
///
/// The first setting at fault (`"rate"` or `"burst"`) and why.
///
/// ```
/// use spillway_redis::check_bucket;
///
/// assert!(check_bucket(100.0, 1.0).is_ok());
/// assert_eq!(check_bucket(0.0, 1.0).unwrap_err().0, "rate");
/// ```
pub fn check_bucket(rate: f64, max_burst_seconds: f64) -> Result<(), (&'static str, String)> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err((
            "rate",
            format!("a bucket's rate must be a finite number above 0, not {rate}"),
        ));
    }
    if !(max_burst_seconds.is_finite() && max_burst_seconds >= 0.0) {
        return Err((
            "burst",
            format!(
                "a bucket's burst must be a finite number of seconds >= 0, not {max_burst_seconds}"
            ),
        ));
    }
    Ok(())
}

impl Shared for SharedBucket {}

impl sealed::Sealed for SharedBucket {
    fn key(&self) -> &str {
        &self.key
    }

    fn rate(&self) -> f64 {
        self.rate
    }

    /// 100 ms: long enough for a batch to be used at a process's share of the rate, short
    /// enough that what a process does not use goes back soon.
    fn lease_ms(&self) -> u64 {
        LEASE_MS
    }

    /// A bucket keeps no history: its fallback shares the rate over a second in two buckets,
    /// and what it admitted there is reported (one call a bucket).
    fn span_ms(&self) -> u64 {
        1000
    }

    fn report_group_ms(&self) -> u64 {
        500
    }

    fn invocation(
        &self,
        mode: Mode,
        count: u64,
        tag: u64,
        beat: Option<&Beat<'_>>,
    ) -> ScriptInvocation<'static> {
        let mut invocation = script().key(&self.key);
        if let Some(beat) = beat {
            invocation.key(beat.key);
        }
        invocation
            .arg(self.time.now_micros_arg())
            .arg(self.rate)
            .arg(self.max_burst_seconds)
            .arg(count)
            .arg(mode.as_str())
            .arg(tag);
        if let Some(beat) = beat {
            invocation.arg(beat.member).arg(beat.ttl_ms);
        }
        invocation
    }

    /// A bucket that refuses is spending at its rate.
    fn reading(&self, _answer: &Answer) -> f64 {
        self.rate
    }
}
