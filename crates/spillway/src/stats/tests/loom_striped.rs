use crate::stats::StripedCounter;
use loom::sync::Arc;
use loom::thread;

/// Adds racing a `take` are each counted exactly once: by the take or by the later sum.
#[test]
fn take_loses_no_concurrent_add() {
    loom::model(|| {
        let counter = Arc::new(StripedCounter::with_stripes(2));
        let adders: Vec<_> = (0..2)
            .map(|_| {
                let counter = counter.clone();
                thread::spawn(move || {
                    counter.add(1);
                    counter.add(2);
                })
            })
            .collect();
        let taken = counter.take();
        for adder in adders {
            adder.join().unwrap();
        }
        assert_eq!(taken + counter.sum(), 6);
    });
}

/// Threads sharing one stripe do not lose adds.
#[test]
fn shared_stripe_adds_are_all_counted() {
    loom::model(|| {
        let counter = Arc::new(StripedCounter::with_stripes(1));
        let other = {
            let counter = counter.clone();
            thread::spawn(move || counter.add(5))
        };
        counter.sub(2);
        other.join().unwrap();
        assert_eq!(counter.sum(), 3);
    });
}
