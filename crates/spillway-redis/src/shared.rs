//! What every shared limit's script has in common: the modes of a call, the heartbeat sent with
//! it, the answer's shape, and the sealed trait through which a [`crate::Leased`] leases from
//! any of them.

use crate::Error;
use redis::aio::ConnectionLike;
use redis::ScriptInvocation;

/// A limit kept in Redis that a [`crate::Leased`] can take batches from: a
/// [`crate::SharedWindow`] or a [`crate::SharedBucket`]. Sealed: its methods are the crate's.
pub trait Shared: sealed::Sealed + Send + Sync + std::fmt::Debug + 'static {}

pub(crate) mod sealed {
    use super::{Answer, Beat, Mode};
    use redis::ScriptInvocation;

    pub trait Sealed {
        /// The Redis key its state lives under.
        fn key(&self) -> &str;
        /// Requests a second it allows: a fallback's share is this over the live processes.
        fn rate(&self) -> f64;
        /// How long leased passes stay good, in milliseconds.
        fn lease_ms(&self) -> u64;
        /// How long a pass admitted matters to the limit (a window's interval), in ms: the
        /// passes a fallback admitted are reported to Redis for that long.
        fn span_ms(&self) -> u64;
        /// The passes a fallback admitted go to Redis summed over spans this long (a
        /// window's bucket width): one call each.
        fn report_group_ms(&self) -> u64;
        /// The script call doing `mode` with `count` (a return: to the lease tagged `tag`),
        /// with `beat`'s heartbeat if given.
        fn invocation(
            &self,
            mode: Mode,
            count: u64,
            tag: u64,
            beat: Option<&Beat<'_>>,
        ) -> ScriptInvocation<'static>;
        /// What a refusal reports having seen, given the last answer.
        fn reading(&self, answer: &Answer) -> f64;
    }
}

/// What a script call does with its count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// All of it passes, or none (the strict check).
    All,
    /// As much of it as there is room for (a lease).
    UpTo,
    /// Given back (an unused lease).
    Return,
    /// Counted without a check: passes a fallback admitted, admitted `tag` ms ago.
    Report,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::UpTo => "upto",
            Self::Return => "return",
            Self::Report => "report",
        }
    }
}

/// A script call's answer: every script returns these six numbers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Answer {
    /// Passes granted, or given back.
    pub(crate) count: u64,
    /// The limit's level: a window's passes before the call, a bucket's stored permits after.
    pub(crate) level: u64,
    /// The time of the call, on the limit's clock, in milliseconds.
    pub(crate) now_ms: u64,
    /// What a lease's unused passes are given back to (a window's current bucket).
    pub(crate) tag: u64,
    /// The live processes, with a heartbeat; else 0.
    pub(crate) live: u64,
    /// When there is room again, on the limit's clock, in milliseconds.
    pub(crate) free_at_ms: u64,
}

/// A process's heartbeat, sent with a script call.
#[derive(Debug)]
pub struct Beat<'a> {
    /// The sorted set of the processes sharing the limit.
    pub(crate) key: &'a str,
    /// This process's name in it.
    pub(crate) member: &'a str,
    /// How long the heartbeat counts, in milliseconds.
    pub(crate) ttl_ms: u64,
}

/// Runs `invocation` on `redis` and reads its answer.
pub(crate) async fn call<C: ConnectionLike>(
    redis: &mut C,
    invocation: ScriptInvocation<'static>,
) -> Result<Answer, Error> {
    let (count, level, now_ms, tag, live, free_at_ms): (u64, u64, u64, u64, u64, u64) =
        invocation.invoke_async(redis).await?;
    Ok(Answer {
        count,
        level,
        now_ms,
        tag,
        live,
        free_at_ms,
    })
}

/// Tells Redis of the passes a fallback admitted (one call per report, each within
/// `timeout`), so that its window counts them whether it kept its state or lost it. The
/// reports' ages were taken at `taken_nanos` of `clock`: each is sent as old as it is when its
/// call is made. A failure says how many were sent before it (those Redis counted).
pub(crate) async fn report<S: Shared, C: ConnectionLike>(
    limit: &S,
    redis: &mut C,
    reports: &[crate::unreported::Report],
    timeout: std::time::Duration,
    (clock, taken_nanos): (&dyn spillway::Clock, u64),
) -> Result<(), (usize, Error)> {
    for (sent, report) in reports.iter().enumerate() {
        let since_ms = clock.now_nanos().saturating_sub(taken_nanos) / 1_000_000;
        let age_ms = report.age_ms.saturating_add(since_ms);
        let invocation = limit.invocation(Mode::Report, report.count, age_ms, None);
        let answered = crate::timed::timed(timeout, call(redis, invocation)).await;
        answered.map_err(|err| (sent, err))?;
    }
    Ok(())
}

/// The Redis key of the processes sharing the limit whose state is under `key`.
pub(crate) fn members_key(key: &str) -> String {
    match key.rfind(':') {
        Some(at) => format!("{}:members", &key[..at]),
        None => format!("{key}:members"),
    }
}
