//! Why an entry was refused.

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
    /// An adaptive concurrency limit ([`AdaptiveRule`](crate::adaptive::AdaptiveRule)) at its
    /// limit; observed is the calls in flight, threshold the limit.
    Adaptive,
    /// A limit shared with other processes ([`ClusterRule`](crate::cluster::ClusterRule));
    /// observed and threshold are what its [`SharedLimit`](crate::cluster::SharedLimit) said.
    Cluster,
    /// A per-key limit ([`KeyedRule`](crate::keyed::KeyedRule)) on the entry's key; observed
    /// and threshold are the key's limit.
    Keyed,
    /// An adaptive limit's queue refused a caller for its deadline
    /// ([`EntryBuilder::deadline`](crate::EntryBuilder::deadline)): it passed while the caller
    /// waited, or was too near to be met at the limit's current latency; observed and
    /// threshold are the calls in flight and the limit.
    Deadline,
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
            BlockKind::Adaptive => "adaptive",
            BlockKind::Cluster => "cluster",
            BlockKind::Keyed => "keyed",
            BlockKind::Deadline => "deadline",
        }
    }
}

impl fmt::Display for BlockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockKind::System(check) => write!(f, "system {check}"),
            BlockKind::Keyed => f.write_str("per-key"),
            kind => f.write_str(kind.as_str()),
        }
    }
}

/// An entry was refused: not now, with the reason.
///
/// Carries which check fired, the rule that did (when a rule did), the observed value against the
/// threshold, and a hint of when to retry. A refusal by a resource's rules neither allocates nor
/// touches a shared reference count: resource names and rule ids are kept for the life of the
/// process, and the error holds their numbers (six words in all). Refusals of names kept nowhere
/// (a name the full registry never stored, Dubbo keys looked up by name, [`custom`](Self::custom)
/// errors) copy the name.
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
    observed: f64,
    threshold: f64,
    /// Nanoseconds (at most 584 years), [`NONE`] for none: 8 bytes where `Option<Duration>`
    /// takes 16, so that a refusal writes (and its caller copies) less.
    retry_after: u64,
    /// What few refusals carry, out of line: a name that is not interned, the time waited.
    /// Those refusals copy their name anyway; every other one stays small (see `names`).
    rare: Option<Box<Rare>>,
    /// The interned numbers ([`crate::intern`]) of the resource name (low half;
    /// [`NOT_INTERNED`] when `rare` holds the name) and of the refusing rule's id (high half;
    /// [`NOT_INTERNED`] when no rule refused): eight bytes where a `Cow<str>` and a `&str` took
    /// forty. One word, written with one store: as two, a copy of the error that read them as
    /// one word had to wait for both to reach the cache.
    names: u64,
    kind: BlockKind,
    /// The refused caller's criticality's rank, when a queue that orders by criticality
    /// refused it; [`NO_CRITICALITY`] otherwise (one byte, in the padding after `kind`).
    criticality: u8,
}

/// `BlockError::criticality` when none is named.
const NO_CRITICALITY: u8 = u8::MAX;

/// The parts of a [`BlockError`] that few refusals have.
#[derive(Debug, Clone)]
struct Rare {
    /// The resource name, when it is not interned.
    resource: Option<Box<str>>,
    /// As `retry_after`.
    waited: u64,
    /// The refusal is not a client's quota though its kind may be one (a Dubbo limit whose
    /// table of keys is full): it advertises none.
    no_quota: bool,
}

/// A `BlockError`'s resource number when the name is in `rare`, or rule number when no rule
/// refused.
const NOT_INTERNED: u32 = u32::MAX;

