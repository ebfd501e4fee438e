//! Why an entry was refused.

use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::time::Duration;

/// Which check refused an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BlockKind {
    /// The resource registry is full and its overflow policy is
    /// [`OverflowPolicy::Reject`](crate::OverflowPolicy::Reject).
    ResourceCap,
    /// A flow rule ([`FlowRule`](crate::flow::FlowRule)).
    Flow,
    /// A Dubbo TPS limit ([`TpsLimiter`](crate::dubbo::TpsLimiter)).
    Tps,
    /// A Dubbo `executes` limit ([`ExecuteLimiter`](crate::dubbo::ExecuteLimiter)).
    Executes,
    /// A Dubbo `actives` limit ([`ActiveLimiter`](crate::dubbo::ActiveLimiter)): no slot came
    /// within the caller's timeout (or at once, for a caller that would not wait).
    Actives,
    /// A Dubbo `actives` limit whose queue of waiters was full, so the caller could not wait.
    ActivesQueueFull,
    /// A cap on accepted connections (`accepts`), reached.
    Accepts,
    /// An open circuit breaker ([`BreakerRule`](crate::breaker::BreakerRule)); observed is the
    /// value that opened it, threshold the rule's.
    Breaker,
    /// A system rule ([`SystemRule`](crate::system::SystemRule)), by the check named.
    System(crate::system::SystemCheck),
}

impl BlockKind {
    /// A short lowercase name, for logs and metric labels (`"system"` for every system check;
    /// [`SystemCheck::as_str`](crate::system::SystemCheck::as_str) names the check).
    pub fn as_str(self) -> &'static str {
        match self {
            BlockKind::ResourceCap => "resource_cap",
            BlockKind::Flow => "flow",
            BlockKind::Tps => "tps",
            BlockKind::Executes => "executes",
            BlockKind::Actives => "actives",
            BlockKind::ActivesQueueFull => "actives_queue_full",
            BlockKind::Accepts => "accepts",
            BlockKind::Breaker => "breaker",
            BlockKind::System(_) => "system",
        }
    }
}

impl fmt::Display for BlockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockKind::System(check) => write!(f, "system {check}"),
            kind => f.write_str(kind.as_str()),
        }
    }
}

/// An entry was refused: not now, with the reason.
///
/// Carries which check fired, the rule that did (when a rule did), the observed value against the
/// threshold, and a hint of when to retry. Building one neither allocates nor touches a shared
/// reference count: resource names and rule ids are kept for the life of the process (the one
/// exception is the cold refusal of a name the full registry never stored, which is copied).
///
/// # Examples
///
/// ```
/// use spillway::{BlockKind, OverflowPolicy, Spillway};
///
/// let spillway = Spillway::builder()
///     .max_resources(1)
///     .overflow_policy(OverflowPolicy::Reject)
///     .build();
/// let _first = spillway.entry("first").enter().unwrap();
/// let err = spillway.entry("second").enter().unwrap_err();
/// assert_eq!(err.kind(), BlockKind::ResourceCap);
/// assert_eq!(err.resource(), "second");
/// assert_eq!((err.observed(), err.threshold()), (1.0, 1.0));
/// println!("{err}");
/// ```
#[derive(Clone)]
pub struct BlockError {
    kind: BlockKind,
    resource: Cow<'static, str>,
    rule: RuleRef,
    observed: f64,
    threshold: f64,
    /// Nanoseconds (at most 584 years), [`NONE`] for none: 8 bytes where `Option<Duration>`
    /// takes 16, so that a refusal writes (and its caller copies) less.
    retry_after: u64,
    waited: u64,
}

/// The rule that refused, if one did: its id, or the id's interned number, looked up only when
/// asked for (a refusal on the hot path does not wait on the lookup's loads).
#[derive(Debug, Clone, Copy)]
enum RuleRef {
    None,
    Id(&'static str),
    Number(u32),
}

impl RuleRef {
    fn id(self) -> Option<&'static str> {
        match self {
            RuleRef::None => None,
            RuleRef::Id(id) => Some(id),
            RuleRef::Number(number) => crate::intern::name_of(number),
        }
    }
}

