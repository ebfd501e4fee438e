//! A prioritized entry's borrowed pass, read through every node statistic over the next minute,
//! against what Sentinel 1.8.9 reads (`StatisticNode`: `addWaitingRequest` books the pass in the
//! second window's bucket it borrows from; `addOccupiedPass` adds a pass and an occupied pass
//! to the minute window at once). T0 is a whole second: the second window's buckets are
//! [T0, T0 + 500) and [T0 + 500, T0 + 1000), the minute window's [T0, T0 + 1000).

mod support;

use spillway::flow::FlowRule;
use spillway::{Admission, Spillway};
use support::manual;

/// The statistics Sentinel's node exposes, as `(passQps, blockQps, occupiedPassQps,
/// previousPassQps, totalPass, totalBlock, totalRequest)`.
fn reads(spillway: &Spillway) -> (f64, f64, f64, u64, u64, u64, u64) {
    let stats = spillway.resource("r").unwrap().stats();
    (
        stats.pass_qps,
        stats.block_qps,
        stats.occupied_pass_qps,
        stats.previous_pass_qps,
        stats.total_pass,
        stats.total_block,
        stats.total_request(),
    )
}

#[test]
fn a_borrowed_pass_reaches_the_minute_window_at_once_and_the_second_window_when_due() {
    let (spillway, clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("q", "r", 2.0)])
        .unwrap();

    // T0 + 100: two passes fill the limit.
    clock.advance_millis(100);
    let held: Vec<_> = (0..2)
        .map(|_| spillway.entry("r").enter().unwrap())
        .collect();
    drop(held);
    assert_eq!(reads(&spillway), (2.0, 0.0, 0.0, 0, 2, 0, 2));

    // T0 + 600: a normal entry is refused; a prioritized one borrows from the bucket that
    // starts at T0 + 1000 (the one holding the two passes leaves then) and waits 400 ms.
    clock.advance_millis(500);
    assert!(spillway.entry("r").enter().is_err());
    let Admission::Queued(pending) = spillway.entry("r").prioritized().try_enter().unwrap() else {
        panic!("expected to borrow");
    };
    assert_eq!(pending.wait().as_millis(), 400);
    // While it waits: the second window does not count it yet; the minute window does, as a
    // pass (totalPass 3, totalRequest 4); the occupied-pass rate reads 0, as Sentinel's does.
    assert_eq!(reads(&spillway), (2.0, 1.0, 0.0, 0, 3, 1, 4));
    let waiting = spillway
        .resource("r")
        .unwrap()
        .node()
        .second_window()
        .waiting(spillway::Clock::now_nanos(&clock));
    assert_eq!(waiting, 1);

    // T0 + 1000: the borrowed bucket is current and holds the pass; the first bucket was
    // recycled for it, and the refusal's bucket is still in the window. The minute window's
    // previous bucket (the second before) holds the 3 passes.
    clock.advance_millis(400);
    drop(pending);
    assert_eq!(reads(&spillway), (1.0, 1.0, 0.0, 3, 3, 1, 4));

    // T0 + 1500 and T0 + 2000: the second window empties; the minute window keeps the totals.
    clock.advance_millis(500);
    assert_eq!(reads(&spillway), (1.0, 0.0, 0.0, 3, 3, 1, 4));
    clock.advance_millis(500);
    assert_eq!(reads(&spillway), (0.0, 0.0, 0.0, 0, 3, 1, 4));

    // T0 + 59_999: the bucket of T0 is still in the minute window; at T0 + 60_000 it is not.
    clock.advance_millis(57_999);
    assert_eq!(reads(&spillway), (0.0, 0.0, 0.0, 0, 3, 1, 4));
    clock.advance_millis(1);
    assert_eq!(reads(&spillway), (0.0, 0.0, 0.0, 0, 0, 0, 0));
    let minute = spillway
        .resource("r")
        .unwrap()
        .node()
        .minute_window()
        .snapshot(spillway::Clock::now_nanos(&clock));
    assert_eq!((minute.pass, minute.occupied_pass), (0, 0));
}