/// `BlockError::names` of `resource` and `rule`.
#[inline(always)]
fn names(resource: u32, rule: u32) -> u64 {
    u64::from(resource) | u64::from(rule) << 32
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
    /// A block of the resource whose name has interned number `resource`.
    #[inline]
    pub(crate) fn new(kind: BlockKind, resource: u32, observed: f64, threshold: f64) -> Self {
        Self {
            observed,
            threshold,
            retry_after: NONE,
            rare: None,
            names: names(resource, NOT_INTERNED),
            kind,
            criticality: NO_CRITICALITY,
        }
    }

    /// A block of a resource whose name is not interned (it is copied).
    pub(crate) fn owned(
        kind: BlockKind,
        resource: impl Into<String>,
        observed: f64,
        threshold: f64,
    ) -> Self {
        Self {
            rare: Some(Box::new(Rare {
                resource: Some(resource.into().into_boxed_str()),
                waited: NONE,
                no_quota: false,
            })),
            ..Self::new(kind, NOT_INTERNED, observed, threshold)
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
        Self::owned(kind, resource, observed, threshold)
    }

    /// The block of the rule whose id has interned number `number`.
    #[inline]
    pub(crate) fn with_rule(mut self, number: u32) -> Self {
        self.names = names(self.resource_number(), number);
        self
    }

    /// With a hint of when to retry (for a [`custom`](Self::custom) block; the `Retry-After` of
    /// a refused HTTP request).
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = compact(after);
        self
    }

    /// Naming the rule `id` that refused (for a [`custom`](Self::custom) block of a rule kept
    /// outside this crate, such as a strict cluster rule of the `spillway` binary).
    ///
    /// ```
    /// use spillway::{BlockError, BlockKind};
    ///
    /// let err = BlockError::custom(BlockKind::Cluster, "orders", 1000.0, 1000.0)
    ///     .with_rule_id("orders-fleet");
    /// assert_eq!(err.rule_id(), Some("orders-fleet"));
    /// ```
    pub fn with_rule_id(self, id: &str) -> Self {
        self.with_rule(crate::intern::intern_numbered(id).number)
    }

    /// [`with_retry_after`](Self::with_retry_after) in nanoseconds, as the block keeps it.
    #[inline]
    pub(crate) fn with_retry_after_nanos(mut self, nanos: u64) -> Self {
        self.retry_after = nanos.min(NONE - 1);
        self
    }

    pub(crate) fn with_waited(mut self, waited: Duration) -> Self {
        self.rare_mut().waited = compact(waited);
        self
    }

    /// Marks a refusal of a kind that is usually a client's quota as not one (a table of keys
    /// that is full): [`Spillway::refusal_quota`](crate::Spillway::refusal_quota) gives none.
    pub(crate) fn without_quota(mut self) -> Self {
        self.rare_mut().no_quota = true;
        self
    }

    /// Whether the refusal may advertise a quota (see [`without_quota`](Self::without_quota)).
    pub(crate) fn may_advertise_quota(&self) -> bool {
        !self.rare.as_ref().is_some_and(|rare| rare.no_quota)
    }

    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(|| {
            Box::new(Rare {
                resource: None,
                waited: NONE,
                no_quota: false,
            })
        })
    }

    fn resource_number(&self) -> u32 {
        self.names as u32
    }

    /// Which check refused the entry.
    pub fn kind(&self) -> BlockKind {
        self.kind
    }

    /// The criticality of the caller, when an adaptive limit's queue refused it (the queue
    /// orders its callers by criticality: see [`Criticality`](crate::Criticality)).
    pub fn criticality(&self) -> Option<crate::Criticality> {
        crate::Criticality::from_rank(usize::from(self.criticality))
    }

    /// The error, naming the refused caller's `criticality` (as an adaptive limit's queue
    /// does; for a refusal made outside this crate, such as a proxy's for a request whose
    /// deadline passed).
    ///
    /// ```
    /// use spillway::{BlockError, BlockKind, Criticality};
    ///
    /// let err = BlockError::custom(BlockKind::Deadline, "search", 120.0, 100.0)
    ///     .with_criticality(Criticality::Sheddable);
    /// assert_eq!(err.criticality(), Some(Criticality::Sheddable));
    /// assert_eq!(
    ///     err.to_string(),
    ///     "search blocked by deadline (sheddable request): observed 120 against threshold 100"
    /// );
    /// ```
    pub fn with_criticality(mut self, criticality: crate::Criticality) -> Self {
        self.criticality = criticality.rank() as u8;
        self
    }

    /// The resource the entry was for.
    pub fn resource(&self) -> &str {
        let number = self.resource_number();
        if number != NOT_INTERNED {
            return crate::intern::name_of(number).unwrap_or_default();
        }
        self.rare
            .as_ref()
            .and_then(|rare| rare.resource.as_deref())
            .unwrap_or_default()
    }

    /// The id of the rule that refused it, when a rule did.
    pub fn rule_id(&self) -> Option<&str> {
        let number = (self.names >> 32) as u32;
        if number == NOT_INTERNED {
            return None;
        }
        crate::intern::name_of(number)
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
        expand(self.rare.as_ref().map_or(NONE, |rare| rare.waited))
    }
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} blocked by {}", self.resource(), self.kind)?;
        if let Some(rule) = self.rule_id() {
            write!(f, " rule {rule}")?;
        }
        if let Some(criticality) = self.criticality() {
            write!(f, " ({criticality} request)")?;
        }
        write!(
            f,
            ": observed {} against threshold {}",
            Rounded(self.observed),
            Rounded(self.threshold)
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

/// A number as a refusal's text shows it: whole numbers as they are, others to two decimals
/// (a warm-up's threshold of 10 / 3 reads `3.33`, not `3.3333333333333335`).
struct Rounded(f64);

impl fmt::Display for Rounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.0;
        if !value.is_finite() || value.fract() == 0.0 {
            return write!(f, "{value}");
        }
        let text = format!("{value:.2}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        // A value that rounds to zero keeps its sign out of the text.
        f.write_str(if text == "-0" { "0" } else { text })
    }
}

