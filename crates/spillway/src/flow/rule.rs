//! The flow rule: what to limit, by how much, and how.

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// What a flow rule counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Grade {
    /// Admitted calls per second.
    #[default]
    Qps,
    /// Calls in flight.
    Concurrency,
}

/// Sentinel's default cold factor.
pub const DEFAULT_COLD_FACTOR: u32 = 3;

/// Sentinel's default occupy timeout for prioritized entries.
pub const DEFAULT_OCCUPY_TIMEOUT: Duration = Duration::from_millis(500);

#[cfg(feature = "serde")]
fn default_cold_factor() -> u32 {
    DEFAULT_COLD_FACTOR
}

/// Sentinel's default `statDurationMs`: one second.
#[cfg(feature = "serde")]
fn default_stat_duration() -> Duration {
    Duration::from_secs(1)
}

impl Behavior {
    /// [`Behavior::Throttle`] with `count` per second: calls paced `1 / count` seconds apart,
    /// each queued at most `max_queueing_time`.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::{Behavior, FlowRule};
    /// use std::time::Duration;
    ///
    /// let rule = FlowRule::qps("paced", "export", 10.0)
    ///     .with_behavior(Behavior::throttle(Duration::from_millis(500)));
    /// assert_eq!(
    ///     rule.behavior,
    ///     Behavior::Throttle {
    ///         max_queueing_time: Duration::from_millis(500),
    ///         stat_duration: Duration::from_secs(1),
    ///     }
    /// );
    /// ```
    pub fn throttle(max_queueing_time: Duration) -> Self {
        Behavior::Throttle {
            max_queueing_time,
            stat_duration: Duration::from_secs(1),
        }
    }

    /// [`Behavior::WarmUp`] over `period` with Sentinel's default cold factor of 3: a cold rule
    /// allows a third of its count, and climbs to all of it over `period`.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::{Behavior, FlowRule};
    /// use std::time::Duration;
    ///
    /// let rule = FlowRule::qps("warm", "search", 30.0)
    ///     .with_behavior(Behavior::warm_up(Duration::from_secs(10)));
    /// assert_eq!(
    ///     rule.behavior,
    ///     Behavior::WarmUp { period: Duration::from_secs(10), cold_factor: 3 }
    /// );
    /// ```
    pub fn warm_up(period: Duration) -> Self {
        Behavior::WarmUp {
            period,
            cold_factor: DEFAULT_COLD_FACTOR,
        }
    }
}

#[cfg(feature = "serde")]
fn default_occupy_timeout() -> Duration {
    DEFAULT_OCCUPY_TIMEOUT
}

/// What a QPS rule does with calls over its count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum Behavior {
    /// Refuse them at once (Sentinel's `CONTROL_BEHAVIOR_DEFAULT`).
    #[default]
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::no_fields::deserialize")
    )]
    Reject,
    /// Start at `count / cold_factor` and climb to `count` over `period` (Sentinel's warm-up).
    WarmUp {
        /// Time to climb from cold to `count`.
        #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
        period: Duration,
        /// How much slower cold is than warm (an integer, at least 2; default 3).
        #[cfg_attr(feature = "serde", serde(default = "default_cold_factor"))]
        cold_factor: u32,
    },
    /// Pace calls evenly, `count` per `stat_duration`, queueing each for at most
    /// `max_queueing_time` (the leaky bucket: Sentinel's `ThrottlingController`, see
    /// [`Throttle`](super::Throttle)). [`Behavior::throttle`] makes one with the default
    /// `stat_duration` of one second.
    Throttle {
        /// Longest a call may wait for its slot.
        #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
        max_queueing_time: Duration,
        /// The duration `count` is per (Sentinel's `statDurationMs`): a whole number of
        /// milliseconds, at least 1 ms; one second by default.
        #[cfg_attr(
            feature = "serde",
            serde(with = "humantime_serde", default = "default_stat_duration")
        )]
        stat_duration: Duration,
    },
    /// Warm up, and pace calls at the current rate.
    WarmUpThrottle {
        /// Time to climb from cold to `count`.
        #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
        period: Duration,
        /// How much slower cold is than warm (at least 2; default 3).
        #[cfg_attr(feature = "serde", serde(default = "default_cold_factor"))]
        cold_factor: u32,
        /// Longest a call may wait for its slot.
        #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
        max_queueing_time: Duration,
    },
}

