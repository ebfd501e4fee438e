//! Entry and exit with flow rules loaded allocate nothing, whether the entry passes or is
//! blocked. A counting global allocator counts the allocations of this thread only.

mod support;

use spillway::flow::{Behavior, FlowRule};
use std::time::Duration;
use support::counting::{allocations_during, Counting};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn the_counter_sees_allocations() {
    let n = allocations_during(|| drop(std::hint::black_box(vec![1u8; 16])));
    assert_eq!(n, 1);
}

#[test]
fn entry_and_exit_with_rules_allocate_nothing() {
    let (spillway, clock) = support::manual();
    spillway
        .load_flow_rules(vec![
            FlowRule::qps("qps", "r", 100.0),
            FlowRule::in_flight("r", 1_000).with_id("conc"),
            FlowRule::qps("warm", "w", 1_000.0).with_behavior(Behavior::WarmUp {
                period: Duration::from_secs(10),
                cold_factor: 3,
            }),
            FlowRule::qps("throttle", "t", 1_000_000.0)
                .with_behavior(Behavior::throttle(Duration::ZERO)),
        ])
        .unwrap();
    let resources: Vec<_> = ["r", "w", "t"]
        .iter()
        .map(|name| spillway.resource(name).unwrap())
        .collect();
    // Warm up: first entries register origins, slots and thread-locals.
    for resource in &resources {
        drop(resource.entry().origin("app").enter());
    }
    let mut passed = 0;
    let mut blocked = 0;
    let allocations = allocations_during(|| {
        for _ in 0..1_000 {
            for resource in &resources {
                match resource.entry().origin("app").enter() {
                    Ok(entry) => {
                        passed += 1;
                        drop(entry);
                    }
                    Err(error) => {
                        blocked += 1;
                        assert!(error.rule_id().is_some());
                    }
                }
            }
            clock.advance(Duration::from_micros(10));
        }
    });
    assert!(
        passed > 0 && blocked > 0,
        "passed {passed}, blocked {blocked}"
    );
    assert_eq!(allocations, 0);
}
