//! The entry path as event traces on a manual clock.

mod support;

use spillway::{
    BlockKind, OverflowPolicy, Spillway, TrafficType, OVERFLOW_ORIGIN, OVERFLOW_RESOURCE,
};
use support::{manual, T0_MS};

#[test]
fn entry_counts_pass_concurrency_and_completion() {
    let (spillway, clock) = manual();
    let orders = spillway.resource("orders").unwrap();
    let first = orders.entry().enter().unwrap();
    let second = orders.entry().count(3).enter().unwrap();
    let stats = orders.stats();
    assert_eq!(stats.pass_qps, 4.0);
    assert_eq!(
        stats.concurrency, 2,
        "concurrency counts entries, not permits"
    );
    assert_eq!(stats.total_success, 0);

    clock.advance_millis(10);
    drop(first);
    clock.advance_millis(20);
    drop(second);

    let stats = orders.stats();
    assert_eq!(stats.concurrency, 0);
    assert_eq!(stats.total_success, 4);
    // Sentinel's avg RT: RT summed once per completion call, divided by completed permits.
    assert_eq!(stats.avg_rt_micros, (10_000.0 + 30_000.0) / 4.0);
    assert_eq!(stats.min_rt_micros, 10_000);
    assert_eq!(stats.success_qps, 4.0);
}

#[test]
fn rt_has_microsecond_resolution() {
    let (spillway, clock) = manual();
    let resource = spillway.resource("fast").unwrap();
    for _ in 0..4 {
        let entry = resource.entry().enter().unwrap();
        clock.advance(std::time::Duration::from_micros(200));
        entry.exit();
    }
    let stats = resource.stats();
    assert_eq!(stats.avg_rt_micros, 200.0);
    assert_eq!(stats.min_rt_micros, 200);
}

#[test]
fn errors_are_counted_with_the_completion() {
    let (spillway, clock) = manual();
    let mut entry = spillway.entry("db").enter().unwrap();
    assert!(!entry.is_error());
    entry.mark_error();
    clock.advance_millis(1);
    drop(entry);
    let mut ok = spillway.entry("db").enter().unwrap();
    ok.set_error(false);
    drop(ok);
    let stats = spillway.resource("db").unwrap().stats();
    assert_eq!((stats.total_success, stats.total_error), (2, 1));
    assert_eq!(stats.error_qps, 1.0);
}

#[test]
fn statistics_slide_with_the_clock() {
    let (spillway, clock) = manual();
    let resource = spillway.resource("r").unwrap();
    for _ in 0..5 {
        drop(resource.entry().enter().unwrap());
    }
    clock.advance_millis(1_000);
    for _ in 0..2 {
        drop(resource.entry().enter().unwrap());
    }
    let stats = resource.stats();
    assert_eq!(stats.pass_qps, 2.0);
    assert_eq!(stats.previous_pass_qps, 5);
    assert_eq!(stats.total_pass, 7);
    clock.advance_millis(60_000);
    let stats = resource.stats();
    assert_eq!(
        (stats.pass_qps, stats.total_pass, stats.previous_pass_qps),
        (0.0, 0, 0)
    );
}

#[test]
fn max_success_qps_scales_the_busiest_bucket() {
    let (spillway, clock) = manual();
    let resource = spillway.resource("r").unwrap();
    for _ in 0..3 {
        drop(resource.entry().enter().unwrap());
    }
    clock.advance_millis(500);
    for _ in 0..5 {
        drop(resource.entry().enter().unwrap());
    }
    // Sentinel: maxSuccess (5) * sampleCount (2) / intervalInSec (1).
    assert_eq!(resource.stats().max_success_qps, 10.0);
    assert_eq!(resource.node().max_success_qps(clock_now(&spillway)), 10.0);
}

fn clock_now(spillway: &Spillway) -> u64 {
    spillway.clock().now_nanos()
}

#[test]
fn origins_get_their_own_nodes_up_to_the_cap() {
    let (_, clock) = manual();
    let spillway = Spillway::builder()
        .clock(clock)
        .max_origins_per_resource(2)
        .build();
    let resource = spillway.resource("r").unwrap();
    for origin in ["a", "b", "a", "c", "d"] {
        drop(resource.entry().origin(origin).enter().unwrap());
    }
    assert_eq!(resource.origin_stats("a").unwrap().total_pass, 2);
    assert_eq!(resource.origin_stats("b").unwrap().total_pass, 1);
    assert!(resource.origin_stats("c").is_none());
    assert_eq!(
        resource.origin_stats(OVERFLOW_ORIGIN).unwrap().total_pass,
        2
    );
    assert_eq!(resource.origin_overflows(), 2);
    assert_eq!(resource.stats().total_pass, 5);
}

