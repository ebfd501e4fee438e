//! A QPS limit shared by a fleet: Sentinel's sliding window, kept in Redis, checked and counted
//! in one script call per request (the *strict* check).

use crate::{Error, Time};
use redis::aio::ConnectionLike;
use redis::Script;
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
        let answer = self
            .call(redis, Mode::All, u64::from(acquire), 0, None)
            .await?;
        Ok(Checked {
            admitted: answer.count == 1,
            passes: answer.passes,
            now_ms: answer.now_ms,
        })
    }

    /// One script call: `mode` with `count` (and, to return passes, the bucket they were
    /// counted in), and `beat`'s heartbeat if given.
    pub(crate) async fn call<C: ConnectionLike>(
        &self,
        redis: &mut C,
        mode: Mode,
        count: u64,
        bucket_start: u64,
        beat: Option<&Beat<'_>>,
    ) -> Result<Answer, Error> {
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
            .arg(bucket_start);
        if let Some(beat) = beat {
            invocation.arg(beat.member).arg(beat.ttl_ms);
        }
        let (count, passes, now_ms, bucket_start, live): (u64, u64, u64, u64, u64) =
            invocation.invoke_async(redis).await?;
        Ok(Answer {
            count,
            passes,
            now_ms,
            bucket_start,
            live,
        })
    }

    /// The Redis key of the processes sharing it (their heartbeats).
    pub(crate) fn members_key(&self) -> String {
        format!("{}:members", self.key.trim_end_matches(":window"))
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

/// What a script call does with its count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// All of it passes, or none (Sentinel's check).
    All,
    /// As much of it as there is room for (a lease).
    UpTo,
    /// Taken back from a bucket (an unused lease).
    Return,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::UpTo => "upto",
            Self::Return => "return",
        }
    }
}

/// A script call's answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    /// Passes granted, or taken back.
    pub(crate) count: u64,
    /// The window's passes before the call.
    pub(crate) passes: u64,
    /// The time of the call, on the limit's clock.
    pub(crate) now_ms: u64,
    /// The start of the current bucket, on the limit's clock.
    pub(crate) bucket_start: u64,
    /// The live processes, with a heartbeat; else 0.
    pub(crate) live: u64,
}

/// A process's heartbeat, sent with a script call.
#[derive(Debug)]
pub(crate) struct Beat<'a> {
    /// The sorted set of the processes sharing the limit.
    pub(crate) key: &'a str,
    /// This process's name in it.
    pub(crate) member: &'a str,
    /// How long the heartbeat counts, in milliseconds.
    pub(crate) ttl_ms: u64,
}
