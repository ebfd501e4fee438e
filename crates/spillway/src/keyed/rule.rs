//! The per-key rule: Sentinel's `ParamFlowRule`, keyed by a value passed with the entry.

use crate::flow::Grade;
#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Keys with exact state per rule by default.
pub const DEFAULT_CAPACITY: usize = 4_096;

/// What a per-key QPS rule does with a key over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum KeyedBehavior {
    /// Refuse at once (Sentinel's `CONTROL_BEHAVIOR_DEFAULT`): a token bucket per key, refilled
    /// once its `duration` has passed.
    #[default]
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::no_fields::deserialize")
    )]
    Reject,
    /// Pace each key's calls `duration / count` apart, queueing one for less than
    /// `max_queueing_time` (Sentinel's `CONTROL_BEHAVIOR_RATE_LIMITER`).
    Throttle {
        /// The longest a call may queue (a wait of exactly this long is refused, as in Sentinel).
        #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
        max_queueing_time: Duration,
    },
}

/// A key whose limit is not the rule's (Sentinel's `ParamFlowItem`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
pub struct KeyException {
    /// The key, matched as text: an entry's key matches when it hashes as this string does
    /// (a `&str` or `String` key with the same characters).
    pub key: String,
    /// Its limit (per `duration`, or in flight), instead of the rule's `count`.
    pub count: u64,
}

/// A limit per key of a resource: each user, IP, tenant or product id gets `count` calls per
/// `duration` (or `count` in flight), with `exceptions` for named keys. Sentinel's
/// `ParamFlowRule`, keyed by the value passed with
/// [`EntryBuilder::key`](crate::EntryBuilder::key) instead of an argument index.
///
/// # Examples
///
/// ```
/// use spillway::keyed::{KeyException, KeyedRule};
/// use std::time::Duration;
///
/// // 10 a second per user, 20 with a burst; the `batch` user gets 100.
/// let rule = KeyedRule::qps("per-user", "GET /search", 10.0)
///     .with_burst(10)
///     .with_exception("batch", 100);
/// assert_eq!(rule.duration, Duration::from_secs(1));
/// assert_eq!(rule.exceptions, [KeyException { key: "batch".into(), count: 100 }]);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
pub struct KeyedRule {
    /// Unique among the per-key rules.
    pub id: String,
    /// The resource it limits.
    pub resource: String,
    /// The position of the entry's key this rule limits by (0 to 3; Sentinel's `paramIdx`):
    /// [`EntryBuilder::key`](crate::EntryBuilder::key) sets position 0,
    /// [`key_at`](crate::EntryBuilder::key_at) any.
    #[cfg_attr(feature = "serde", serde(default))]
    pub param: usize,
    /// Calls per `duration` (`qps`) or in flight (`concurrency`) per key.
    #[cfg_attr(feature = "serde", serde(default))]
    pub grade: Grade,
    /// The limit per key: whole calls (Sentinel truncates its `double` to a `long`).
    pub count: f64,
    /// What happens over the limit (QPS only).
    #[cfg_attr(feature = "serde", serde(default))]
    pub behavior: KeyedBehavior,
    /// Calls a key may make beyond `count` from a full bucket (Sentinel's `burstCount`; reject
    /// only).
    #[cfg_attr(feature = "serde", serde(default))]
    pub burst: u64,
    /// The period `count` is per (whole seconds, Sentinel's `durationInSec`).
    #[cfg_attr(
        feature = "serde",
        serde(with = "humantime_serde", default = "default_duration")
    )]
    pub duration: Duration,
    /// Keys with limits of their own.
    #[cfg_attr(feature = "serde", serde(default))]
    pub exceptions: Vec<KeyException>,
    /// Keys with exact state at most (the busiest; see the module's docs for the rest).
    #[cfg_attr(feature = "serde", serde(default = "default_capacity"))]
    pub capacity: usize,
}

#[cfg(feature = "serde")]
fn default_duration() -> Duration {
    Duration::from_secs(1)
}

#[cfg(feature = "serde")]
fn default_capacity() -> usize {
    DEFAULT_CAPACITY
}

impl KeyedRule {
    /// At most `calls` calls a second for each key of `resource`, refusing beyond. Its id is
    /// the resource's name ([`with_id`](Self::with_id) to choose one); it limits by the
    /// entry's first key (position 0, [`with_param`](Self::with_param) for another).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::keyed::KeyedRule;
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// spillway.load_keyed_rules(vec![KeyedRule::per_second("login", 1)])?;
    /// assert!(spillway.entry("login").key("alice").enter().is_ok());
    /// assert!(spillway.entry("login").key("alice").enter().is_err()); // alice's second
    /// assert!(spillway.entry("login").key("bob").enter().is_ok()); // bob has his own
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn per_second(resource: impl Into<String>, calls: u32) -> Self {
        let resource = resource.into();
        Self::qps(resource.clone(), resource, f64::from(calls))
    }

    /// At most `calls` calls in flight for each key of `resource`. Its id is the resource's
    /// name ([`with_id`](Self::with_id) to choose one).
    pub fn in_flight(resource: impl Into<String>, calls: u32) -> Self {
        let resource = resource.into();
        Self {
            grade: Grade::Concurrency,
            ..Self::qps(resource.clone(), resource, f64::from(calls))
        }
    }

    /// The same rule with the id `id` (unique among the per-key rules).
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// `count` calls a second per key, refusing beyond: Sentinel's form
    /// ([`per_second`](Self::per_second) is the short one).
    pub fn qps(id: impl Into<String>, resource: impl Into<String>, count: f64) -> Self {
        Self {
            id: id.into(),
            resource: resource.into(),
            param: 0,
            grade: Grade::Qps,
            count,
            behavior: KeyedBehavior::Reject,
            burst: 0,
            duration: Duration::from_secs(1),
            exceptions: Vec::new(),
            capacity: DEFAULT_CAPACITY,
        }
    }

    /// `count` calls in flight per key.
    #[deprecated(
        since = "0.2.0",
        note = "a count of calls is whole, and the id and resource could be swapped: use \
                `KeyedRule::in_flight(resource, calls)`, with `.with_id(id)` to name it"
    )]
    pub fn concurrency(id: impl Into<String>, resource: impl Into<String>, count: f64) -> Self {
        Self {
            grade: Grade::Concurrency,
            ..Self::qps(id, resource, count)
        }
    }

    /// Limiting by the entry's key at `param` (0 to 3), the position
    /// [`key_at`](crate::EntryBuilder::key_at) and the tower layer's key extractors take.
    pub fn with_param(mut self, param: usize) -> Self {
        self.param = param;
        self
    }

    /// With `behavior` over the limit.
    pub fn with_behavior(mut self, behavior: KeyedBehavior) -> Self {
        self.behavior = behavior;
        self
    }

    /// With `burst` calls beyond `count` from a full bucket.
    pub fn with_burst(mut self, burst: u64) -> Self {
        self.burst = burst;
        self
    }

    /// Per `duration` (whole seconds) instead of per second.
    pub fn with_duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// With `key` limited to `count` instead.
    pub fn with_exception(mut self, key: impl Into<String>, count: u64) -> Self {
        self.exceptions.push(KeyException {
            key: key.into(),
            count,
        });
        self
    }

    /// With exact state for at most `capacity` keys.
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }
}