/// Which callers a rule applies to (Sentinel's `limitApp`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(from = "String", into = "String")
)]
pub enum LimitApp {
    /// Every caller, counted together (`"default"`).
    #[default]
    Default,
    /// Callers whose origin has no rule of its own on this resource, each counted apart
    /// (`"other"`).
    Other,
    /// Callers from this origin.
    Origin(String),
}

impl From<String> for LimitApp {
    fn from(value: String) -> Self {
        match value.as_str() {
            "default" => LimitApp::Default,
            "other" => LimitApp::Other,
            _ => LimitApp::Origin(value),
        }
    }
}

impl From<LimitApp> for String {
    fn from(value: LimitApp) -> Self {
        value.to_string()
    }
}

impl fmt::Display for LimitApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitApp::Default => f.write_str("default"),
            LimitApp::Other => f.write_str("other"),
            LimitApp::Origin(origin) => f.write_str(origin),
        }
    }
}

/// Whose statistics a rule reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum Strategy {
    /// The resource's own.
    #[default]
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::no_fields::deserialize")
    )]
    Direct,
    /// Another resource's: limit this one when that one is busy.
    Relate {
        /// The resource whose statistics are read.
        ref_resource: String,
    },
    /// Only calls that entered through the named entrance are checked, against that entrance's
    /// statistics for this resource.
    Chain {
        /// The entrance (Sentinel's context name).
        entrance: String,
    },
}

/// A flow rule: Sentinel's `FlowRule`.
///
/// Build one with [`FlowRule::per_second`] or [`FlowRule::in_flight`] (or Sentinel's full form,
/// [`FlowRule::qps`]) and the `with_*` methods, or read it from configuration (feature
/// `serde`).
///
/// # Examples
///
/// ```
/// use spillway::flow::{Behavior, FlowRule, LimitApp};
/// use std::time::Duration;
///
/// let rule = FlowRule::qps("orders-qps", "GET /orders", 100.0)
///     .with_behavior(Behavior::WarmUp { period: Duration::from_secs(10), cold_factor: 3 })
///     .with_limit_app(LimitApp::Origin("mobile".into()));
/// assert_eq!(rule.count, 100.0);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
#[non_exhaustive]
pub struct FlowRule {
    /// Unique id, named in errors and blocks.
    pub id: String,
    /// The resource it limits.
    pub resource: String,
    /// QPS or concurrency.
    #[cfg_attr(feature = "serde", serde(default))]
    pub grade: Grade,
    /// The limit: finite, at least 0; fractions allowed.
    pub count: f64,
    /// What to do over the limit (QPS rules; concurrency rules only reject).
    #[cfg_attr(feature = "serde", serde(default))]
    pub behavior: Behavior,
    /// Which callers it applies to.
    #[cfg_attr(feature = "serde", serde(default))]
    pub limit_app: LimitApp,
    /// Whose statistics it reads.
    #[cfg_attr(feature = "serde", serde(default))]
    pub strategy: Strategy,
    /// Longest a prioritized entry may wait for the next window's quota (default 500 ms).
    #[cfg_attr(
        feature = "serde",
        serde(default = "default_occupy_timeout", with = "humantime_serde")
    )]
    pub occupy_timeout: Duration,
    /// Shadow mode: the rule decides and counts what it would have refused (see
    /// [`FlowRule::with_shadow`]), but refuses nothing. Default `false`.
    #[cfg_attr(feature = "serde", serde(default))]
    pub shadow: bool,
}

impl FlowRule {
    /// At most `calls` calls a second on `resource`, refusing beyond: the common QPS limit in
    /// one line. Its id is the resource's name ([`with_id`](Self::with_id) to choose one); the
    /// other settings are the defaults (reject, every caller, direct). For a fractional rate,
    /// [`qps`](Self::qps).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::FlowRule;
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// spillway.load_flow_rules(vec![FlowRule::per_second("search", 2)])?;
    /// assert!(spillway.entry("search").enter().is_ok());
    /// assert!(spillway.entry("search").enter().is_ok());
    /// assert!(spillway.entry("search").enter().is_err()); // a third in the same second
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn per_second(resource: impl Into<String>, calls: u32) -> Self {
        let resource = resource.into();
        Self::qps(resource.clone(), resource, f64::from(calls))
    }

