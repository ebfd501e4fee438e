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