#[test]
fn a_caller_a_rule_names_keeps_its_own_node_past_the_cap() {
    use spillway::flow::{FlowRule, LimitApp, Strategy};
    let (_, clock) = manual();
    let spillway = Spillway::builder()
        .clock(clock)
        .max_origins_per_resource(1_024)
        .build();
    spillway
        .load_flow_rules(vec![
            FlowRule::qps("batch-20", "r", 20.0).with_limit_app(LimitApp::Origin("batch".into())),
            FlowRule::qps("chained", "r", 5.0).with_strategy(Strategy::Chain {
                entrance: "late-door".into(),
            }),
        ])
        .unwrap();
    let resource = spillway.resource("r").unwrap();
    // 5,000 made-up callers and entrances fill the cap; the rest share the overflow node.
    for n in 0..5_000 {
        let name = format!("made-up-{n}");
        drop(
            resource
                .entry()
                .origin(&name)
                .entrance(&name)
                .enter()
                .unwrap(),
        );
    }
    assert_eq!(resource.origin_overflows(), 5_000 - 1_024);
    // `batch` first calls now, in the same second, 10 times, under its own 20/s: none refused
    // (in the overflow node, with its 3,976 passes this second, every one would be), and
    // counted on its own node.
    for _ in 0..10 {
        drop(
            resource
                .entry()
                .origin("batch")
                .enter()
                .expect("under its own limit"),
        );
    }
    assert_eq!(resource.origin_stats("batch").unwrap().total_pass, 10);
    assert_eq!(resource.origin_overflows(), 5_000 - 1_024);
    // A caller no rule names still shares the overflow node.
    drop(resource.entry().origin("nobody").enter().unwrap());
    assert!(resource.origin_stats("nobody").is_none());
    assert_eq!(resource.origin_overflows(), 5_000 - 1_024 + 1);
    // The chain rule's entrance has its own node too: its 6th call in a second is refused.
    for _ in 0..5 {
        drop(resource.entry().entrance("late-door").enter().unwrap());
    }
    assert_eq!(
        resource
            .entry()
            .entrance("late-door")
            .enter()
            .unwrap_err()
            .kind(),
        BlockKind::Flow
    );
}

#[test]
fn inbound_entries_feed_the_global_inbound_node() {
    let (spillway, _) = manual();
    drop(
        spillway
            .entry("in")
            .traffic(TrafficType::Inbound)
            .enter()
            .unwrap(),
    );
    drop(spillway.entry("in2").inbound().count(2).enter().unwrap());
    drop(spillway.entry("out").enter().unwrap());
    let inbound = spillway.inbound_stats();
    assert_eq!(inbound.total_pass, 3);
    assert_eq!(inbound.total_success, 3);
    assert_eq!(inbound.concurrency, 0);
}

#[test]
fn inbound_refusals_and_exits_count_on_the_global_inbound_node_too() {
    let (spillway, clock) = manual();
    spillway
        .load_flow_rules(vec![spillway::flow::FlowRule::qps("one", "in", 1.0)])
        .unwrap();
    let mut first = spillway.entry("in").inbound().enter().unwrap();
    // Refused by the rule: the first refusal readies the thread's lines, the next ones take the
    // short path that writes them directly.
    for _ in 0..3 {
        let refused = spillway.entry("in").inbound().enter().unwrap_err();
        assert_eq!(refused.kind(), BlockKind::Flow);
    }
    // Outbound: counted on the resource only.
    spillway.entry("in").enter().unwrap_err();
    clock.advance_millis(30);
    first.mark_error();
    drop(first);
    // A second inbound exit, on the lines the first one readied.
    clock.advance_millis(1_000);
    drop(spillway.entry("in").inbound().enter().unwrap());

    let inbound = spillway.inbound_stats();
    assert_eq!(inbound.total_pass, 2);
    assert_eq!(inbound.total_block, 3);
    assert_eq!(inbound.total_success, 2);
    assert_eq!(inbound.total_error, 1);
    assert_eq!(inbound.concurrency, 0);
    let resource = spillway.resource("in").unwrap().stats();
    assert_eq!(resource.total_pass, 2);
    assert_eq!(resource.total_block, 4);
    assert_eq!(resource.total_success, 2);
    assert_eq!(resource.total_error, 1);
    assert_eq!(resource.concurrency, 0);
}