    /// At most `calls` calls of `resource` in flight at once, refusing beyond. Its id is the
    /// resource's name ([`with_id`](Self::with_id) to choose one).
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::FlowRule;
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// spillway.load_flow_rules(vec![FlowRule::in_flight("report", 1).with_id("one-report")])?;
    /// let first = spillway.entry("report").enter()?;
    /// let refused = spillway.entry("report").enter().unwrap_err();
    /// assert_eq!(refused.rule_id(), Some("one-report"));
    /// drop(first); // its place is free again
    /// assert!(spillway.entry("report").enter().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_flight(resource: impl Into<String>, calls: u32) -> Self {
        let resource = resource.into();
        Self::concurrency_of(resource.clone(), resource, f64::from(calls))
    }

    /// The same rule with the id `id` (unique among the flow rules, named in refusals and
    /// errors).
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// A QPS rule with default settings (reject, every caller, direct): Sentinel's form, with
    /// a fractional `count` allowed. [`per_second`](Self::per_second) is the short form.
    pub fn qps(id: impl Into<String>, resource: impl Into<String>, count: f64) -> Self {
        Self {
            id: id.into(),
            resource: resource.into(),
            grade: Grade::Qps,
            count,
            behavior: Behavior::Reject,
            limit_app: LimitApp::Default,
            strategy: Strategy::Direct,
            occupy_timeout: DEFAULT_OCCUPY_TIMEOUT,
            shadow: false,
        }
    }

    /// A concurrency rule with default settings.
    #[deprecated(
        since = "0.2.0",
        note = "a count of calls is whole, and the id and resource could be swapped: use \
                `FlowRule::in_flight(resource, calls)`, with `.with_id(id)` to name it"
    )]
    pub fn concurrency(id: impl Into<String>, resource: impl Into<String>, count: f64) -> Self {
        Self::concurrency_of(id, resource, count)
    }

    fn concurrency_of(id: impl Into<String>, resource: impl Into<String>, count: f64) -> Self {
        Self {
            grade: Grade::Concurrency,
            ..Self::qps(id, resource, count)
        }
    }

    /// Sets the behavior over the limit.
    pub fn with_behavior(mut self, behavior: Behavior) -> Self {
        self.behavior = behavior;
        self
    }

    /// Sets which callers the rule applies to.
    pub fn with_limit_app(mut self, limit_app: LimitApp) -> Self {
        self.limit_app = limit_app;
        self
    }

    /// Sets whose statistics the rule reads.
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Sets the occupy timeout of prioritized entries.
    pub fn with_occupy_timeout(mut self, timeout: Duration) -> Self {
        self.occupy_timeout = timeout;
        self
    }

    /// Puts the rule in shadow mode (or back): it is checked as usual, but where it would refuse
    /// an entry it admits it, and counts the refusal it would have made instead, in the rule's
    /// [`shadow_refusals`](crate::Spillway::flow_rule_stats) and on the entry
    /// ([`Entry::shadow_rule`](crate::Entry::shadow_rule)). A shadow throttle never makes an
    /// entry wait: it keeps its schedule as if it paced, so that it refuses exactly what it would
    /// refuse in force. A shadow QPS rule reads the node's window (it counts no admissions of its
    /// own) and a shadow concurrency rule reads the node's in-flight count (it takes no place),
    /// so that each sees the traffic it did not stop. Try a new limit this way on live traffic
    /// before enforcing it.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::flow::FlowRule;
    /// use spillway::{ManualClock, Spillway};
    ///
    /// let spillway = Spillway::new_with_clock(ManualClock::new());
    /// spillway.load_flow_rules(vec![FlowRule::qps("try-2", "search", 2.0).with_shadow(true)])?;
    /// let entries: Vec<_> = (0..3).map(|_| spillway.entry("search").enter()).collect();
    /// assert!(entries.iter().all(Result::is_ok)); // all three admitted
    /// assert_eq!(entries[2].as_ref().unwrap().shadow_rule(), Some("try-2"));
    /// assert_eq!(spillway.flow_rule_stats("try-2").unwrap().shadow_refusals, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }
}