/// "No duration" in a [`BlockError`]'s compact fields (584 years: never a real wait).
const NONE: u64 = u64::MAX;

fn compact(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(NONE - 1)
}

fn expand(nanos: u64) -> Option<Duration> {
    (nanos != NONE).then(|| Duration::from_nanos(nanos))
}

impl BlockError {
    pub(crate) fn new(
        kind: BlockKind,
        resource: Cow<'static, str>,
        observed: f64,
        threshold: f64,
    ) -> Self {
        Self {
            kind,
            resource,
            rule: RuleRef::None,
            observed,
            threshold,
            retry_after: NONE,
            waited: NONE,
        }
    }

    /// A block error of `kind` for `resource`: for limits built outside this crate (such as the
    /// accepted-connection cap of `spillway-tower`) that explain their blocks the same way.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway::{BlockError, BlockKind};
    ///
    /// let err = BlockError::custom(BlockKind::Accepts, "0.0.0.0:8080", 100.0, 100.0);
    /// assert_eq!(err.to_string(), "0.0.0.0:8080 blocked by accepts: observed 100 against threshold 100");
    /// ```
    pub fn custom(
        kind: BlockKind,
        resource: impl Into<String>,
        observed: f64,
        threshold: f64,
    ) -> Self {
        Self::new(kind, Cow::Owned(resource.into()), observed, threshold)
    }

    pub(crate) fn with_rule(mut self, rule_id: &'static str) -> Self {
        self.rule = RuleRef::Id(rule_id);
        self
    }

    /// [`with_rule`](Self::with_rule) by the id's interned number.
    #[inline]
    pub(crate) fn with_rule_number(mut self, number: u32) -> Self {
        self.rule = RuleRef::Number(number);
        self
    }

    pub(crate) fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = compact(after);
        self
    }

    /// [`with_retry_after`](Self::with_retry_after) in nanoseconds, as the block keeps it.
    #[inline]
    pub(crate) fn with_retry_after_nanos(mut self, nanos: u64) -> Self {
        self.retry_after = nanos.min(NONE - 1);
        self
    }

    pub(crate) fn with_waited(mut self, waited: Duration) -> Self {
        self.waited = compact(waited);
        self
    }

    /// Which check refused the entry.
    pub fn kind(&self) -> BlockKind {
        self.kind
    }

    /// The resource the entry was for.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The id of the rule that refused it, when a rule did.
    pub fn rule_id(&self) -> Option<&str> {
        self.rule.id()
    }

    /// The value the check observed (for example the current QPS, or the resources registered).
    pub fn observed(&self) -> f64 {
        self.observed
    }

    /// The threshold the observed value was held against.
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// How long until a retry may pass, when the check can tell.
    pub fn retry_after(&self) -> Option<Duration> {
        expand(self.retry_after)
    }

    /// How long the caller waited before it was refused, for checks that wait (Dubbo's
    /// `actives`). `None` when it did not wait.
    pub fn waited(&self) -> Option<Duration> {
        expand(self.waited)
    }
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} blocked by {}", self.resource, self.kind)?;
        if let Some(rule) = self.rule_id() {
            write!(f, " rule {rule}")?;
        }
        write!(
            f,
            ": observed {} against threshold {}",
            self.observed, self.threshold
        )?;
        if let Some(waited) = self.waited() {
            write!(f, " after waiting {waited:?}")?;
        }
        if let Some(after) = self.retry_after() {
            write!(f, ", retry after {after:?}")?;
        }
        Ok(())
    }
}

impl Error for BlockError {}

impl fmt::Debug for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockError")
            .field("kind", &self.kind)
            .field("resource", &self.resource)
            .field("rule_id", &self.rule_id())
            .field("observed", &self.observed)
            .field("threshold", &self.threshold)
            .field("retry_after", &self.retry_after())
            .field("waited", &self.waited())
            .finish()
    }
}
