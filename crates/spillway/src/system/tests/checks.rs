//! Each system check firing and clearing, and the BBR check admitting up to
//! `max_success_qps x min_rt`.

use crate::system::{CpuStrategy, ManualProbe, SystemCheck, SystemRule};
use crate::{BlockKind, Clock, Entry, ManualClock, Spillway};
use std::time::Duration;

pub(super) fn setup() -> (Spillway, ManualClock, ManualProbe) {
    let clock = ManualClock::starting_at_millis(1_700_000_000_000);
    let probe = ManualProbe::new();
    let spillway = Spillway::builder()
        .clock(clock.clone())
        .system_probe(probe.clone())
        .build();
    (spillway, clock, probe)
}

pub(super) fn enter(spillway: &Spillway) -> Result<Entry<'_>, crate::BlockError> {
    spillway.entry("api").inbound().enter()
}

fn blocked_by(spillway: &Spillway) -> Option<SystemCheck> {
    match enter(spillway) {
        Ok(_) => None,
        Err(err) => match err.kind() {
            BlockKind::System(check) => Some(check),
            other => panic!("blocked by {other}, not a system check"),
        },
    }
}

/// Completes `calls` inbound calls at once, each taking `rt`.
pub(super) fn complete(spillway: &Spillway, clock: &ManualClock, calls: usize, rt: Duration) {
    let entries: Vec<_> = (0..calls).map(|_| enter(spillway).unwrap()).collect();
    clock.advance(rt);
    drop(entries);
}

#[test]
fn qps_counts_the_entry_itself_and_clears_when_the_window_moves() {
    let (spillway, clock, _) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("qps").with_qps(3.0)])
        .unwrap();
    for _ in 0..3 {
        drop(enter(&spillway).unwrap());
    }
    let err = enter(&spillway).unwrap_err();
    assert_eq!(err.kind(), BlockKind::System(SystemCheck::Qps));
    assert_eq!((err.observed(), err.threshold()), (3.0, 3.0));
    assert_eq!(err.rule_id(), Some("qps"));
    assert_eq!(err.resource(), "api");
    assert_eq!(
        err.to_string(),
        "api blocked by system qps rule qps: observed 3 against threshold 3"
    );
    clock.advance_millis(1_000);
    assert_eq!(blocked_by(&spillway), None);
    // The refusal was counted as a block on the resource and on the inbound node.
    assert_eq!(spillway.inbound_stats().total_block, 1);
}

#[test]
fn concurrency_is_exact_and_clears_on_exit() {
    let (spillway, _, _) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("c").with_max_concurrency(2)])
        .unwrap();
    let held: Vec<_> = (0..2).map(|_| enter(&spillway).unwrap()).collect();
    let err = enter(&spillway).unwrap_err();
    assert_eq!(err.kind(), BlockKind::System(SystemCheck::Concurrency));
    assert_eq!((err.observed(), err.threshold()), (2.0, 2.0));
    drop(held);
    assert_eq!(blocked_by(&spillway), None);
}

#[test]
fn a_place_taken_for_the_system_rule_goes_back_when_a_flow_rule_refuses() {
    let (spillway, _, _) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("c").with_max_concurrency(1)])
        .unwrap();
    spillway
        .load_flow_rules(vec![crate::flow::FlowRule::qps("none", "api", 0.0)])
        .unwrap();
    for _ in 0..3 {
        assert_eq!(enter(&spillway).unwrap_err().kind(), BlockKind::Flow);
    }
    spillway.load_flow_rules(Vec::new()).unwrap();
    let _only = enter(&spillway).expect("the refused entries gave their places back");
    assert_eq!(blocked_by(&spillway), Some(SystemCheck::Concurrency));
}

#[test]
fn a_queued_entry_keeps_its_system_place_while_it_waits() {
    use crate::flow::{Behavior, FlowRule};
    use crate::Admission;
    let (spillway, clock, _) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("c").with_max_concurrency(2)])
        .unwrap();
    spillway
        .load_flow_rules(vec![FlowRule::qps("pace", "api", 10.0)
            .with_behavior(Behavior::throttle(Duration::from_secs(1)))])
        .unwrap();
    let try_enter = || spillway.entry("api").inbound().try_enter();
    let Ok(Admission::Ready(first)) = try_enter() else {
        panic!("the first entry goes at once");
    };
    let Ok(Admission::Queued(waiting)) = try_enter() else {
        panic!("the second waits 100 ms for its slot");
    };
    // One in flight and one waiting: the limit of 2 is reached (see docs/exactness.md).
    let err = try_enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::System(SystemCheck::Concurrency));
    assert_eq!(err.observed(), 2.0);
    // Given up, the waiting entry gives its place back.
    drop(waiting);
    let Ok(Admission::Queued(again)) = try_enter() else {
        panic!("the place and the slot were given back");
    };
    clock.advance(again.wait());
    let second = again.enter();
    assert!(try_enter().is_err(), "two in flight");
    drop((first, second));
    assert_eq!(blocked_by(&spillway), None);
}

#[test]
fn concurrency_never_exceeds_the_limit_under_threads() {
    use std::sync::atomic::{AtomicU32, Ordering};
    const MAX: u32 = 3;
    let spillway = Spillway::builder().system_probe(ManualProbe::new()).build();
    spillway
        .load_system_rules(vec![
            SystemRule::new("c").with_max_concurrency(u64::from(MAX))
        ])
        .unwrap();
    let inside = AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                for _ in 0..5_000 {
                    if let Ok(entry) = spillway.entry("api").inbound().enter() {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now <= MAX, "{now} in flight over a limit of {MAX}");
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(entry);
                    }
                }
            });
        }
    });
    assert_eq!(spillway.inbound_stats().concurrency, 0);
}

