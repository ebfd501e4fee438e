//! What the lab's test files share.

use spillway_lab::RunResult;

/// Asserts that every attempt of `run` ended exactly once, as a request or one of its (at most
/// two) retries, admitted or refused.
pub(crate) fn assert_conserved(run: &RunResult) {
    let c = &run.counts;
    let context = format!("{} {} {}: {c:?}", run.scenario, run.strategy, run.load);
    // Every attempt ends exactly once: answered, refused or timed out.
    assert_eq!(
        c.answered + c.refused + c.timed_out,
        c.attempts,
        "{context}"
    );
    assert_eq!(c.failed, 0, "{context}");
    // Every attempt is a request or one of its retries, and is admitted or refused.
    assert_eq!(c.requests + c.retries, c.attempts, "{context}");
    assert_eq!(c.admitted + c.refused, c.attempts, "{context}");
    assert!(c.answered <= c.admitted, "{context}");
    // At most two retries a request.
    assert!(c.attempts <= 3 * c.requests + 2 * 200, "{context}");
}
