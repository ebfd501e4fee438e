//! A concurrency limit shared by a fleet: permits held per holder, kept while the holder's
//! heartbeat lasts, so that a holder that dies gives its permits back by itself.

use crate::shared::{self, Answer, Mode};
use crate::{Error, Time};
use redis::aio::ConnectionLike;
use redis::Script;
use std::sync::OnceLock;
use std::time::Duration;

/// The script, loaded once per Redis by its SHA (and loaded again if Redis forgot it).
fn script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(include_str!("scripts/concurrency.lua")))
}

/// At most `limit` permits in use at once across every process naming the same `name`.
///
/// Each process is a *holder*: its permits are counted under its name, and kept as long as its
/// heartbeat lasts. Every call beats, and [`SharedConcurrency::renew`] beats alone; a holder
/// that stops (it crashed, or lost Redis) loses its permits when `ttl` runs out, and the
/// others can take them. A holder that holds permits must beat more often than `ttl`
/// ([`SharedConcurrency::keep_alive`] does it in a task).
///
/// Each acquire and each release is one atomic script call: exact across the fleet, two round
/// trips per request.
///
/// ```no_run
/// # async fn demo() -> Result<(), spillway_redis::Error> {
/// use spillway_redis::{SharedConcurrency, Time};
/// use std::time::Duration;
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let mut redis = client.get_connection_manager().await?;
/// let reports = SharedConcurrency::new("reports", 20, "worker-7", Duration::from_secs(3), Time::Redis)?;
/// if reports.try_acquire(&mut redis, 1).await?.admitted {
///     // run the report, then:
///     reports.release(&mut redis, 1).await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SharedConcurrency {
    key: String,
    members_key: String,
    limit: u64,
    holder: String,
    ttl_ms: u64,
    time: Time,
}

/// What a concurrency check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    /// Whether the permits were taken.
    pub admitted: bool,
    /// Permits in use across the fleet before the call (after dropping dead holders').
    pub in_use: u64,
    /// Permits this holder holds after the call.
    pub mine: u64,
    /// Holders alive, this one included.
    pub live: u64,
}

impl SharedConcurrency {
    /// At most `limit` permits at once, this process holding them as `holder`, each hold lasting
    /// `ttl` past the holder's last call; read on `time`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if `name` is empty, longer than 200 bytes or holds a brace, `holder`
    /// is empty, or `ttl` is under a millisecond.
    pub fn new(
        name: &str,
        limit: u64,
        holder: &str,
        ttl: Duration,
        time: Time,
    ) -> Result<Self, Error> {
        crate::check_name(name)?;
        if holder.is_empty() {
            return Err(Error::Invalid("a holder's name must not be empty".into()));
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if ttl_ms == 0 {
            return Err(Error::Invalid(format!(
                "a hold's TTL must be at least 1 ms, not {ttl:?}"
            )));
        }
        let key = crate::key(name, "holders");
        Ok(Self {
            members_key: shared::members_key(&key),
            key,
            limit,
            holder: holder.to_owned(),
            ttl_ms,
            time,
        })
    }

    /// The Redis key of the holders' permits (one cluster slot, by its hash tag).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How long a hold lasts past the holder's last call, in milliseconds.
    pub(crate) fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    /// The most permits in use at once.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Takes `permits` if all of them are free across the fleet; a refusal takes none.
    ///
    /// # Errors
    ///
    /// Redis failed or answered something else than the script's answer.
    pub async fn try_acquire<C: ConnectionLike>(
        &self,
        redis: &mut C,
        permits: u32,
    ) -> Result<Holding, Error> {
        let answer = self.call(redis, Mode::All, u64::from(permits)).await?;
        Ok(self.holding(&answer, permits > 0 && answer.count == u64::from(permits)))
    }

    /// Gives back up to `permits` of this holder's permits; returns how many it held of them.
    /// A holder whose hold ran out (its heartbeat missed the TTL) gives back nothing: its
    /// permits were freed already.
    ///
    /// # Errors
    ///
    /// As [`SharedConcurrency::try_acquire`].
    pub async fn release<C: ConnectionLike>(
        &self,
        redis: &mut C,
        permits: u32,
    ) -> Result<u64, Error> {
        Ok(self
            .call(redis, Mode::Return, u64::from(permits))
            .await?
            .count)
    }

    /// Beats for this holder: its permits are kept `ttl` more.
    ///
    /// # Errors
    ///
    /// As [`SharedConcurrency::try_acquire`].
    pub async fn renew<C: ConnectionLike>(&self, redis: &mut C) -> Result<Holding, Error> {
        let answer = self.call_mode(redis, "beat", 0).await?;
        Ok(self.holding(&answer, false))
    }

    /// Renews every third of the TTL, for good (run it in a task of its own); each renewal's
    /// outcome goes to `on_renew`.
    pub async fn keep_alive<C: ConnectionLike>(
        &self,
        mut redis: C,
        mut on_renew: impl FnMut(Result<Holding, &Error>),
    ) {
        let every = Duration::from_millis((self.ttl_ms / 3).max(1));
        loop {
            match self.renew(&mut redis).await {
                Ok(holding) => on_renew(Ok(holding)),
                Err(err) => on_renew(Err(&err)),
            }
            tokio::time::sleep(every).await;
        }
    }

    fn holding(&self, answer: &Answer, admitted: bool) -> Holding {
        Holding {
            admitted,
            in_use: answer.level,
            mine: answer.tag,
            live: answer.live,
        }
    }

    async fn call<C: ConnectionLike>(
        &self,
        redis: &mut C,
        mode: Mode,
        count: u64,
    ) -> Result<Answer, Error> {
        self.call_mode(redis, mode.as_str(), count).await
    }

    pub(crate) async fn call_mode<C: ConnectionLike>(
        &self,
        redis: &mut C,
        mode: &str,
        count: u64,
    ) -> Result<Answer, Error> {
        let mut invocation = script().key(&self.key);
        invocation
            .key(&self.members_key)
            .arg(self.time.now_arg())
            .arg(self.limit)
            .arg(count)
            .arg(mode)
            .arg(&self.holder)
            .arg(self.ttl_ms);
        shared::call(redis, invocation).await
    }
}