#[test]
fn avg_rt_fires_in_microseconds_and_clears_when_the_window_moves() {
    let (spillway, clock, _) = setup();
    spillway
        .load_system_rules(vec![
            SystemRule::new("rt").with_avg_rt(Duration::from_micros(1_500))
        ])
        .unwrap();
    complete(&spillway, &clock, 1, Duration::from_micros(1_500));
    let at_threshold = enter(&spillway).expect("1.5 ms is not over 1.5 ms");
    clock.advance(Duration::from_micros(1_500));
    drop(at_threshold);
    complete(&spillway, &clock, 1, Duration::from_micros(1_800));
    let err = enter(&spillway).unwrap_err();
    assert_eq!(err.kind(), BlockKind::System(SystemCheck::AvgRt));
    assert_eq!((err.observed(), err.threshold()), (1_600.0, 1_500.0));
    clock.advance_millis(1_000);
    assert_eq!(blocked_by(&spillway), None);
}

#[test]
fn cpu_blocks_outright_while_over_the_threshold() {
    let (spillway, _, probe) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("cpu").with_highest_cpu_usage(0.8)])
        .unwrap();
    assert_eq!(blocked_by(&spillway), None, "unknown (-1) never fires");
    probe.set_cpu_usage(0.8);
    assert_eq!(blocked_by(&spillway), None);
    probe.set_cpu_usage(0.81);
    let err = enter(&spillway).unwrap_err();
    assert_eq!(err.kind(), BlockKind::System(SystemCheck::Cpu));
    assert_eq!((err.observed(), err.threshold()), (0.81, 0.8));
    probe.set_cpu_usage(0.5);
    assert_eq!(blocked_by(&spillway), None);
}

#[test]
fn outbound_entries_are_never_checked() {
    let (spillway, _, probe) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("cpu").with_highest_cpu_usage(0.1)])
        .unwrap();
    probe.set_cpu_usage(1.0);
    assert!(spillway.entry("db").enter().is_ok());
    assert!(enter(&spillway).is_err());
}

/// Fills the pipe: 100 calls of 10 ms complete in one 500 ms bucket, so max success QPS is 200
/// and min RT 10 ms: BBR lets `200 x 0.010 = 2` calls in flight before an entry (Sentinel's `>`).
fn learn_capacity_of_two(spillway: &Spillway, clock: &ManualClock) {
    complete(spillway, clock, 100, Duration::from_millis(10));
    let node = spillway.inbound_node();
    let now = clock.now_nanos();
    assert_eq!(node.max_success_qps(now), 200.0);
    assert_eq!(node.min_rt_micros(now), 10_000);
}

#[test]
fn load_switches_on_bbr_which_admits_up_to_the_pipe() {
    let (spillway, clock, probe) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("load").with_highest_system_load(4.0)])
        .unwrap();
    probe.set_load(1.0);
    learn_capacity_of_two(&spillway, &clock);
    probe.set_load(8.0);
    let held: Vec<_> = (0..3).map(|_| enter(&spillway).unwrap()).collect(); // 0, 1, 2 in flight before
    let err = enter(&spillway).unwrap_err();
    assert_eq!(err.kind(), BlockKind::System(SystemCheck::Load));
    assert_eq!((err.observed(), err.threshold()), (8.0, 4.0));
    drop(held);
    assert_eq!(blocked_by(&spillway), None);
    // Under the load threshold, BBR is off: any concurrency passes.
    probe.set_load(4.0);
    let _many: Vec<_> = (0..10).map(|_| enter(&spillway).unwrap()).collect();
}

#[test]
fn cpu_as_the_bbr_trigger_blocks_only_beyond_the_pipe() {
    let (spillway, clock, probe) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("cpu")
            .with_highest_cpu_usage(0.8)
            .with_cpu_strategy(CpuStrategy::Bbr)])
        .unwrap();
    learn_capacity_of_two(&spillway, &clock);
    probe.set_cpu_usage(0.95);
    let _held: Vec<_> = (0..3).map(|_| enter(&spillway).unwrap()).collect();
    assert_eq!(blocked_by(&spillway), Some(SystemCheck::Cpu));
}

#[test]
fn bbr_recovers_as_soon_as_rt_drops_while_load_stays_high() {
    let (spillway, clock, probe) = setup();
    spillway
        .load_system_rules(vec![SystemRule::new("load").with_highest_system_load(4.0)])
        .unwrap();
    probe.set_load(1.0);
    learn_capacity_of_two(&spillway, &clock);
    // The downstream slows down: calls pile up, the load climbs, BBR sheds the excess.
    probe.set_load(12.0);
    let stuck: Vec<_> = (0..3).map(|_| enter(&spillway).unwrap()).collect();
    assert_eq!(blocked_by(&spillway), Some(SystemCheck::Load));
    clock.advance_millis(300);
    drop(stuck); // the slow calls finally end
                 // The downstream is fast again; the load (a lagging signal) is still 12. Every call that
                 // now takes 1 ms passes at once: load-based control would still be refusing them.
    for _ in 0..50 {
        let entry = enter(&spillway).expect("admitted the moment RT dropped");
        clock.advance_millis(1);
        drop(entry);
    }
    assert_eq!(probe_load(&probe), 12.0);
}

fn probe_load(probe: &ManualProbe) -> f64 {
    crate::system::SystemProbe::load(probe)
}