impl Error for BlockError {}

impl fmt::Debug for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockError")
            .field("kind", &self.kind)
            .field("criticality", &self.criticality())
            .field("resource", &self.resource())
            .field("rule_id", &self.rule_id())
            .field("observed", &self.observed)
            .field("threshold", &self.threshold)
            .field("retry_after", &self.retry_after())
            .field("waited", &self.waited())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intern::intern_numbered;

    #[test]
    fn a_refusal_is_six_words() {
        // What every refusal writes and its callers move: the interned names keep it small.
        assert!(std::mem::size_of::<BlockError>() <= 48);
        assert!(std::mem::size_of::<Result<crate::Entry<'static>, BlockError>>() <= 48);
    }

    #[test]
    fn interned_names_read_back_and_rare_parts_live_out_of_line() {
        let resource = intern_numbered("block-test-resource");
        let rule = intern_numbered("block-test-rule");
        let err = BlockError::new(BlockKind::Flow, resource.number, 3.0, 2.0)
            .with_rule(rule.number)
            .with_retry_after_nanos(1_500);
        assert_eq!(err.resource(), "block-test-resource");
        assert_eq!(err.rule_id(), Some("block-test-rule"));
        assert_eq!(err.retry_after(), Some(Duration::from_nanos(1_500)));
        assert_eq!(err.waited(), None);
        assert!(err.rare.is_none());

        let waited = err.clone().with_waited(Duration::from_millis(7));
        assert_eq!(waited.resource(), "block-test-resource");
        assert_eq!(waited.waited(), Some(Duration::from_millis(7)));

        let owned = BlockError::custom(BlockKind::Accepts, "127.0.0.1:80", 1.0, 1.0)
            .with_waited(Duration::from_secs(1));
        assert_eq!(owned.resource(), "127.0.0.1:80");
        assert_eq!(owned.rule_id(), None);
        assert_eq!(owned.waited(), Some(Duration::from_secs(1)));
        assert_eq!(
            owned.to_string(),
            "127.0.0.1:80 blocked by accepts: observed 1 against threshold 1 after waiting 1s"
        );
    }

    #[test]
    fn numbers_in_the_text_are_rounded_to_two_decimals() {
        let text = |observed, threshold| {
            BlockError::custom(BlockKind::Flow, "r", observed, threshold).to_string()
        };
        assert_eq!(
            text(3.0, 10.0 / 3.0),
            "r blocked by flow: observed 3 against threshold 3.33"
        );
        assert_eq!(
            text(0.5, 2.0 / 3.0),
            "r blocked by flow: observed 0.5 against threshold 0.67"
        );
        assert_eq!(
            text(1e20, -0.001),
            "r blocked by flow: observed 100000000000000000000 against threshold 0"
        );
        assert_eq!(
            text(f64::INFINITY, 2.999),
            "r blocked by flow: observed inf against threshold 3"
        );
    }
}
