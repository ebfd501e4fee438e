//! Each strategy: closed -> open -> half-open -> open again -> half-open -> closed.

use crate::breaker::{BreakerEvent, BreakerRule, BreakerState, BreakerStrategy};
use crate::{BlockKind, ManualClock, Spillway};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(super) const RETRY: Duration = Duration::from_secs(5);

/// A state change as the tests compare it: from, to, and the value that opened it.
pub(super) type Change = (BreakerState, BreakerState, Option<f64>);

pub(super) struct Setup {
    pub(super) spillway: Spillway,
    pub(super) clock: ManualClock,
    pub(super) events: Arc<Mutex<Vec<Change>>>,
}

pub(super) fn setup(rules: Vec<BreakerRule>) -> Setup {
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    let spillway = Spillway::new_with_clock(clock.clone());
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    spillway.on_breaker_state_change(move |event: &BreakerEvent| {
        sink.lock()
            .unwrap()
            .push((event.from, event.to, event.observed));
    });
    spillway.load_breaker_rules(rules).unwrap();
    Setup {
        spillway,
        clock,
        events,
    }
}

impl Setup {
    /// One call to `api` taking `rt`, failed or not; `false` if it was refused.
    pub(super) fn call(&self, rt: Duration, error: bool) -> bool {
        match self.spillway.entry("api").enter() {
            Ok(mut entry) => {
                self.clock.advance(rt);
                entry.set_error(error);
                true
            }
            Err(err) => {
                assert_eq!(err.kind(), BlockKind::Breaker);
                false
            }
        }
    }

    pub(super) fn state(&self, id: &str) -> BreakerState {
        self.spillway.breaker_state(id).unwrap()
    }

    pub(super) fn events(&self) -> Vec<Change> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

const FAST: Duration = Duration::from_millis(10);
const SLOW: Duration = Duration::from_millis(150);

use BreakerState::{Closed, HalfOpen, Open};

/// Runs the common cycle once the breaker has just opened: refused until the retry timeout,
/// a failing probe reopens, a good probe closes.
fn recover(s: &Setup, bad: impl Fn(&Setup) -> bool, good: impl Fn(&Setup) -> bool) {
    assert_eq!(s.state("b"), Open);
    let err = s.spillway.entry("api").enter().unwrap_err();
    assert_eq!(err.rule_id(), Some("b"));
    assert_eq!(err.retry_after(), Some(RETRY));
    s.clock.advance(RETRY - Duration::from_nanos(1));
    assert!(
        !s.call(FAST, false),
        "still open a nanosecond before the retry timeout"
    );
    s.clock.advance(Duration::from_nanos(1));
    assert!(bad(s), "the probe passes");
    assert_eq!(s.state("b"), Open, "a failed probe reopens");
    assert!(!s.call(FAST, false));
    s.clock.advance(RETRY);
    assert!(good(s));
    assert_eq!(s.state("b"), Closed);
    assert!(s.call(FAST, false));
}

#[test]
fn slow_call_ratio() {
    let s = setup(vec![BreakerRule::new(
        "b",
        "api",
        BreakerStrategy::SlowCallRatio {
            max_rt: Duration::from_millis(100),
            slow_ratio_threshold: 0.5,
        },
        RETRY,
    )]);
    // 2 of 4: under the minimum of 5 requests, nothing happens.
    for rt in [SLOW, FAST, SLOW, FAST] {
        assert!(s.call(rt, false));
    }
    assert_eq!(s.state("b"), Closed);
    assert!(
        s.call(Duration::from_millis(100), false),
        "exactly max_rt is not slow"
    );
    assert_eq!(s.state("b"), Closed, "2 of 5 slow: 0.4");
    assert!(s.call(SLOW, false)); // 3 of 6 = 0.5: not over
    assert_eq!(s.state("b"), Closed);
    assert!(s.call(SLOW, false)); // 4 of 7 > 0.5
    assert_eq!(s.events(), [(Closed, Open, Some(4.0 / 7.0))]);
    recover(&s, |s| s.call(SLOW, false), |s| s.call(FAST, true));
    assert_eq!(
        s.events(),
        [
            (Open, HalfOpen, None),
            (HalfOpen, Open, Some(1.0)),
            (Open, HalfOpen, None),
            (HalfOpen, Closed, None),
        ]
    );
}

#[test]
fn slow_ratio_of_one_opens_when_every_call_is_slow() {
    let s = setup(vec![BreakerRule::new(
        "b",
        "api",
        BreakerStrategy::SlowCallRatio {
            max_rt: Duration::from_millis(100),
            slow_ratio_threshold: 1.0,
        },
        RETRY,
    )]);
    for _ in 0..5 {
        assert!(s.call(SLOW, false));
    }
    assert_eq!(
        s.state("b"),
        Open,
        "Sentinel opens at a ratio equal to a threshold of 1"
    );
}

#[test]
fn error_ratio() {
    let s = setup(vec![BreakerRule::new(
        "b",
        "api",
        BreakerStrategy::ErrorRatio { threshold: 0.4 },
        RETRY,
    )]);
    for error in [true, false, false, true, false] {
        assert!(s.call(FAST, error)); // 2 of 5 = 0.4: not over
    }
    assert_eq!(s.state("b"), Closed);
    assert!(s.call(FAST, true)); // 3 of 6
    assert_eq!(s.events(), [(Closed, Open, Some(0.5))]);
    recover(&s, |s| s.call(FAST, true), |s| s.call(SLOW, false));
}

#[test]
fn error_count() {
    let s = setup(vec![BreakerRule::new(
        "b",
        "api",
        BreakerStrategy::ErrorCount { threshold: 2 },
        RETRY,
    )
    .with_min_request_amount(1)]);
    assert!(s.call(FAST, true));
    assert!(s.call(FAST, true));
    assert_eq!(s.state("b"), Closed, "2 errors: not over 2");
    assert!(s.call(FAST, true));
    assert_eq!(s.events(), [(Closed, Open, Some(3.0))]);
    recover(&s, |s| s.call(FAST, true), |s| s.call(FAST, false));
}

#[test]
fn the_window_slides_instead_of_forgetting_at_once() {
    // Errors at 0.95 s and 1.05 s: Sentinel's single one-second bucket splits them (3 | 1);
    // a sliding window of ten 100 ms buckets counts the four together.
    let s = setup(vec![BreakerRule::new(
        "b",
        "api",
        BreakerStrategy::ErrorCount { threshold: 3 },
        RETRY,
    )
    .with_min_request_amount(1)]);
    s.clock.advance_millis(950);
    for _ in 0..3 {
        assert!(s.call(Duration::ZERO, true));
    }
    s.clock.advance_millis(100);
    assert!(s.call(Duration::ZERO, true));
    assert_eq!(s.state("b"), Open);
}

#[test]
fn old_errors_leave_the_window_bucket_by_bucket() {
    let s = setup(vec![BreakerRule::new(
        "b",
        "api",
        BreakerStrategy::ErrorCount { threshold: 2 },
        RETRY,
    )
    .with_min_request_amount(1)]);
    assert!(s.call(Duration::ZERO, true)); // t = 0
    s.clock.advance_millis(500);
    assert!(s.call(Duration::ZERO, true)); // t = 0.5 s
    s.clock.advance_millis(500);
    // t = 1.0 s: the first error's bucket has left, the second's has not.
    assert!(s.call(Duration::ZERO, true));
    assert_eq!(s.state("b"), Closed, "2 errors in the window");
    assert!(s.call(Duration::ZERO, true));
    assert_eq!(s.state("b"), Open, "3 errors in the window");
}
