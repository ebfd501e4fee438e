//! A QPS limit shared by a fleet: Sentinel's sliding window, kept in Redis, checked and counted
//! in one script call per request (the *strict* check).

use crate::shared::{self, sealed, Answer, Beat, Mode, Shared};
use crate::{Error, Time};
use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation};
use std::sync::OnceLock;
use std::time::Duration;

/// The script, loaded once per Redis by its SHA (and loaded again if Redis forgot it).
fn script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(include_str!("scripts/window.lua")))
}

/// A QPS limit that every process naming the same `name` shares: at most `limit` passes a
/// second over a sliding window of `buckets` buckets spanning `interval`, with Sentinel's
/// semantics (a request taking `acquire` passes is refused when the window's pass QPS plus
/// `acquire` exceeds the limit; buckets leave the window when they are more than `interval`
/// old).
///
/// Each check is one atomic script call: exact across the fleet, at the cost of a round trip
/// to Redis per request.
///
/// ```no_run
/// # async fn demo() -> Result<(), spillway_redis::Error> {
/// use spillway_redis::{SharedWindow, Time};
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let mut redis = client.get_connection_manager().await?;
/// let orders = SharedWindow::per_second("orders", 1000.0)?;
/// if orders.try_acquire(&mut redis, 1).await?.admitted {
///     // serve it
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SharedWindow {
    key: String,
    limit: f64,
    interval_ms: u64,
    buckets: u32,
    time: Time,
}

/// What a check decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Checked {
    /// Whether the request may pass (and was counted).
    pub admitted: bool,
    /// The window's passes before this request.
    pub passes: u64,
    /// The time of the check, in milliseconds, on the clock it used.
    pub now_ms: u64,
}

impl SharedWindow {
    /// `limit` a second over Sentinel's one-second window of two 500 ms buckets, on Redis's
    /// clock.
    ///
    /// # Errors
    ///
    /// As [`SharedWindow::new`].
    pub fn per_second(name: &str, limit: f64) -> Result<Self, Error> {
        Self::new(name, limit, Duration::from_secs(1), 2, Time::Redis)
    }

    /// `limit` a second over `interval`, cut into `buckets` buckets, read on `time`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if `name` is empty, longer than 200 bytes or holds a brace, `limit` is negative or
    /// not finite, `interval` is not a positive whole number of milliseconds, or `buckets` is
    /// zero or does not divide it.
    pub fn new(
        name: &str,
        limit: f64,
        interval: Duration,
        buckets: u32,
        time: Time,
    ) -> Result<Self, Error> {
        crate::check_name(name)?;
        let interval_ms = check_settings(limit, interval, buckets)
            .map_err(|(_, problem)| Error::Invalid(problem))?;
        Ok(Self {
            key: crate::key(name, "window"),
            limit,
            interval_ms,
            buckets,
            time,
        })
    }

    /// The Redis key its window lives under (one cluster slot, by its hash tag).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Checks and, if admitted, counts `acquire` passes, in one call.
    ///
    /// # Errors
    ///
    /// Redis failed or answered something else than the script's answer.
    pub async fn try_acquire<C: ConnectionLike>(
        &self,
        redis: &mut C,
        acquire: u32,
    ) -> Result<Checked, Error> {
        let invocation = sealed::Sealed::invocation(self, Mode::All, u64::from(acquire), 0, None);
        let answer = shared::call(redis, invocation).await?;
        Ok(Checked {
            admitted: answer.count == 1,
            passes: answer.level,
            now_ms: answer.now_ms,
        })
    }

    /// Passes a second it allows.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// A bucket's width, in milliseconds.
    pub fn bucket_ms(&self) -> u64 {
        self.interval_ms / u64::from(self.buckets)
    }

    /// Where it reads the time.
    pub fn time(&self) -> &Time {
        &self.time
    }
}

/// Checks a shared window's settings: `limit` finite and at least 0, `interval` a positive
/// whole number of milliseconds, `buckets` dividing it. Returns the interval in milliseconds.
///
/// # Errors
///
/// The first setting at fault (`"limit"`, `"interval"` or `"buckets"`) and why.
///
/// ```
/// use spillway_redis::check_settings;
/// use std::time::Duration;
///
/// assert_eq!(check_settings(100.0, Duration::from_secs(1), 2), Ok(1000));
/// assert_eq!(check_settings(100.0, Duration::from_secs(1), 3).unwrap_err().0, "buckets");
/// ```
pub fn check_settings(
    limit: f64,
    interval: Duration,
    buckets: u32,
) -> Result<u64, (&'static str, String)> {
    if !(limit.is_finite() && limit >= 0.0) {
        return Err((
            "limit",
            format!("limit must be a finite number >= 0, not {limit}"),
        ));
    }
    let interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
    if interval_ms == 0 || Duration::from_millis(interval_ms) != interval {
        return Err((
            "interval",
            format!("interval must be a positive whole number of milliseconds, not {interval:?}"),
        ));
    }
    if buckets == 0 || interval_ms % u64::from(buckets) != 0 {
        return Err((
            "buckets",
            format!("{buckets} buckets do not divide an interval of {interval_ms} ms"),
        ));
    }
    Ok(interval_ms)
}

impl Shared for SharedWindow {}

impl sealed::Sealed for SharedWindow {
    fn key(&self) -> &str {
        &self.key
    }

    fn rate(&self) -> f64 {
        self.limit
    }

    /// A bucket's width: unused passes go back to the bucket they were counted in.
    fn lease_ms(&self) -> u64 {
        self.bucket_ms()
    }

    fn span_ms(&self) -> u64 {
        self.interval_ms
    }

    fn report_group_ms(&self) -> u64 {
        self.bucket_ms()
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
            .arg(self.time.now_arg())
            .arg(self.interval_ms)
            .arg(self.buckets)
            .arg(self.limit)
            .arg(count)
            .arg(mode.as_str())
            .arg(tag);
        if let Some(beat) = beat {
            invocation.arg(beat.member).arg(beat.ttl_ms);
        }
        invocation
    }

    /// The window's passes, the last lease's included.
    fn reading(&self, answer: &Answer) -> f64 {
        (answer.level + answer.count) as f64
    }
}
