use super::{at_ms, node};
use crate::flow::{Decision, QpsReject};

#[test]
fn admits_count_per_window_then_blocks() {
    let node = node();
    let limit = QpsReject::new(5.0);
    let mut passed = 0;
    for i in 0..10 {
        let now = at_ms(i);
        if limit.check(&node, now, 1) == Decision::Pass {
            node.add_pass(now, 1);
            passed += 1;
        }
    }
    assert_eq!(passed, 5);
    // Sentinel's 2 x 500 ms window: at T0+1000 the first bucket has left, so 5 more pass.
    assert_eq!(limit.check(&node, at_ms(999), 1), Decision::Block);
    assert_eq!(limit.check(&node, at_ms(1_000), 1), Decision::Pass);
}

#[test]
fn truncates_the_qps_and_counts_the_batch() {
    let node = node();
    node.add_pass(at_ms(0), 4);
    let limit = QpsReject::new(5.5);
    // (int)4 + 1 = 5 <= 5.5; 4 + 2 = 6 > 5.5.
    assert_eq!(limit.check(&node, at_ms(0), 1), Decision::Pass);
    assert_eq!(limit.check(&node, at_ms(0), 2), Decision::Block);
    assert_eq!(
        QpsReject::new(0.0).check(&node, at_ms(0), 0),
        Decision::Block
    );
}

#[test]
fn zero_count_blocks_everything() {
    let node = node();
    assert_eq!(
        QpsReject::new(0.0).check(&node, at_ms(0), 1),
        Decision::Block
    );
}
