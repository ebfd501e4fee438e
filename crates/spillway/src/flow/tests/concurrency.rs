use crate::flow::ConcurrencyLimit;
use std::sync::atomic::{AtomicU64, Ordering};

#[test]
fn batch_counts_against_the_limit_but_takes_one_place() {
    let limit = ConcurrencyLimit::new(3.0);
    assert!(limit.try_acquire(2));
    assert!(!limit.try_acquire(3)); // 1 + 3 > 3
    assert!(limit.try_acquire(2)); // 1 + 2 <= 3
    assert_eq!(limit.in_flight(), 2);
}

#[test]
fn eight_threads_never_exceed_the_limit() {
    let limit = ConcurrencyLimit::new(3.0);
    let inside = AtomicU64::new(0);
    let most = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..20_000 {
                    if limit.try_acquire(1) {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        limit.release();
                    }
                }
            });
        }
    });
    assert!(most.load(Ordering::SeqCst) <= 3);
    assert_eq!(limit.in_flight(), 0);
}

/// A node's numbers, fixed: what a controller reads.
struct InFlight(i64);

impl crate::flow::FlowStats for InFlight {
    fn pass_qps(&self, _now_nanos: u64) -> f64 {
        0.0
    }
    fn previous_pass_qps(&self, _now_nanos: u64) -> f64 {
        0.0
    }
    fn concurrency(&self) -> i64 {
        self.0
    }
}

#[test]
fn the_thread_grade_check_reads_any_node_with_java_arithmetic() {
    use crate::flow::Decision::{Block, Pass};
    let limit = ConcurrencyLimit::new(3.0);
    // curThreadNum + acquire > count blocks; equal passes.
    assert_eq!(limit.check(&InFlight(0), 3), Pass);
    assert_eq!(limit.check(&InFlight(2), 1), Pass);
    assert_eq!(limit.check(&InFlight(2), 2), Block);
    assert_eq!(limit.check(&InFlight(3), 0), Pass);
    assert_eq!(limit.check(&InFlight(4), 0), Block);
    // A fractional count: 2 + 1 > 2.5.
    assert_eq!(ConcurrencyLimit::new(2.5).check(&InFlight(2), 1), Block);
    assert_eq!(ConcurrencyLimit::new(2.5).check(&InFlight(1), 1), Pass);
    // (int) of a long keeps the low 32 bits: 2^32 + 1 reads as 1.
    assert_eq!(limit.check(&InFlight((1 << 32) + 1), 1), Pass);
    // int overflow wraps: Integer.MAX_VALUE + 1 is negative, so it passes, as in Java.
    assert_eq!(limit.check(&InFlight(i64::from(i32::MAX)), 1), Pass);
    // A count of 0 blocks every acquire of 1 or more, and passes an acquire of 0 at 0.
    assert_eq!(ConcurrencyLimit::new(0.0).check(&InFlight(0), 1), Block);
    assert_eq!(ConcurrencyLimit::new(0.0).check(&InFlight(0), 0), Pass);
    // Its own places are not involved.
    assert!(limit.try_acquire(1));
    assert_eq!(limit.check(&InFlight(0), 3), Pass);
}