#[test]
fn full_registry_overflows_into_a_counted_resource() {
    let (_, clock) = manual();
    let spillway = Spillway::builder().clock(clock).max_resources(2).build();
    drop(spillway.entry("a").enter().unwrap());
    drop(spillway.entry("b").enter().unwrap());
    let c = spillway.entry("c").enter().unwrap();
    assert_eq!(c.resource_name(), OVERFLOW_RESOURCE);
    drop(c);
    drop(spillway.entry("a").enter().unwrap());
    assert_eq!(spillway.resource_count(), 2);
    assert_eq!(spillway.resource_overflows(), 1);
    let snapshot = spillway.snapshot();
    let names: Vec<&str> = snapshot.resources.iter().map(|r| &*r.name).collect();
    assert_eq!(names, ["a", "b", OVERFLOW_RESOURCE]);
    assert_eq!(snapshot.resources[2].stats.total_pass, 1);
    assert_eq!(snapshot.resource_overflows, 1);
}

#[test]
fn full_registry_can_reject_instead() {
    let (_, clock) = manual();
    let spillway = Spillway::builder()
        .clock(clock)
        .max_resources(1)
        .overflow_policy(OverflowPolicy::Reject)
        .build();
    drop(spillway.entry("a").enter().unwrap());
    let err = spillway.entry("b").enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::ResourceCap);
    assert_eq!(err.resource(), "b");
    assert_eq!(err.rule_id(), None);
    assert_eq!(err.retry_after(), None);
    assert_eq!(
        err.to_string(),
        "b blocked by resource_cap: observed 1 against threshold 1"
    );
    assert!(spillway.resource("b").is_err());
    assert_eq!(spillway.resource_overflows(), 2);
    // Existing resources are unaffected.
    assert!(spillway.entry("a").enter().is_ok());
}

#[test]
fn owned_entries_complete_on_another_thread() {
    let (spillway, clock) = manual();
    let entry = spillway.entry("jobs").origin("cron").enter_owned().unwrap();
    assert_eq!(entry.resource().name(), "jobs");
    clock.advance_millis(7);
    std::thread::spawn(move || drop(entry)).join().unwrap();
    let resource = spillway.resource("jobs").unwrap();
    let stats = resource.stats();
    assert_eq!((stats.concurrency, stats.total_success), (0, 1));
    assert_eq!(stats.avg_rt_micros, 7_000.0);
    assert_eq!(resource.origin_stats("cron").unwrap().total_success, 1);
}

#[test]
fn snapshot_reads_every_resource_and_origin() {
    let (spillway, clock) = manual();
    drop(spillway.entry("a").origin("x").enter().unwrap());
    let _held = spillway.entry("b").enter().unwrap();
    let snapshot = spillway.snapshot();
    assert_eq!(snapshot.at_nanos, T0_MS * 1_000_000);
    assert_eq!(snapshot.resources.len(), 2);
    assert_eq!(&*snapshot.resources[0].origins[0].0, "x");
    assert_eq!(snapshot.resources[0].origins[0].1.total_pass, 1);
    assert_eq!(snapshot.resources[1].stats.concurrency, 1);
    clock.advance_millis(1);
}

#[test]
fn global_instance_is_shared() {
    let a = Spillway::global();
    let b = Spillway::global();
    drop(a.entry("global-test").enter().unwrap());
    assert!(b.resource("global-test").unwrap().stats().total_pass >= 1);
}

#[test]
fn previous_second_is_a_complete_second() {
    let (spillway, clock) = manual();
    let resource = spillway.resource("r").unwrap();
    for ms in [0, 300, 999] {
        clock.set_nanos((T0_MS + ms) * 1_000_000);
        let mut entry = resource.entry().count(2).enter().unwrap();
        clock.advance_millis(1);
        if ms == 300 {
            entry.mark_error();
        }
    }
    clock.set_nanos((T0_MS + 1_500) * 1_000_000);
    let second = resource
        .node()
        .previous_second(spillway.clock().now_nanos());
    // The entry admitted at 999 ms completes at 1000 ms: its completion counts in the next second.
    assert_eq!((second.pass, second.success, second.error), (6, 4, 2));
    assert_eq!((second.rt_micros, second.min_rt_micros), (2_000, 1_000));
}
